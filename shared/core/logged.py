"""Logged decisions in Open Bandit Pipeline's ``bandit_feedback`` form, and the uniform-random
logging policy.

A ``bandit_feedback`` (Saito et al., "Open Bandit Dataset and Pipeline", NeurIPS 2021 D&B; the
dict OBP's datasets return) holds, for n logged rounds over K actions:

    n_rounds, n_actions   n, K
    context               (n, m) what the logging policy saw of each user
    action                (n,)   the action a_t it took
    reward                (n,)   the reward r_t observed
    pscore                (n,)   π_0(a_t | x_t), the probability it took a_t with (the propensity)
    position              (n,)   0 (one slot; OBP's slates have more)
    action_context        (K, k) features of the actions themselves, where they have any
    expected_reward       (n, K) the environment's true means μ_{t,a} (simulated logs only)

plus one key of ours, ``feature_map``, saying how the per-arm features x_{t,a} ∈ R^d that the
project's policies decide from are rebuilt from ``context`` (``arm_features``):

    flat       context = the K·d features of the round, row-major (any environment);
    disjoint   context = c_t ∈ R^p and x_{t,a} = e_a ⊗ c_t (``digits``, ``letter``: the classes-as-
               arms conversion), action_context = I_K, d = K·p;
    fixed      every round has the same arms: action_context = the (K, d) arm set,
               context = a column of zeros (``fixed-linear``);
    shared     one model over user × item features (logs read from files, ``logfiles``):
               x_{t,a} = s · [vec(c_t ⊗ z_a), g_{t,a}], d = p·q + m, with c_t ∈ R^p the round's
               ``context``, z_a ∈ R^q the action's ``action_context`` and g_{t,a} ∈ R^m the
               optional per-round, per-action features ``context_per_arm`` (n, K, m) (OBD's
               user-item affinity); the outer product lets every user feature weigh every item
               feature (Li et al. 2010's shared features, without their disjoint part).
    disjoint   (with ``context_per_arm``) x_{t,a} = s · e_a ⊗ [c_t, g_{t,a}], d = K·(p + m).

``feature_scale`` s (default 1) is one constant for the whole log, so that every ‖x_{t,a}‖ ≤ 1
(the policies' L) while the features stay linear in the logged numbers. ``pi_b`` (n, K), where a
log has it (obp's synthetic logs; ``simulate --log`` of an exploring logging policy), is the
logging policy's whole distribution π_0(· | x_t): the overlap diagnostic (``overlap``) then
knows which actions it never takes.

Cost of the features (they are rebuilt CHUNK rounds at a time, never all at once): a round's
features are K·d numbers (OBD's 80 items, disjoint on 20 user features: d = 1,600, 1 MB a
round), and the linear policies cost O(d²) memory, O(d³) per model update and O(K·d²) per
decision at any d (a private policy's report holds d(d+3)/2 numbers: 1.28 M at d = 1,600).

On disk a feedback is an ``.npz`` (``save_feedback``/``load_feedback``; numeric arrays and one
string, read without pickle).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger, SecureSum
from privbandit.shared.core.policies.base import Policy
from privbandit.shared.core.policies.config import MAX_FEATURE_DIM
from privbandit.shared.core.randomizers.identity import IdentityRandomizer

FeatureMap = Literal["flat", "disjoint", "fixed", "shared"]
FEATURE_MAPS: tuple[FeatureMap, ...] = ("flat", "disjoint", "fixed", "shared")
# The window of the uniform logger (its model never changes: any size serves).
UNIFORM_WINDOW = 4096


class DecisionLog:
    """The decisions a simulation kept, in order (``record`` per window of served users)."""

    def __init__(self, feature_map: FeatureMap = "flat",
                 fixed_arms: np.ndarray | None = None) -> None:
        if feature_map not in FEATURE_MAPS:
            raise ValueError(f"feature_map must be one of {FEATURE_MAPS}")
        if feature_map == "fixed" and fixed_arms is None:
            raise ValueError("a fixed feature map needs the arm set")
        self.feature_map: FeatureMap = feature_map
        self.fixed_arms = None if fixed_arms is None else np.asarray(fixed_arms, dtype=float)
        self._context: list[np.ndarray] = []
        self._action: list[np.ndarray] = []
        self._reward: list[np.ndarray] = []
        self._pscore: list[np.ndarray] = []
        self._mu: list[np.ndarray] = []
        self._pi_b: list[np.ndarray | None] = []
        self.K: int | None = None
        self.d: int | None = None

    def record(self, X: np.ndarray, a: np.ndarray, r: np.ndarray, p: np.ndarray,
               mu: np.ndarray, pi_b: np.ndarray | None = None) -> None:
        """n decisions: features X (n, K, d), arms a, rewards r, propensities p, means μ (n, K);
        ``pi_b`` (n, K): the deciding model's whole distribution, where it randomises (kept in
        the log's ``pi_b`` when every window has one)."""
        n, K, d = X.shape
        if (self.K, self.d) == (None, None):
            self.K, self.d = K, d
        elif (K, d) != (self.K, self.d):
            raise ValueError("every logged round must have the same K and d")
        p = np.asarray(p, dtype=float)
        if p.shape != (n,) or not ((p > 0) & (p <= 1)).all():
            raise ValueError("propensities must be n probabilities in (0, 1]")
        self._context.append(context_of(X, self.feature_map))
        self._action.append(np.asarray(a, dtype=np.int64))
        self._reward.append(np.asarray(r, dtype=float))
        self._pscore.append(p)
        self._mu.append(np.array(mu, dtype=float))
        self._pi_b.append(None if pi_b is None else np.array(pi_b, dtype=float))

    def bandit_feedback(self) -> dict[str, Any]:
        """The log as OBP's ``bandit_feedback`` dict (module docstring)."""
        if self.K is None or self.d is None:
            raise ValueError("nothing was logged")
        action = np.concatenate(self._action)
        n, K, d = action.shape[0], self.K, self.d
        out: dict[str, Any] = {
            "n_rounds": n, "n_actions": K,
            "context": np.concatenate(self._context), "action": action,
            "reward": np.concatenate(self._reward), "pscore": np.concatenate(self._pscore),
            "position": np.zeros(n, dtype=np.int64),
            "expected_reward": np.concatenate(self._mu),
            "feature_map": self.feature_map,
        }
        if self._pi_b and all(b is not None for b in self._pi_b):
            out["pi_b"] = np.concatenate(self._pi_b)  # type: ignore[arg-type]  # none is None
        if self.feature_map == "disjoint":
            out["action_context"] = np.eye(K)
        elif self.feature_map == "fixed":
            assert self.fixed_arms is not None
            out["action_context"] = self.fixed_arms
        if d != arm_features(out, 1).shape[2]:
            raise ValueError("the features cannot be rebuilt from the logged context")
        return out


