"""Off-policy evaluation on logged data (a ``bandit_feedback``, ``shared.core.logged``).

Notation: n logged rounds (x_i, a_i, r_i) with the logging policy's propensity p_i = π_0(a_i | x_i)
(``pscore``); the evaluated policy's action distribution π_e(a | x_i) (``action_dist``, (n, K));
w_i = π_e(a_i | x_i) / p_i the importance weight; q̂(x, a) a reward model. Each estimator is the
mean of per-round terms ψ_i and its interval is the normal one, V̂ ± z_{1−(1−level)/2} · s_ψ/√n
(s_ψ the sample standard deviation of the ψ_i): exact in the limit for i.i.d. rounds, which a
fixed evaluated policy on a fixed logging policy's log has. The formulas are the definitions of
Open Bandit Pipeline's estimators (Saito et al. 2021, ``obp.ope``), which the tests compare with
where obp is importable.

    IPS    V̂ = (1/n) Σ w_i r_i                       (Horvitz–Thompson 1952; Strehl et al. 2010)
    SNIPS  V̂ = Σ w_i r_i / Σ w_i                     (Swaminathan & Joachims 2015);
           ψ_i = w_i (r_i − V̂) / w̄ (delta method), w̄ = (1/n) Σ w_i
    DR     V̂ = (1/n) Σ [Σ_a π_e(a|x_i) q̂(x_i, a) + w_i (r_i − q̂(x_i, a_i))]
                                                     (Dudík, Langford & Li 2011, Eq. 2)
    Replay V̂ = (1/M) Σ_{matched} r_i, a learning policy run through the log: an event is kept
           iff the policy's current model picks a_i; only kept events update the policy
           (Li, Chu, Langford & Wang 2011, Alg. 3). For a uniform log (p_i = 1/K) the M kept
           events are distributed as M rounds of the policy run online (their Thm 1), so V̂
           estimates the policy's online average reward over M rounds. One replay is one
           path of the policy; ``replay`` repeats it with independent policy and device noise
           and adds the between-path variance to the rewards' own (its docstring).

The project's policies are evaluated with their own noise: every kept event's (x_{a_i}, r_i)
goes through the policy's device randomizer (``policy.randomizer.randomize``, the draw the
simulator makes for a device) and, for shuffle-model policies, into exact batches of the
policy's length, just as ``shared.core.simulator.run_once`` feeds them (``replay``;
``train_on_log`` for the frozen-policy estimators).

What each estimate estimates (its ``estimand``, printed with it): replay, the **online value**
(the average reward of the policy learning as it goes, over the M users it kept); IPS, SNIPS and
DR, the **frozen value** (the expected reward per user of one fixed action distribution — a
policy's model trained on part of the log and then frozen, or any π_e given — over the logged
users). They differ by what the policy learns during the evaluated rounds. Every IPS / SNIPS /
DR comes with the overlap diagnostic of ``overlap`` (effective sample size, max weight, share
unsupported by the log), and IPS and SNIPS are refused where the unsupported share exceeds
``overlap.MAX_UNSUPPORTED`` (``Evaluation.refused``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from statistics import NormalDist
from typing import Any

import numpy as np

from privbandit.shared.core.logged import arm_features, check_feedback, feature_dimension
from privbandit.shared.core.overlap import MAX_UNSUPPORTED, Overlap, overlap
from privbandit.shared.core.policies.base import Distributional, Policy
from privbandit.shared.core.simulator import make_policy

CHUNK = 2048  # rounds whose features are rebuilt at once (letter: 2048·26·52 floats, 22 MB)
# At most this many feature numbers are built at once (32 MB): a log of large K·d (OBD disjoint:
# 80 items × d = 1,600) is read in fewer rounds per chunk (``chunk_rows``).
CHUNK_NUMBERS = 1 << 22
LOOKAHEAD = 64  # rounds scored per model beyond the 2K per event its window still needs
ESTIMATORS = ("ips", "snips", "dr")
# ... and on request: "gain", the IPS estimate of V(π_e) − V(π_0) (``gain``), and "ips-exact",
# IPS with the exact (Clopper–Pearson) interval of 0/1 rewards under one weight (``ips_exact``).
ALL_ESTIMATORS = (*ESTIMATORS, "gain", "ips-exact")
# Fewer rounds than this with a nonzero term w_i r_i: the normal interval rests on a handful of
# events (rare rewards, as OBD's clicks) and is not to be trusted.
MIN_INFORMATIVE = 30
GAIN = ("gain over the logging policy: V(π_e) − V(π_0) on the same logged users "
        "(IPS, paired with the logged rewards)")


@dataclass(frozen=True)
class Estimate:
    """A policy-value estimate with its normal confidence interval at ``level``."""

    estimator: str
    value: float
    stderr: float
    low: float
    high: float
    n: int  # the rounds the estimate averages (replay: the matched events)
    level: float
    estimand: str = ""  # what it estimates (module docstring: online or frozen value)

    def covers(self, value: float) -> bool:
        return self.low <= value <= self.high

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def interval(estimator: str, terms: np.ndarray, level: float = 0.95,
             value: float | None = None) -> Estimate:
    """The estimate mean(terms) (or ``value``) ± z · sd(terms, ddof=1)/√n."""
    terms = np.asarray(terms, dtype=float)
    n = terms.shape[0]
    if n == 0:
        raise ValueError(f"{estimator}: no rounds to average")
    if not 0 < level < 1:
        raise ValueError("level must lie in (0, 1)")
    v = float(terms.mean()) if value is None else float(value)
    se = float(terms.std(ddof=1) / math.sqrt(n)) if n > 1 else math.inf
    z = NormalDist().inv_cdf(0.5 + level / 2)
    return Estimate(estimator, v, se, v - z * se, v + z * se, n, level)


def _dist(action_dist: np.ndarray, n: int) -> np.ndarray:
    """π_e as (n, K): OBP's (n, K, len_list) with one slot, or (n, K); rows must sum to 1."""
    pi = np.asarray(action_dist, dtype=float)
    if pi.ndim == 3:
        if pi.shape[2] != 1:
            raise ValueError("only one position (len_list = 1) is supported")
        pi = pi[:, :, 0]
    if pi.ndim != 2 or pi.shape[0] != n:
        raise ValueError(f"action_dist must have shape ({n}, K) or ({n}, K, 1)")
    if (pi < 0).any() or not np.allclose(pi.sum(axis=1), 1.0):
        raise ValueError("action_dist rows must be probability distributions")
    return pi


