"""The device's half of each policy family (``shared.core.policies.families``): what a decision
keeps sealed in its id, and the report row made from that state and the user's feedback.

One handler per family name; ``handler`` refuses a task whose family has none (a family added in
``shared`` without its device half is an error at start-up, never a silent linear default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np

from privbandit.services.device import arms, bco, glb
from privbandit.shared.core.exploration import Exploration, ExploringModel
from privbandit.shared.core.randomizers.base import NoiseShares, Randomizer, bounded_rewards
from privbandit.shared.settings import TaskConfig

# Feedback values: a reward, or a BCO task's losses (one per point played); ``give_feedback``
# passes the one the task's family takes, so each handler casts to its own.
Value = float | list[float]


@dataclass(frozen=True)
class Decision:
    """What decide answers and seals: the state, the arm (0 for BCO) and the points played;
    ``propensity``: the probability with which the model that decided took ``action`` (1 for a
    deterministic argmax, ties to the lowest index; π(a) for a sampled arm; None for a BCO
    task, whose points are drawn from a continuous law: a density, no probability)."""

    state: np.ndarray
    action: int
    points: list[list[float]] | None = None
    propensity: float | None = None


class DeviceFamily(Protocol):
    # How decide refuses features sent to a task of a family that takes none.
    no_features: str

    def decide(self, model: Any, X: np.ndarray | None, rng: np.random.Generator) -> Decision:
        """The decision of one user: X the checked K×d features (None if the family takes
        none)."""
        ...

    def report_row(self, randomizer: Any, state: np.ndarray, value: Value, eps: float | None,
                   rng: np.random.Generator) -> np.ndarray:
        """The randomized report row of a decision's state and the user's feedback."""
        ...

    def feedback(self, cfg: TaskConfig, randomizer: Randomizer, reward: float | None,
                 losses: list[float] | None, epsilon: float | None) -> tuple[Value, float | None]:
        """The checked feedback value of a task of this family and the user's privacy level
        ε_t (None where the family takes none), or the first reason it is refused."""
        ...


def reward_in_unit_interval(cfg: TaskConfig, reward: float | None, losses: list[float] | None,
                            epsilon: float | None) -> tuple[Value, None]:
    """A reward in [0, 1] and no per-user level: the linear, GLB and phase families."""
    r = bco.reward_of(cfg, reward, losses)
    arms.check_reward(r, bounded=True)
    arms.no_level(cfg, epsilon)
    return r, None


class UnitReward:
    """The feedback of a family whose reward lies in [0, 1] with no per-user level."""

    def feedback(self, cfg: TaskConfig, randomizer: Randomizer, reward: float | None,
                 losses: list[float] | None, epsilon: float | None) -> tuple[Value, None]:
        return reward_in_unit_interval(cfg, reward, losses, epsilon)


class Linear(UnitReward):
    no_features = ""

    def decide(self, model: Any, X: np.ndarray | None, rng: np.random.Generator) -> Decision:
        assert X is not None
        action = model.decide_one(X)
        # argmax with ties to the lowest index: a rule, not a coin (Model.propensity)
        return Decision(self.state(model, X[action]), action, propensity=1.0)

    def explore(self, model: Any, X: np.ndarray, rng: np.random.Generator,
                exploration: Exploration) -> Decision:
        """The decision of an exploring logging policy (``core.exploration``): the arm drawn
        from π_0(· | X), answered with its exact probability."""
        explorer = ExploringModel(model, exploration, rng)
        action = int(explorer.decide(X[None])[0])
        p = float(explorer.propensity(X[None], np.array([action]))[0])
        return Decision(self.state(model, X[action]), action, propensity=p)

    def state(self, model: Any, x: np.ndarray) -> np.ndarray:
        """The chosen arm's features."""
        return x

    def report_row(self, randomizer: Any, state: np.ndarray, value: Value, eps: float | None,
                   rng: np.random.Generator) -> np.ndarray:
        if isinstance(randomizer, NoiseShares):
            # Distributed DP: rounded statistics plus an exact noise share, every coin from the
            # OS CSPRNG (the ledger covers only this sampler, not the numpy one); ~0.2 ms.
            return np.array(randomizer.device_report(state, float(cast(float, value))),
                            dtype=np.int64)
        return randomizer.randomize(state[None, :], np.array([value]), rng)[0]