def context_of(X: np.ndarray, feature_map: FeatureMap) -> np.ndarray:
    """The logged context of features X (n, K, d) under ``feature_map``."""
    n, K, d = X.shape
    if feature_map == "flat":
        return np.array(X, dtype=float).reshape(n, K * d)
    if feature_map == "fixed":
        return np.zeros((n, 1))
    p = d // K
    if p * K != d:
        raise ValueError(f"a disjoint encoding needs d = K·p; got d = {d}, K = {K}")
    return np.array(X[:, 0, :p], dtype=float)


def disjoint_intercept_coords(d: int, K: int) -> tuple[int, ...]:
    """The coordinates 0, p, 2p, …, (K − 1)p (p = d/K) that hold c[0] in ``disjoint`` features
    x_a = e_a ⊗ c: where a context whose c[0] is an intercept c has it. Exactly one of them
    is c in each x_a, the others 0, so their sum is c for every arm — the intercept direction of
    ddp-linucb's ``centered`` encoding (``randomizers.skellam``, *Encodings*)."""
    p = d // K
    if K < 1 or p * K != d:
        raise ValueError(f"a disjoint encoding needs d = K·p; got d = {d}, K = {K}")
    return tuple(range(0, d, p))


def arm_features(feedback: dict[str, Any], rows: int | slice | np.ndarray | None = None
                 ) -> np.ndarray:
    """x_{t,a}: the (n, K, d) per-arm features of the logged rounds ``rows`` (all by default;
    an int: the first that many), rebuilt from ``context`` by ``feature_map``."""
    context = np.asarray(feedback["context"], dtype=float)
    per_arm = feedback.get("context_per_arm")
    if isinstance(rows, int):
        rows = slice(0, rows)
    if rows is not None:
        context = context[rows]
        per_arm = None if per_arm is None else np.asarray(per_arm)[rows]
    n, K = context.shape[0], int(feedback["n_actions"])
    kind = str(feedback.get("feature_map", "flat"))
    scale = float(feedback.get("feature_scale", 1.0))
    if kind == "flat":
        if context.shape[1] % K:
            raise ValueError(f"a flat context holds K·d numbers per round: {context.shape[1]} "
                             f"is not a multiple of K = {K}: name the log's encoding (--encoding "
                             "shared or disjoint; read_log(..., encoding=...))")
        return context.reshape(n, K, context.shape[1] // K)
    if kind == "fixed":
        arms = np.asarray(feedback["action_context"], dtype=float)
        return np.broadcast_to(arms, (n, *arms.shape))
    g = np.zeros((n, K, 0)) if per_arm is None else np.asarray(per_arm, dtype=float)
    if kind == "disjoint":
        p = context.shape[1] + g.shape[2]
        X = np.zeros((n, K, K * p))
        for a in range(K):
            X[:, a, a * p:a * p + context.shape[1]] = context
            X[:, a, a * p + context.shape[1]:(a + 1) * p] = g[:, a]
        return X * scale if scale != 1.0 else X
    if kind == "shared":
        z = np.asarray(feedback["action_context"], dtype=float)
        outer = np.einsum("tp,aq->tapq", context, z).reshape(n, K, -1)
        return np.concatenate([outer, g], axis=2) * scale
    raise ValueError(f"unknown feature_map {kind!r}; known: {', '.join(FEATURE_MAPS)}")


def feature_dimension(feedback: dict[str, Any]) -> int:
    """d of the log's per-arm features, without building them."""
    return int(arm_features(feedback, 1).shape[2])


def check_feedback(feedback: dict[str, Any]) -> int:
    """n, after checking that a feedback's arrays agree with each other (``ValueError``)."""
    n, K = int(feedback["n_rounds"]), int(feedback["n_actions"])
    action = np.asarray(feedback["action"])
    for key in ("action", "reward", "pscore"):
        if np.shape(feedback[key]) != (n,):
            raise ValueError(f"{key} must have shape ({n},)")
    if np.shape(feedback["context"])[0] != n:
        raise ValueError(f"context must have {n} rows")
    if ((action < 0) | (action >= K)).any():
        raise ValueError(f"actions must lie in 0..{K - 1}")
    pscore = np.asarray(feedback["pscore"], dtype=float)
    if not ((pscore > 0) & (pscore <= 1)).all():
        raise ValueError("pscore must lie in (0, 1]")
    if not np.isfinite(np.asarray(feedback["reward"], dtype=float)).all():
        raise ValueError("rewards must be finite")
    per_arm = feedback.get("context_per_arm")
    if per_arm is not None and (np.ndim(per_arm) != 3 or np.shape(per_arm)[:2] != (n, K)):
        raise ValueError(f"context_per_arm must have shape ({n}, {K}, m)")
    z_shape = np.shape(feedback.get("action_context", ()))
    if str(feedback.get("feature_map", "flat")) == "shared" and (
            len(z_shape) != 2 or z_shape[0] != K):
        raise ValueError(f"a shared feature map needs action_context of shape ({K}, q)")
    if not float(feedback.get("feature_scale", 1.0)) > 0:
        raise ValueError("feature_scale must be positive")
    pi_b = feedback.get("pi_b")
    if pi_b is not None:
        pi_b = np.asarray(pi_b, dtype=float)
        if pi_b.ndim == 3 and pi_b.shape[2] == 1:  # obp's (n, K, len_list) with one slot
            pi_b = pi_b[:, :, 0]
        if pi_b.shape != (n, K) or (pi_b < 0).any() or not np.allclose(pi_b.sum(axis=1), 1):
            raise ValueError(f"pi_b must hold ({n}, {K}) probability distributions")
        if not np.allclose(pi_b[np.arange(n), action.astype(np.int64)], pscore):
            raise ValueError("pi_b must give each logged action its pscore")
    return n


def save_feedback(path: Path | str, feedback: dict[str, Any]) -> None:
    """Write a feedback as ``.npz`` (compressed; no pickled objects)."""
    check_feedback(feedback)
    arrays = {k: np.asarray(v) for k, v in feedback.items() if v is not None}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:  # a file object: numpy would append .npz to a bare name
        np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]  # keyword arrays