def importance_weights(action: np.ndarray, pscore: np.ndarray, action_dist: np.ndarray
                       ) -> np.ndarray:
    """w_i = π_e(a_i | x_i) / π_0(a_i | x_i)."""
    action = np.asarray(action, dtype=np.int64)
    pi = _dist(action_dist, action.shape[0])
    pscore = np.asarray(pscore, dtype=float)
    if not ((pscore > 0) & (pscore <= 1)).all():
        raise ValueError("pscore must lie in (0, 1]")
    return pi[np.arange(action.shape[0]), action] / pscore


def ips(reward: np.ndarray, action: np.ndarray, pscore: np.ndarray, action_dist: np.ndarray,
        level: float = 0.95) -> Estimate:
    """Inverse propensity scoring: V̂ = (1/n) Σ w_i r_i (module docstring)."""
    w = importance_weights(action, pscore, action_dist)
    return interval("ips", w * np.asarray(reward, dtype=float), level)


def snips(reward: np.ndarray, action: np.ndarray, pscore: np.ndarray, action_dist: np.ndarray,
          level: float = 0.95) -> Estimate:
    """Self-normalised IPS: V̂ = Σ w_i r_i / Σ w_i, interval by the delta method on
    ψ_i = w_i (r_i − V̂) / w̄ (module docstring)."""
    w = importance_weights(action, pscore, action_dist)
    r = np.asarray(reward, dtype=float)
    mean_w = float(w.mean())
    if mean_w == 0:
        raise ValueError("snips: the evaluated policy never takes a logged action")
    v = float((w * r).sum() / w.sum())
    return interval("snips", w * (r - v) / mean_w + v, level, value=v)


