"""``privbandit.Bandit``: one policy of the registry serving your users in your process (issue 42,
items 1, 4 and 5; docs/api.md).

The learner plays both halves of the pipeline: the device's (choose from the published model,
keep the decision's state, privatise the user's feedback with the policy's own randomizer — the
device service's family handlers, ``services.device.families``) and the analyzer's (ingest the
reports at the policy's cadence, publish, state the ledger). As in the services:

- every family works: linear and GLB policies take the K feature vectors of the user (a (K, d)
  array, or a mapping label → vector: arms named by label, any set of them on any call); phase
  and multi-armed policies choose among their fixed arms (named by ``arms=[labels]`` if you
  like); BCO policies play points and take losses;
- one decision, one feedback: a decision's state is kept until its feedback and erased with it, so
  a second feedback of the same choice is refused (``DecisionClosed``; the device service
  answers 409);
- ``decide_batch`` decides for many users from the same published model, as devices holding
  the same cached model would;
- ``save``/``load`` keep the whole learner — config, the policy's state (its statistics, model,
  report count, public warm-start rounds taken), the reports not yet ingested, the open
  decisions and every generator — so a loaded learner makes the same decisions, states the
  same ledger and takes no public round beyond the declared ones, as the one saved.

Randomness: ``seed`` spawns the policy's and the devices' generators (SeedSequence); the device
noise is drawn from the seeded generator as in the simulator (the device service draws
ddp-linucb's Skellam share from the OS CSPRNG instead).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger
from privbandit.shared.core.policies.base import Policy
from privbandit.shared.core.policies.families import ARMS, BCO_FAMILY, GLB, LINEAR
from privbandit.shared.core.policies.lplr import LPLR
from privbandit.shared.core.policies.registry import REGISTRY
from privbandit.shared.core.randomizers.base import (
    PerUserLevels,
    bounded_rewards,
    intercept_rule,
    intercept_values,
    off_intercept,
    takes_levels,
)
from privbandit.shared.core.randomizers.lplr import BlockSums

FORMAT = "privbandit-learner/1"


class DecisionClosed(ValueError):
    """A feedback for a decision that is not open: already answered, or not this learner's."""


@dataclass(frozen=True)
class Choice:
    """One decision: ``action`` the chosen arm's index among the arms offered (``arm``: its
    label, the index itself when the arms are not labelled), the probability the deciding model
    took it with (None for a BCO point: a density, no probability), the model's version, the
    chosen arm's features (linear and GLB policies), the points to play (BCO), and the
    decision's id (its feedback is taken once)."""

    action: int
    propensity: float | None
    model_version: int
    features: np.ndarray | None = None
    arm: Hashable = None
    points: list[list[float]] | None = None
    decision: int = -1