def load_feedback(path: Path | str) -> dict[str, Any]:
    """A feedback written by ``save_feedback`` (checked; no pickle is ever loaded)."""
    with np.load(path, allow_pickle=False) as data:
        out: dict[str, Any] = {k: data[k] for k in data.files}
    out["n_rounds"], out["n_actions"] = int(out["n_rounds"]), int(out["n_actions"])
    for key, value in out.items():  # the strings (feature_map, positions) come back 0-d
        if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind == "U":
            out[key] = str(value)
    out["feature_map"] = str(out.get("feature_map", "flat"))
    if "feature_scale" in out:
        out["feature_scale"] = float(out["feature_scale"])
    check_feedback(out)
    return out


# --- the uniform-random logging policy -------------------------------------------------------


class UniformConfig(BaseModel):
    """The uniform-random logging policy (``privbandit simulate --algo random``): every user's
    arm uniform over her K arms. Not a private policy: it learns nothing and reports nothing."""

    model_config = ConfigDict(extra="forbid")

    algo: Literal["random"] = "random"
    d: int = Field(ge=1, le=MAX_FEATURE_DIM)
    L: float = Field(1.0, gt=0)


class UniformModel:
    """a_t ~ U{0, …, K − 1} from the logging policy's own generator; π_0(a | x) = 1/K."""

    version = 0

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def decide(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.rng.integers(0, X.shape[1], size=X.shape[0]))

    def propensity(self, X: np.ndarray, a: np.ndarray) -> np.ndarray:
        return np.full(np.shape(a)[0], 1.0 / X.shape[1])

    def distribution(self, X: np.ndarray) -> np.ndarray:
        return np.full(X.shape[:2], 1.0 / X.shape[1])

    def to_dict(self) -> dict[str, Any]:
        return {"version": 0}


class UniformPolicy(Policy[UniformConfig, IdentityRandomizer]):
    """The logging policy of a uniform log (Li et al. 2011's setting for replay): its model is
    ``UniformModel``; it ingests (and ignores) every row."""

    algo = "random"
    threat_model = "none"
    model: UniformModel

    def _make_randomizer(self) -> IdentityRandomizer:
        return IdentityRandomizer(self.config.d, self.config.L)

    def _initial_model(self) -> UniformModel:
        return UniformModel(self.rng)

    def _model_from_dict(self, data: dict[str, Any]) -> UniformModel:
        return UniformModel(self.rng)

    def window(self) -> int:
        return UNIFORM_WINDOW

    def ingest(self, rows: np.ndarray) -> int:
        n = int(np.shape(rows)[0])
        self.reports += n
        return n

    def ledger(self, T: int | None = None, aggregation: Aggregation = "reports",
               secure_sum: SecureSum | None = None) -> PrivacyLedger:
        return PrivacyLedger(threat_model="none", accounting=(
            "uniform-random logging policy: it learns nothing, so it releases nothing about "
            "a user"))