def dr(reward: np.ndarray, action: np.ndarray, pscore: np.ndarray, action_dist: np.ndarray,
       estimated_rewards: np.ndarray, level: float = 0.95) -> Estimate:
    """Doubly robust: V̂ = (1/n) Σ [Σ_a π_e(a|x_i) q̂(x_i, a) + w_i (r_i − q̂(x_i, a_i))]
    (Dudík et al. 2011, Eq. 2); ``estimated_rewards`` is q̂ on the logged rounds, (n, K) (or
    OBP's (n, K, 1))."""
    action = np.asarray(action, dtype=np.int64)
    n = action.shape[0]
    pi = _dist(action_dist, n)
    q = _dist_shape(estimated_rewards, n)
    w = importance_weights(action, pscore, pi)
    q_logged = q[np.arange(n), action]
    terms = (pi * q).sum(axis=1) + w * (np.asarray(reward, dtype=float) - q_logged)
    return interval("dr", terms, level)


def _dist_shape(values: np.ndarray, n: int) -> np.ndarray:
    q = np.asarray(values, dtype=float)
    if q.ndim == 3 and q.shape[2] == 1:
        q = q[:, :, 0]
    if q.ndim != 2 or q.shape[0] != n:
        raise ValueError(f"estimated_rewards must have shape ({n}, K)")
    return q


def gain(reward: np.ndarray, action: np.ndarray, pscore: np.ndarray, action_dist: np.ndarray,
         level: float = 0.95) -> Estimate:
    """The IPS estimate of V(π_e) − V(π_0): (1/n) Σ (w_i − 1) r_i. The logged rewards are an
    unbiased on-policy estimate of V(π_0) (E[r_i] = V(π_0)), so each term is unbiased for the
    difference, and pairing them on the same rounds cancels the users' shared variation in the
    interval."""
    w = importance_weights(action, pscore, action_dist)
    return interval("gain", (w - 1.0) * np.asarray(reward, dtype=float), level)


def ips_exact(reward: np.ndarray, action: np.ndarray, pscore: np.ndarray,
              action_dist: np.ndarray, level: float = 0.95) -> Estimate:
    """IPS with an exact interval, for 0/1 rewards where every nonzero weight is the same w̄
    (a deterministic π_e on a uniform log: w̄ = K). Then IPS = w̄ C / n with C = Σ 1[w_i > 0] r_i
    the matched rewards, and over i.i.d. rounds C ~ Binomial(n, q), q = P(w_i > 0, r_i = 1) =
    V(π_e)/w̄; the Clopper–Pearson interval of q (Clopper & Pearson 1934), times w̄, holds at
    ``level`` at least, however rare the rewards (the normal one does not: with C = 0 its
    width is 0). ``ValueError`` where the rewards or the weights do not fit."""
    from scipy.stats import beta as beta_dist

    r = np.asarray(reward, dtype=float)
    if not np.isin(r, (0.0, 1.0)).all():
        raise ValueError("ips-exact needs 0/1 rewards")
    w = importance_weights(action, pscore, action_dist)
    nonzero = w[w > 0]
    if nonzero.size == 0 or not np.allclose(nonzero, nonzero[0]):
        raise ValueError("ips-exact needs every nonzero weight equal (a deterministic policy "
                         "on a uniform log)")
    w_bar, n = float(nonzero[0]), r.shape[0]
    c = int(((w > 0) & (r == 1)).sum())
    tail = (1 - level) / 2
    low = 0.0 if c == 0 else float(beta_dist.ppf(tail, c, n - c + 1))
    high = 1.0 if c == n else float(beta_dist.ppf(1 - tail, c + 1, n - c))
    v = w_bar * c / n
    se = w_bar * math.sqrt(max(c, 1) * (1 - c / n)) / n  # the binomial's, at q̂ (1 event if 0)
    return Estimate("ips-exact", v, se, w_bar * low, w_bar * high, n, level)