class Bandit:
    """One policy serving your users: ``decide`` / ``decide_batch`` (the device's choice from
    the current model), ``feedback`` (the device's randomizer privatises it at once; the
    analyzer ingests the reports at the policy's cadence — a window of reports per model, full
    batches for a shuffle policy), ``ledger`` (what the policy's reports reveal), ``save`` /
    ``load``.

    ``params`` are the policy's config fields (``privbandit.config``: practical defaults unless
    ``paper``; sblb's ε0 sized for ``aggregation``). ``arms``: labels of a multi-armed policy's
    K arms (K = len(arms)). The features are checked: rows of d finite numbers, each ‖x‖ ≤ L
    (and x[0] = c, or the sum over its intercept_coords, where the policy's encoding relies
    on an intercept c)."""

    def __init__(self, algo: str, *, seed: int | None = None, paper: bool = False,
                 aggregation: Aggregation = "secure-sum", arms: Sequence[Hashable] | None = None,
                 **params: Any) -> None:
        from privbandit.api import config

        if algo not in REGISTRY:
            raise ValueError(f"unknown policy {algo!r}; known: {', '.join(REGISTRY)}")
        self.family = REGISTRY[algo].family
        labels = None if arms is None else list(arms)
        if labels is not None:
            if self.family is not ARMS:
                raise ValueError("arms=[labels] names a multi-armed policy's fixed arms; a "
                                 "contextual policy takes labels with the features "
                                 "(decide({label: x, ...}))")
            if len(set(labels)) != len(labels):
                raise ValueError("arm labels must be distinct")
            if params.setdefault("K", len(labels)) != len(labels):
                raise ValueError(f"K={params['K']} but {len(labels)} arm labels")
        self.aggregation = aggregation
        self.config = config(algo, paper=paper, aggregation=aggregation, **params)
        policy_ss, device_ss = np.random.SeedSequence(seed).spawn(2)
        self._build(np.random.default_rng(policy_ss), np.random.default_rng(device_ss))
        self.labels = labels
        self._open: dict[int, np.ndarray] = {}  # decision id → its state (until its feedback)
        self._next = 0
        self._pending: list[np.ndarray] = []  # reports not yet ingested
        self._sums: BlockSums | None = None  # lplr: the open layer group's summed reports

    def _build(self, policy_rng: np.random.Generator, device_rng: np.random.Generator) -> None:
        from privbandit.services.device.families import HANDLERS
        from privbandit.shared.core.simulator import make_policy

        self.policy: Policy[Any, Any] = make_policy(self.config, policy_rng)
        self.device_rng = device_rng
        # the device service's half of the family: decision state and report row
        self.handler: Any = HANDLERS[self.family.name]

    # -- decide ---------------------------------------------------------------------------

    def decide(self, features: np.ndarray | Mapping[Hashable, Any] | None = None) -> Choice:
        """The arm for one user: ``features`` her (K, d) feature vectors, or a mapping
        label → vector (linear and GLB policies); nothing for the others."""
        return self.decide_batch(None if features is None else [features],
                                 n=None if features is not None else 1)[0]

    def decide_batch(self, features: np.ndarray | Sequence[Any] | None = None, *,
                     n: int | None = None) -> list[Choice]:
        """Decisions for many users from the current model: ``features`` an (n, K, d) array or
        a sequence of per-user (K_i, d) arrays or label → vector mappings (linear and GLB
        policies; each user may see another set of arms); ``n`` users for the others."""
        if not self.family.takes_features:
            if features is not None:
                raise ValueError(f"{self.config.algo} {self.handler.no_features}: decide takes "
                                 "no features")
            if n is None or n < 1:
                raise ValueError("give n >= 1, the number of users")
            return [self._open_choice(self.handler.decide(self.policy.model, None,
                                                          self.device_rng))
                    for _ in range(n)]
        if features is None:
            raise ValueError(f"{self.config.algo} decides from each user's feature vectors")
        if isinstance(features, np.ndarray) and features.ndim == 3:
            X = np.stack([self._checked(x) for x in features])
            return self._linear_choices(X, [None] * X.shape[0])
        users = [self._user(f) for f in features]
        if len({X.shape[0] for X, _ in users}) == 1:  # one K: one vectorised decide
            return self._linear_choices(np.stack([X for X, _ in users]), [u[1] for u in users])
        return [c for X, labels in users for c in self._linear_choices(X[None], [labels])]

    def _linear_choices(self, X: np.ndarray, labels: list[list[Hashable] | None]
                        ) -> list[Choice]:
        """Choices of n users with (n, K, d) features from the current model."""
        model = self.policy.model
        if isinstance(self.policy, LPLR):  # a uniform draw from the active set A_m(x)
            actions = self.policy.decide(X, self.device_rng)
            probs = self.policy.propensity(X, actions)
        else:
            actions = model.decide(X)  # type: ignore[attr-defined]  # a ContextDeciding model
            probs = model.propensity(X, actions)  # type: ignore[attr-defined]  # every such model has it
        choices = []
        for i, a in enumerate(int(a) for a in actions):
            x = X[i, a].copy()
            state = self.handler.state(model, x) if self.family is GLB else x
            if isinstance(self.policy, LPLR):  # the report names its action (its oracle)
                state = np.append(x, a)
            arm = a if labels[i] is None else labels[i][a]  # type: ignore[index]  # labels of this user
            choices.append(self._register(Choice(a, float(probs[i]), int(model.version), x,
                                                 arm), state))
        return choices

    def _open_choice(self, decision: Any) -> Choice:
        """A Choice of a fixed-arm or BCO decision (the device handler's ``Decision``)."""
        arm = decision.action if self.labels is None else self.labels[decision.action]
        return self._register(Choice(decision.action, decision.propensity,
                                     int(self.policy.model.version), None, arm,
                                     decision.points), decision.state)

    def _register(self, choice: Choice, state: np.ndarray) -> Choice:
        decision = self._next
        self._next += 1
        self._open[decision] = np.asarray(state, dtype=float)
        return Choice(choice.action, choice.propensity, choice.model_version, choice.features,
                      choice.arm, choice.points, decision)

    def _user(self, f: Any) -> tuple[np.ndarray, list[Hashable] | None]:
        if isinstance(f, Mapping):
            if not f:
                raise ValueError("a user needs at least one arm")
            labels = list(f)
            return self._checked(np.array([np.asarray(f[k], dtype=float) for k in labels])), \
                labels
        return self._checked(f), None

    def _checked(self, features: Any) -> np.ndarray:
        X = np.asarray(features, dtype=float)
        d, L = self.config.d, getattr(self.config, "L", 1.0)
        if X.ndim != 2 or X.shape[1] != d or X.shape[0] < 1:
            raise ValueError(f"features must have shape (K, {d})")
        if not np.isfinite(X).all() or (np.linalg.norm(X, axis=1) > L * (1 + 1e-9)).any():
            raise ValueError(f"features must be finite with every ||x|| <= L = {L}")
        c = getattr(self.config, "encoding_intercept", None)
        coords = tuple(getattr(self.config, "intercept_coords", (0,)))
        if c is not None and off_intercept(intercept_values(X, coords), c).any():
            raise ValueError(f"every feature vector must have the intercept "
                             f"{intercept_rule(c, coords)}")
        return X

    # -- feedback -------------------------------------------------------------------------

    def feedback(self, choice: Choice, reward: float | None = None, *,
                 losses: Sequence[float] | None = None, epsilon: float | None = None) -> None:
        """The user's feedback for ``choice``, taken once: ``reward`` (``losses``, one per
        point played, for a BCO policy), randomised now (the device's step) and ingested when
        the policy's window (or batch) is full. ``epsilon``: the user's own privacy level ε_t
        (HeLDP policies; 0 declines; default the config's ``epsilon``). A refused feedback
        changes nothing; ``DecisionClosed`` if the decision already had its feedback."""
        state = self._open.get(choice.decision)
        if state is None:
            raise DecisionClosed(f"decision {choice.decision} is not open: it already had its "
                                 "feedback (one decision, one feedback; the device service "
                                 "answers 409) or is not this learner's")
        value = self._value(reward, losses)
        eps = self._level(epsilon)
        if isinstance(self.policy, LPLR):
            self._lplr_report(state, value)
            del self._open[choice.decision]
            return
        if self.family is LINEAR:
            row = self.policy.randomizer.randomize(state[None], np.array([value]),
                                                   self.device_rng)[0]
        else:
            row = self.handler.report_row(self.policy.randomizer, state, value, eps,
                                          self.device_rng)
        del self._open[choice.decision]  # erased with its feedback, as on a device
        self._pending.append(row)
        self._release()

    def _release(self) -> None:
        """Hand the analyzer every full shuffler batch (l = ``batch_size``, the next batch's
        length; 1 for a pass-through policy: each report at once), as the services do: the
        policy ingests it, publishing where its rule says."""
        size = self.policy.batch_size
        while len(self._pending) >= size:
            batch = np.array(self._pending[:size])
            used = 0
            while used < size:
                used += self.policy.ingest(batch[used:])
            self._pending = self._pending[size:]
            size = self.policy.batch_size

    def discard(self, choice: Choice) -> None:
        """Close ``choice`` without a feedback (a user who never answers: her decision's state
        is erased and nothing is reported, as when a device's decision expires)."""
        if self._open.pop(choice.decision, None) is None:
            raise DecisionClosed(f"decision {choice.decision} is not open")

    def _lplr_report(self, state: np.ndarray, reward: float) -> None:
        """lplr (Li, Simchi-Levi & Wang, Algs. 1–6): the user's ε-LDP report of (φ, y) to the
        layer group open now (``LPLRRandomizer.report``: her blocks plus fresh noise in every
        block), summed with her group's; the group's sum is ingested when the group is full."""
        policy = self.policy
        assert isinstance(policy, LPLR)
        d = self.config.d
        x, a = state[:d], int(state[d])
        block, u, z, n_blocks = policy.encode(x[None], np.array([reward]), np.array([a]))
        report = policy.randomizer.report(int(block[0]), u, z, n_blocks, self.device_rng)
        self._sums = report if self._sums is None else self._sums + report
        policy.consumed(1)
        if policy.window() == 0:
            sums, self._sums = self._sums, None
            policy.ingest_blocks(sums)

    def _value(self, reward: float | None, losses: Sequence[float] | None) -> Any:
        if self.family is BCO_FAMILY:
            if losses is None or reward is not None:
                raise ValueError(f"{self.config.algo} takes losses (one per point played), "
                                 "not a reward")
            f = [float(v) for v in losses]
            B = float(self.config.loss_bound)
            if len(f) != self.config.points_per_user:
                raise ValueError(f"{self.config.algo} plays {self.config.points_per_user} "
                                 f"point(s) per user; got {len(f)} losses")
            if not all(0.0 <= v <= B for v in f):
                raise ValueError(f"losses lie in [0, {B:g}]; got {f}")
            return f
        if losses is not None or reward is None:
            raise ValueError(f"{self.config.algo} takes a reward, not losses")
        r = float(reward)
        if not np.isfinite(r):
            raise ValueError("the reward must be a finite number")
        if self.family is not LINEAR and self.family is not GLB and \
                bounded_rewards(self.policy.randomizer) and not 0.0 <= r <= 1.0:
            raise ValueError(f"{self.config.algo}'s rewards lie in [0, 1]; got {r!r}")
        return r

    def _level(self, epsilon: float | None) -> float | None:
        randomizer = self.policy.randomizer
        if not takes_levels(randomizer):
            if epsilon is not None:
                raise ValueError(f"{self.config.algo} has no per-user privacy levels; omit "
                                 "epsilon")
            return None
        eps = float(self.config.epsilon if epsilon is None else epsilon)
        eps_max = float(cast(PerUserLevels, randomizer).eps_max)
        if not 0.0 <= eps <= eps_max:
            raise ValueError(f"privacy levels lie in [0, {eps_max:g}] (0 = decline); got {eps!r}")
        return eps

    def warm_start(self, features: np.ndarray, rewards: np.ndarray) -> None:
        """Learn from a log the operator declares public before the first user (issue 44):
        ``features`` (n, d) the arms played, ``rewards`` (n,); added exactly, a model published
        at once, nothing charged. The config must declare the rounds (``public_warm_start`` = n
        in all; the ledger labels them public, not protected). ddp-linucb and adar-oful."""
        warm = getattr(self.policy, "warm_start", None)
        if warm is None:
            raise ValueError(f"{self.config.algo} takes no public warm start")
        warm(features, rewards)

    # -- model, ledger --------------------------------------------------------------------

    @property
    def model(self) -> Any:
        """The published model the next ``decide`` uses."""
        return self.policy.model

    @property
    def open_decisions(self) -> int:
        """Decisions still waiting for their feedback (each keeps its state until then)."""
        return len(self._open)

    def ledger(self, T: int | None = None, aggregation: Aggregation | None = None) -> PrivacyLedger:
        """The policy's privacy ledger (spec §6 ``privacy``), for T users where it depends on T,
        under the learner's aggregation unless another is named."""
        return self.policy.ledger(T, aggregation=aggregation or self.aggregation)

    # -- save / load ----------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write the whole learner to ``path`` (JSON): the config and aggregation, the policy's
        state, the reports not yet ingested, the open decisions (their states hold the chosen
        features, as a device's store does: keep the file as private as the users' data) and
        the generators' states. (Not lplr: its oracle trees have no stored form.)"""
        if isinstance(self.policy, LPLR):
            raise ValueError("lplr cannot be saved: its oracle trees have no stored form (a "
                             "simulator policy)")
        data = {
            "format": FORMAT,
            "config": self.config.model_dump(mode="json"),
            "aggregation": self.aggregation,
            "labels": self.labels,
            "policy": self.policy.get_state(),
            "pending": [row.tolist() for row in self._pending],
            "pending_dtype": str(np.asarray(self._pending).dtype) if self._pending else "float64",
            "open": {str(k): v.tolist() for k, v in self._open.items()},
            "next": self._next,
            "rng": {"policy": self.policy.rng.bit_generator.state,
                    "device": self.device_rng.bit_generator.state},
        }
        Path(path).write_text(json.dumps(data, allow_nan=False))

    @classmethod
    def load(cls, path: str | Path) -> Bandit:
        """The learner ``save`` wrote: it makes the decisions and states the ledger the saved
        one would have."""
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read a learner from {path}: {exc}") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{path} is not a saved privbandit learner ({FORMAT})")
        algo = data["config"].get("algo")
        if algo not in REGISTRY:
            raise ValueError(f"{path}: unknown policy {algo!r}")
        self = cls.__new__(cls)
        self.family = REGISTRY[algo].family
        self.aggregation = data["aggregation"]
        self.config = REGISTRY[algo].config.model_validate(data["config"])
        self._build(np.random.default_rng(), np.random.default_rng())
        self.policy.set_state(data["policy"])
        # after building: a policy's constructor may draw from its generator
        self.policy.rng.bit_generator.state = data["rng"]["policy"]
        self.device_rng.bit_generator.state = data["rng"]["device"]
        self.labels = data["labels"]
        dtype = np.dtype(data["pending_dtype"])
        self._pending = [np.asarray(row, dtype=dtype) for row in data["pending"]]
        self._open = {int(k): np.asarray(v, dtype=float) for k, v in data["open"].items()}
        self._next = int(data["next"])
        self._sums = None
        return self