class GLB(Linear):
    def state(self, model: Any, x: np.ndarray) -> np.ndarray:
        return glb.decision_state(model, x)

    def report_row(self, randomizer: Any, state: np.ndarray, value: Value, eps: float | None,
                   rng: np.random.Generator) -> np.ndarray:
        if isinstance(randomizer, NoiseShares):
            # ddp-glb: the GLM statistics at the sealed anchor θ̂, rounded (and, if the devices
            # add the noise, a Skellam share) from the OS CSPRNG (``randomizers.glm_skellam``).
            return np.array(randomizer.device_report(glb.anchored_context(state),
                                                     float(cast(float, value))), dtype=np.int64)
        return glb.report_row(randomizer, state, cast(float, value), rng)


class Phase(UnitReward):
    no_features = "plays fixed arms"

    def decide(self, model: Any, X: np.ndarray | None, rng: np.random.Generator) -> Decision:
        # [arm, phase]: the arm drawn from π_ℓ, the phase it names.
        state = np.array([model.sample(rng.random()), model.phase])
        arm = int(state[0])
        return Decision(state, arm, propensity=model.probability(arm))

    def report_row(self, randomizer: Any, state: np.ndarray, value: Value, eps: float | None,
                   rng: np.random.Generator) -> np.ndarray:
        return randomizer.row(int(state[0]), int(state[1]), value)


class Arms:
    no_features = "plays fixed arms"

    def feedback(self, cfg: TaskConfig, randomizer: Randomizer, reward: float | None,
                 losses: list[float] | None, epsilon: float | None
                 ) -> tuple[Value, float | None]:
        """A reward, in [0, 1] unless the randomizer takes unbounded ones (the sigmoid
        variants), and the user's level ε_t where the task has per-user levels (HeLDP)."""
        r = bco.reward_of(cfg, reward, losses)
        arms.check_reward(r, bounded_rewards(randomizer))
        return r, arms.user_level(cfg, randomizer, epsilon)

    def decide(self, model: Any, X: np.ndarray | None, rng: np.random.Generator) -> Decision:
        state = arms.decide_arm(model, rng)
        arm = int(state[0])
        return Decision(state, arm, propensity=float(model.propensity(arm)[0]))

    def report_row(self, randomizer: Any, state: np.ndarray, value: Value, eps: float | None,
                   rng: np.random.Generator) -> np.ndarray:
        return arms.report_row(randomizer, state, cast(float, value), eps, rng)


class BCO:
    no_features = "is a BCO task"

    def feedback(self, cfg: TaskConfig, randomizer: Randomizer, reward: float | None,
                 losses: list[float] | None, epsilon: float | None) -> tuple[Value, None]:
        """One loss per point played, each in [0, B]; no per-user level."""
        value = bco.check_losses(cfg, reward, losses)
        arms.no_level(cfg, epsilon)
        return value, None

    def decide(self, model: Any, X: np.ndarray | None, rng: np.random.Generator) -> Decision:
        state, played = bco.decide_points(model, rng)
        return Decision(state, 0, played.tolist())

    def report_row(self, randomizer: Any, state: np.ndarray, value: Value, eps: float | None,
                   rng: np.random.Generator) -> np.ndarray:
        return bco.report_row(randomizer, state, cast("list[float]", value), rng)


HANDLERS: dict[str, DeviceFamily] = {
    "linear": Linear(), "glb": GLB(), "phase": Phase(), "arms": Arms(), "bco": BCO(),
}


def handler(cfg: TaskConfig) -> DeviceFamily:
    """The device's handler of a task's family."""
    name = cfg.family.name
    if name not in HANDLERS:
        raise ValueError(f"task {cfg.id}: the device has no handler for policy family {name!r} "
                         f"({cfg.policy.algo})")
    return HANDLERS[name]