# --- the reward model of DR ----------------------------------------------------------------


@dataclass(frozen=True)
class RidgeRewardModel:
    """q̂(x, a) = ⟨θ̂, x_a⟩, θ̂ = (Σ_i x_{i,a_i} x_{i,a_i}ᵀ + λ I)⁻¹ Σ_i x_{i,a_i} r_i: ridge
    regression of the logged rewards on the logged actions' features (the linear model every
    linear policy of the project assumes)."""

    theta: np.ndarray

    @classmethod
    def fit(cls, feedback: dict[str, Any], rows: slice, lam: float = 1.0) -> RidgeRewardModel:
        d = None
        G: np.ndarray | None = None
        u: np.ndarray | None = None
        for X, idx in chunks(feedback, rows):
            x = X[np.arange(idx.shape[0]), feedback["action"][idx]]
            r = np.asarray(feedback["reward"], dtype=float)[idx]
            if G is None or u is None:
                d = x.shape[1]
                G, u = lam * np.eye(d), np.zeros(d)
            G, u = G + x.T @ x, u + x.T @ r
        if G is None or u is None:
            raise ValueError("no rounds to fit the reward model on")
        return cls(np.linalg.solve(G, u))

    def predict(self, X: np.ndarray) -> np.ndarray:
        """q̂(x_i, a) for features X (n, K, d): (n, K)."""
        return X @ self.theta


