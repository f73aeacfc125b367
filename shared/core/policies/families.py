"""Policy families: how a family's published model travels to the devices and back.

Every policy of the registry (``shared.core.policies.registry``) belongs to one family. The family
fixes the model the policy publishes, its wire message (spec §4), how a device reads that message
back (checked against the task: a message that does not fit is refused, never guessed at), and
what a user's decide request carries. Policies of one family share all of that, so a new policy
of an existing family needs no change here, on the device, in the analyzer's feed or in the demo.

    linear   Model (θ̃, V, β): argmax ⟨x, θ̃⟩ + β ‖x‖_{V⁻¹} over the K features decide carries
    glb      GLBModel: a linear model plus θ̂ (Zheng et al. Alg. 3), the report's anchor
    phase    PhaseModel of a fixed arm set (Azize–Basu Alg. 3): the device draws a ~ π_ℓ
    arms     ArmModel of a multi-armed task: indices, probabilities or an episode's arm
    bco      BCOModel: the point y the device plays around (Zheng et al. Alg. 1, 2, 4)

The device-side halves (a decision's state, a report row) need the device's own checks and
errors; they live in ``services.device.families``, one handler per family named here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar, cast

import numpy as np

from privbandit.shared.core.policies.adar_gope import PhaseModel
from privbandit.shared.core.policies.arm_model import ArmModel
from privbandit.shared.core.policies.base import PublishedModel
from privbandit.shared.core.policies.bco_model import BCOModel
from privbandit.shared.core.policies.model import GLBModel, Model
from privbandit.shared.protocol.messages import (
    AnyModelMessage,
    ArmModelMessage,
    BCOModelMessage,
    GLBModelMessage,
    ModelMessage,
    PhaseModelMessage,
)

ModelT = TypeVar("ModelT", bound=PublishedModel)
MessageT = TypeVar("MessageT", bound=AnyModelMessage)


class ModelMismatch(ValueError):
    """A model message that does not fit its task (the device ignores it and keeps its model)."""


class Family(ABC, Generic[ModelT, MessageT]):
    """The interface every family implements (one instance per family, in ``FAMILIES``)."""

    name: ClassVar[str]
    # The wire form of the family's models (``GET /v1/tasks/{task}/model`` and the stream).
    message: ClassVar[type[AnyModelMessage]]
    # Whether decide carries the K feature vectors (else the device picks from the model).
    takes_features: ClassVar[bool]
    # The environment the demo's simulated users of such a task live in.
    demo_env: ClassVar[str]
    # The simulator loop that runs its policies (``privbandit.simulation``): ``contextual`` (the
    # vectorised ``core.simulator``), ``mab`` (arm by arm) or ``bco`` (convex optimisation); a
    # registry entry may name its own (``lplr``).
    simulator: ClassVar[str]
    # Whether the policy's ledger changes with every report (the arms family's per-user
    # fractions, used and declined): the analyzer then asks for it each time instead of
    # computing it once at start-up.
    ledger_moves: ClassVar[bool]

    def __init_subclass__(cls, *, name: str, message: type[AnyModelMessage],
                          takes_features: bool, demo_env: str, simulator: str = "contextual",
                          ledger_moves: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.name, cls.message = name, message
        cls.takes_features, cls.demo_env = takes_features, demo_env
        cls.simulator, cls.ledger_moves = simulator, ledger_moves

    def publish(self, task: str, model: ModelT) -> MessageT:
        """The wire message of a published model (by default the model's ``to_dict`` fields)."""
        # ``message`` is the subclass's MessageT (a ClassVar cannot be generic).
        return cast(MessageT, self.message(task=task, **model.to_dict()))

    @abstractmethod
    def read_back(self, policy: Any, K: int, msg: AnyModelMessage) -> ModelT:
        """The model a message describes on a device of a task with policy config ``policy``
        and K arms; ``ModelMismatch`` (what does not fit) if the message is not one of them."""

    def demo_users(self, policy: Mapping[str, Any], d: int, K: int,
                   rng: np.random.Generator) -> Any:
        """The environment the demo's simulated users of a task of this family live in
        (``demo_env`` at the task's d and K; ``policy``: the task's policy fields)."""
        from privbandit.shared.core.environments import make_environment

        return make_environment(self.demo_env, d, K, rng)

    def parse(self, data: bytes | str) -> AnyModelMessage:
        """A message of this family from its JSON."""
        return self.message.model_validate_json(data)


def _mismatch(msg: AnyModelMessage, what: str) -> ModelMismatch:
    """``what`` is wrong with ``msg`` (the device logs "model v… for <task> <what>")."""
    return ModelMismatch(what)


class LinearFamily(Family[Model, ModelMessage], name="linear", message=ModelMessage,
                   takes_features=True, demo_env="linear"):

    def publish(self, task: str, model: Model) -> ModelMessage:
        return ModelMessage(
            task=task,
            version=model.version,
            theta=[float(v) for v in model.theta],
            V=[[float(v) for v in row] for row in model.V],
            beta=float(model.beta),
            reports=int(model.reports),
            batch_size=model.batch_size,
        )

    def read_back(self, policy: Any, K: int, msg: AnyModelMessage) -> Model:
        self._check(policy, msg)
        assert isinstance(msg, ModelMessage)
        try:
            return self._build(policy, msg)
        except np.linalg.LinAlgError:
            raise _mismatch(msg, "has a V that is not positive definite") from None

    def _build(self, policy: Any, msg: ModelMessage) -> Model:
        return Model(version=msg.version, theta=np.asarray(msg.theta, dtype=float),
                     V=np.asarray(msg.V, dtype=float), beta=float(msg.beta), reports=msg.reports,
                     batch_size=msg.batch_size)

    def _check(self, policy: Any, msg: AnyModelMessage) -> None:
        """(θ̃, V) of the task's dimension d, and θ̂ exactly when the family carries it."""
        glb = self.message is GLBModelMessage
        if not isinstance(msg, ModelMessage):
            raise _mismatch(msg, f"is a {type(msg).__name__}, not a linear model")
        d = int(policy.d)
        if len(msg.theta) != d or len(msg.V) != d or any(len(row) != d for row in msg.V):
            raise _mismatch(msg, "has wrong dimensions")
        if isinstance(msg, GLBModelMessage) != glb:
            raise _mismatch(msg, "lacks θ̂" if glb else "carries an unexpected θ̂")


class GLBFamily(LinearFamily, name="glb", message=GLBModelMessage, takes_features=True,
                demo_env="logistic"):
    def publish(self, task: str, model: Model) -> GLBModelMessage:
        assert isinstance(model, GLBModel)
        return GLBModelMessage(task=task, **model.to_dict())

    def _build(self, policy: Any, msg: ModelMessage) -> GLBModel:
        """θ̂ must be a d-vector in the ball W of radius S: the device's report is calibrated
        for ‖θ̂‖ ≤ S only."""
        assert isinstance(msg, GLBModelMessage)
        theta_hat = np.asarray(msg.theta_hat, dtype=float)
        S = float(policy.S)
        if theta_hat.shape != (policy.d,) or np.linalg.norm(theta_hat) > S * (1 + 1e-9):
            raise _mismatch(msg, f"has a θ̂ not in the ball of radius S = {S:g}")
        return GLBModel.from_dict(msg.model_dump())


class PhaseFamily(Family[PhaseModel, PhaseModelMessage], name="phase", message=PhaseModelMessage,
                  takes_features=False, demo_env="fixed-linear"):

    def publish(self, task: str, model: PhaseModel) -> PhaseModelMessage:
        """What devices need of an AdaR-GOPE phase: no play order (they sample from π_ℓ)."""
        assert model.weights is not None
        return PhaseModelMessage(
            task=task, version=model.version, reports=model.reports, phase=model.phase,
            beta=model.beta, active=model.active.tolist(), support=model.support.tolist(),
            weights=model.weights.tolist(), counts=model.counts.tolist(),
            length=None if model.active.size == 1 else int(model.counts.sum()))

    def demo_users(self, policy: Mapping[str, Any], d: int, K: int,
                   rng: np.random.Generator) -> Any:
        """``fixed-linear`` on the task's own seeded arms (θ* from ``rng``)."""
        from privbandit.shared.core.policies.gope_service import seeded_arms

        env = super().demo_users(policy, d, K, rng)
        env.use_arms(seeded_arms(K, d, int(policy["arm_seed"])))
        return env

    def read_back(self, policy: Any, K: int, msg: AnyModelMessage) -> PhaseModel:
        if not isinstance(msg, PhaseModelMessage) or max(msg.active) >= K:
            raise _mismatch(msg, f"is not a phase of its K = {K} arms")
        return PhaseModel(version=msg.version, phase=msg.phase, beta=msg.beta,
                          active=np.asarray(msg.active, dtype=np.int64),
                          support=np.asarray(msg.support, dtype=np.int64),
                          counts=np.asarray(msg.counts, dtype=np.int64), order_seed=0,
                          reports=msg.reports, weights=np.asarray(msg.weights, dtype=float))


class ArmsFamily(Family[ArmModel, ArmModelMessage], name="arms", message=ArmModelMessage,
                 takes_features=False, demo_env="mab", simulator="mab", ledger_moves=True):
    def demo_users(self, policy: Mapping[str, Any], d: int, K: int,
                   rng: np.random.Generator) -> Any:
        """The arms' mean rewards (0.9, then 0.8 … : ``environments.mab.default_means``)."""
        from privbandit.shared.core.environments.mab import default_means

        return default_means(K)

    def read_back(self, policy: Any, K: int, msg: AnyModelMessage) -> ArmModel:
        if not isinstance(msg, ArmModelMessage) or msg.arms() not in (None, K) or (
                msg.arm is not None and msg.arm >= K):
            raise _mismatch(msg, f"does not fit its K = {K} arms")
        return ArmModel.from_dict(msg.model_dump())


class BCOFamily(Family[BCOModel, BCOModelMessage], name="bco", message=BCOModelMessage,
                takes_features=False, demo_env="bco-quadratic", simulator="bco"):
    def demo_users(self, policy: Mapping[str, Any], d: int, K: int,
                   rng: np.random.Generator) -> Any:
        """A BCO environment at the task's dimension, radius and loss bound (K unused)."""
        from privbandit.shared.core.environments.bco import BCOEnvironment

        return BCOEnvironment(self.demo_env, int(policy["d"]), rng,
                              radius=float(policy["radius"]),
                              loss_bound=float(policy["loss_bound"]))

    def read_back(self, policy: Any, K: int, msg: AnyModelMessage) -> BCOModel:
        """The dimension, the radius and the one- or two-point kind must be the task's."""
        if (not isinstance(msg, BCOModelMessage) or len(msg.y) != policy.d
                or msg.radius != policy.radius
                or (msg.rho is None) != (policy.points_per_user == 1)):
            raise _mismatch(msg, "does not fit the BCO task")
        return BCOModel.from_dict(msg.model_dump())


LINEAR = LinearFamily()
GLB = GLBFamily()
PHASE = PhaseFamily()
ARMS = ArmsFamily()
BCO_FAMILY = BCOFamily()  # (``BCO`` is the policy class of ``bco``)
FAMILIES: dict[str, Family[Any, Any]] = {
    f.name: f for f in (LINEAR, GLB, PHASE, ARMS, BCO_FAMILY)}