def chunk_rows(feedback: dict[str, Any]) -> int:
    """Rounds whose features are built at once: CHUNK, fewer where K·d is large."""
    per_round = int(feedback["n_actions"]) * feature_dimension(feedback)
    return max(1, min(CHUNK, CHUNK_NUMBERS // per_round))


def chunks(feedback: dict[str, Any], rows: slice) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(features (m, K, d), their round indices) for the rounds ``rows``, ``chunk_rows`` at a
    time."""
    start, stop, _ = rows.indices(int(feedback["n_rounds"]))
    step = chunk_rows(feedback)
    for lo in range(start, stop, step):
        idx = np.arange(lo, min(lo + step, stop))
        yield arm_features(feedback, slice(idx[0], idx[-1] + 1)), idx


# --- the project's policies on a log ---------------------------------------------------------


@dataclass
class ReplayResult:
    estimate: Estimate
    matched: np.ndarray  # indices of the kept events of the first replay, in order
    policy: Policy[Any, Any]  # the first replay's policy, after it
    values: list[float]  # each replay's average reward


def replay(feedback: dict[str, Any], make: Callable[[np.random.Generator], Policy[Any, Any]],
           repeats: int = 1, seed: int = 0, level: float = 0.95) -> ReplayResult:
    """Li et al.'s replay (``replay_path``) ``repeats`` times on the same log, each replay with
    its own policy (``make(policy_rng)``) and device streams spawned from ``seed``.

    A learning policy's average reward varies from path to path (a private policy's noise
    steers its model), and a replay draws one path (Li et al.: the kept events are one online
    run). With R replays of M_j kept events and average rewards V_j, the estimate is
    V̂ = (1/R) Σ_j V_j and its standard error √(s_B²/R + s_W²/M̄): s_B² the variance between the
    replays (the policy's own randomness), s_W² the rewards' variance within the first replay
    (the log's reward draws, shared by all replays, counted once), M̄ the mean M_j. With one
    replay s_B is unknown and the interval is the conditional one, √(s_W²/M)."""
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    reward = np.asarray(feedback["reward"], dtype=float)
    values, sizes = [], []
    first: tuple[np.ndarray, Policy[Any, Any]] | None = None
    for child in np.random.SeedSequence(seed).spawn(repeats):
        policy_rng, device_rng = (np.random.default_rng(s) for s in child.spawn(2))
        policy = make(policy_rng)
        matched = replay_path(feedback, policy, device_rng)
        if matched.size == 0:
            raise ValueError("replay: the policy never took a logged action")
        values.append(float(reward[matched].mean()))
        sizes.append(matched.size)
        if first is None:
            first = (matched, policy)
    assert first is not None
    within = interval("replay", reward[first[0]], level)
    v = float(np.mean(values))
    s_w2 = (within.stderr ** 2) * first[0].size
    var = s_w2 / float(np.mean(sizes))
    if repeats > 1:
        var += float(np.var(values, ddof=1)) / repeats
    se = math.sqrt(var)
    z = NormalDist().inv_cdf(0.5 + level / 2)
    est = Estimate("replay", v, se, v - z * se, v + z * se, int(round(np.mean(sizes))), level,
                   ONLINE)
    return ReplayResult(est, first[0], first[1], values)


def replay_path(feedback: dict[str, Any], policy: Policy[Any, Any],
                device_rng: np.random.Generator) -> np.ndarray:
    """Li et al. (2011) Alg. 3 with one of the project's (learning) policies: the indices of the
    kept events, in order.

    The events are read in order; an event is kept iff the current published model picks the
    logged action; kept events are randomised by the policy's device randomizer and fed to
    ``policy.ingest`` at the simulator's cadence (``window()`` reports per model; a shuffle-
    model policy's batch is released only when full). When an ingest consumes only its first k
    rows (a model published after row k), the kept events after them were decided by a model
    that is no longer current: they are read again with the new one, as ``run_once``
    re-decides its users. Kept events of a last, partial window count (the users were served)
    but are never ingested.
    """
    check_feedback(feedback)
    n = int(feedback["n_rounds"])
    action = np.asarray(feedback["action"], dtype=np.int64)
    reward = np.asarray(feedback["reward"], dtype=float)
    n_actions = int(feedback["n_actions"])
    if not np.allclose(feedback["pscore"], 1.0 / n_actions):
        raise ValueError("replay is unbiased for uniform logs only (pscore = 1/K everywhere)")
    kept: list[int] = []  # ingested kept events
    pending: list[int] = []  # kept by the current model, waiting for a full window
    pending_x: list[np.ndarray] = []
    pos = 0
    cache: tuple[int, np.ndarray] | None = None  # (first round, features of a chunk)
    step = chunk_rows(feedback)
    while pos < n:
        if cache is None or not cache[0] <= pos < cache[0] + cache[1].shape[0]:
            cache = (pos, arm_features(feedback, slice(pos, min(pos + step, n))))
        first, X_all = cache
        need = policy.window() - len(pending)
        # Only as many rounds as the window is likely to need (a hit comes once in K rounds
        # of a uniform log): a model that ingests after one kept event (linucb's window of 1)
        # would otherwise score the whole rest of the chunk for every event it keeps. A model
        # that decides from each round's features alone (the linear ones) keeps the same events
        # as with the whole chunk scored; one that draws its arms (the uniform policy) draws for
        # fewer rounds.
        X = X_all[pos - first:pos - first + LOOKAHEAD + 2 * n_actions * need]
        model = policy.model
        a = model.decide(X)  # type: ignore[attr-defined]  # a ContextDeciding model
        hits = np.flatnonzero(a == action[pos:pos + X.shape[0]])
        take = hits[:need]
        pending.extend((pos + take).tolist())
        pending_x.extend(X[take, a[take]])
        if len(take) < need:
            pos += X.shape[0]
            continue
        pos += int(take[-1]) + 1
        rows = policy.randomizer.randomize(np.array(pending_x), reward[pending], device_rng)
        consumed = policy.ingest(rows)  # one ingest per window, as run_once
        kept.extend(pending[:consumed])
        if consumed < len(pending):
            pos = pending[consumed]  # read again with the new model
        pending, pending_x = [], []
    kept.extend(pending)
    return np.asarray(kept, dtype=np.int64)


def train_on_log(feedback: dict[str, Any], policy: Policy[Any, Any], rows: slice,
                 device_rng: np.random.Generator) -> Policy[Any, Any]:
    """Feed the logged rounds ``rows`` to ``policy`` as its users' reports — each (x_{a_i}, r_i)
    randomised by the policy's device randomizer, in windows / full batches as the simulator
    feeds them (a last partial batch is not released) — and return it (its published model is
    what it would deploy). Linear models learn from any logged arm, so every round counts."""
    reward = np.asarray(feedback["reward"], dtype=float)
    action = np.asarray(feedback["action"], dtype=np.int64)
    buf_x: list[np.ndarray] = []
    buf_i: list[int] = []
    for X, idx in chunks(feedback, rows):
        for j, i in enumerate(idx.tolist()):
            buf_x.append(X[j, action[i]])
            buf_i.append(i)
            if len(buf_i) < policy.window():
                continue
            r = policy.randomizer.randomize(np.array(buf_x), reward[buf_i], device_rng)
            used = 0
            while used < len(buf_i):
                used += policy.ingest(r[used:])
            buf_x, buf_i = [], []
    return policy


def train_prefix(feedback: dict[str, Any], config: Any, train_fraction: float, seed: int
                 ) -> tuple[Policy[Any, Any], int]:
    """(policy, cut): the policy of ``config`` trained (``train_on_log``) on the first
    cut = round(train_fraction · n) logged rounds, its policy and device generators spawned
    from ``seed`` — the frozen policy of ``privbandit.evaluate``."""
    if not 0 < train_fraction < 1:
        raise ValueError("train_fraction must lie in (0, 1)")
    cut = int(round(train_fraction * int(feedback["n_rounds"])))
    policy_ss, device_ss = np.random.SeedSequence(seed).spawn(2)
    policy = train_on_log(feedback, make_policy(config, np.random.default_rng(policy_ss)),
                          slice(0, cut), np.random.default_rng(device_ss))
    return policy, cut


def action_distribution(model: Any, X: np.ndarray) -> np.ndarray:
    """π_e(· | x_i) of a published model on features X (n, K, d): its ``distribution`` where it
    randomises (the phase model's count shares, the uniform logger's 1/K), else the one-hot of
    its deterministic ``decide`` (the argmax models: propensity 1)."""
    if isinstance(model, Distributional):
        return np.asarray(model.distribution(X), dtype=float)
    a = model.decide(X)
    out = np.zeros(X.shape[:2])
    out[np.arange(X.shape[0]), a] = 1.0
    return out


ONLINE = ("online value: the average reward of the policy learning online over the users "
          "it kept (Li et al. 2011)")


def frozen_estimand(rows: slice, train: slice | None = None) -> str:
    """The frozen-value label of an evaluation on the logged rounds ``rows``."""
    trained = "" if train is None else (
        f" trained (with its device noise) on logged rounds [{train.start}, {train.stop}) and"
        " then frozen,")
    return (f"frozen value: the expected reward per user of the policy's action distribution"
            f"{trained} over the logged users of rounds [{rows.start}, {rows.stop})")


@dataclass(frozen=True)
class Evaluation(Mapping[str, Estimate]):
    """IPS / SNIPS / DR of one fixed action distribution, with the overlap diagnostic: a
    mapping from estimator name to ``Estimate`` (the refused ones left out, with their reason
    in ``refused``)."""

    estimand: str
    overlap: Overlap
    estimates: dict[str, Estimate] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    warnings: dict[str, tuple[str, ...]] = field(default_factory=dict)  # per estimator

    def __getitem__(self, key: str) -> Estimate:
        return self.estimates[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.estimates)

    def __len__(self) -> int:
        return len(self.estimates)

    def to_dict(self) -> dict[str, Any]:
        return {"estimand": self.estimand, "overlap": self.overlap.to_dict(),
                "estimates": {k: v.to_dict() for k, v in self.estimates.items()},
                "refused": dict(self.refused),
                "warnings": {k: list(v) for k, v in self.warnings.items()}}


def evaluate_distribution(reward: np.ndarray, action: np.ndarray, pscore: np.ndarray,
                          action_dist: np.ndarray, estimated_rewards: np.ndarray | None = None,
                          *, estimators: tuple[str, ...] = ESTIMATORS, level: float = 0.95,
                          pi_b: np.ndarray | None = None, estimand: str = "",
                          max_unsupported: float = MAX_UNSUPPORTED) -> Evaluation:
    """IPS, SNIPS and DR (``estimated_rewards`` q̂ (n, K) needed for DR) of the action
    distribution π_e (n, K) on logged (reward, action, pscore), with the overlap diagnostic;
    IPS and SNIPS refused where the unsupported share exceeds ``max_unsupported``."""
    n = np.shape(action)[0]
    pi = _dist(action_dist, n)
    diag = overlap(action, pscore, pi, pi_b, max_unsupported=max_unsupported)
    label = estimand or "frozen value: the expected reward per user of the given action " \
        "distribution over the logged users"
    out = Evaluation(label, diag)
    for name in estimators:
        if name not in ALL_ESTIMATORS:
            raise ValueError(f"unknown estimator {name!r}; known: {', '.join(ALL_ESTIMATORS)}")
        if name in ("ips", "snips", "gain") and diag.refusal is not None:
            out.refused[name] = diag.refusal
            continue
        if name == "ips":
            est = ips(reward, action, pscore, pi, level)
        elif name == "ips-exact":
            try:
                est = ips_exact(reward, action, pscore, pi, level)
            except ValueError as exc:
                out.refused[name] = str(exc)
                continue
        elif name == "gain":
            out.estimates[name] = replace(gain(reward, action, pscore, pi, level),
                                          estimand=GAIN)
            continue
        elif name == "snips":
            if diag.ess == 0:
                out.refused[name] = "the evaluated policy never takes a logged action"
                continue
            est = snips(reward, action, pscore, pi, level)
        else:
            if estimated_rewards is None:
                raise ValueError("dr needs estimated_rewards (q̂ on the logged rounds, (n, K))")
            est = dr(reward, action, pscore, pi, estimated_rewards, level)
            if diag.unsupported > 0:
                out.warnings[name] = (
                    f"on the unsupported {diag.unsupported:.1%} DR rests on its reward model "
                    "alone (its bias there is the model's)",)
        out.estimates[name] = replace(est, estimand=label)
    informative = int(np.count_nonzero(importance_weights(action, pscore, pi)
                                       * np.asarray(reward, dtype=float)))
    if informative < MIN_INFORMATIVE and set(out.estimates) - {"ips-exact"}:
        out.warnings["all"] = (
            f"only {informative} rounds carry a nonzero weighted reward: the normal intervals "
            "rest on a handful of events and may not cover (for 0/1 rewards under one "
            "weight, ips-exact gives the exact interval)",)
    return out


def evaluate_frozen(feedback: dict[str, Any], policy: Policy[Any, Any], rows: slice,
                    reward_model: RidgeRewardModel, estimators: tuple[str, ...] = ESTIMATORS,
                    level: float = 0.95, *, train: slice | None = None,
                    max_unsupported: float = MAX_UNSUPPORTED) -> Evaluation:
    """IPS / SNIPS / DR of the policy's current (frozen) model on the logged rounds ``rows``
    (``train``: the rounds it learned from, for its label), with the overlap diagnostic."""
    dists, qs, idxs = [], [], []
    for X, idx in chunks(feedback, rows):
        dists.append(action_distribution(policy.model, X))
        qs.append(reward_model.predict(X))
        idxs.append(idx)
    idx = np.concatenate(idxs)
    pi, q = np.concatenate(dists), np.concatenate(qs)
    r = np.asarray(feedback["reward"], dtype=float)[idx]
    a = np.asarray(feedback["action"], dtype=np.int64)[idx]
    p = np.asarray(feedback["pscore"], dtype=float)[idx]
    pi_b = feedback.get("pi_b")
    start, stop, _ = rows.indices(int(feedback["n_rounds"]))
    return evaluate_distribution(
        r, a, p, pi, q, estimators=estimators, level=level,
        pi_b=None if pi_b is None else np.asarray(pi_b)[idx],
        estimand=frozen_estimand(slice(start, stop), train), max_unsupported=max_unsupported)
