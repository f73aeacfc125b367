"""The in-process simulator: many users, one policy, the whole ESA pipeline in arrays.

Between two publications the model is fixed, so the simulator decides, rewards and randomises a
whole window of users with array operations (``Policy.window`` users at a time), plays the
shuffler (exact batches of l for shuffle-model policies; a partial batch at the end of the horizon
is never released) and hands the reports to the same ``Policy.ingest`` the analyzer uses. Users that
a model switch leaves undecided are returned to the environment and decided again with the new
model, so the schedule is exactly the sequential one.

Randomness: one SeedSequence per run spawns independent streams for contexts, rewards, device
randomisers and the analyzer's own noise.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from privbandit.shared.core.environments import Environment, make_environment
from privbandit.shared.core.exploration import Exploration, ExploringPolicy
from privbandit.shared.core.logged import DecisionLog, UniformConfig, UniformPolicy
from privbandit.shared.core.policies import Policy, PolicyConfig, build_policy
from privbandit.shared.core.policies.base import Distributional, Ellipsoid, WithPropensity
from privbandit.shared.core.policies.model import shared_arms


@runtime_checkable
class ContextDeciding(Protocol):
    """A published model that chooses one arm per user from that user's (K, d) features: the
    linear, GLB and phase families' models (what this simulator serves)."""

    def decide(self, X: np.ndarray) -> np.ndarray: ...


def make_policy(config: Any, rng: np.random.Generator | None = None) -> Policy[Any, Any]:
    """The policy of a config: a registered one (``build_policy``), or the uniform-random
    logging policy of a ``UniformConfig`` (``--algo random``)."""
    if isinstance(config, UniformConfig):
        return UniformPolicy(config, rng)
    return build_policy(config, rng)


def log_for(env: Environment) -> DecisionLog:
    """An empty decision log whose contexts follow the environment's ``feature_map``."""
    return DecisionLog(env.feature_map, env.fixed_arms)  # type: ignore[arg-type]  # one of FEATURE_MAPS, checked there


@dataclass
class RunResult:
    checkpoints: np.ndarray
    regret: np.ndarray  # cumulative pseudo-regret at each checkpoint
    random_regret: np.ndarray  # same for the uniformly random policy on the same users
    model_updates: int
    repairs: int
    reports_ingested: int
    wall_seconds: float
    extra: dict[str, Any] = field(default_factory=dict)
    # Fraction of the published models whose confidence set {θ: ‖θ − θ̃‖_Ṽ ≤ β} holds θ*
    # (None where the environment has no θ* or no model was published).
    coverage: float | None = None

    @classmethod
    def of_users(cls, checkpoints: np.ndarray, inst: np.ndarray, random_regret: np.ndarray,
                 model_updates: int, reports_ingested: int, started: float,
                 extra: dict[str, Any]) -> RunResult:
        """The result of a run that kept every user's instantaneous pseudo-regret ``inst``
        (shape (T,)): the cumulative regret Σ_{s≤t} inst_s at each checkpoint t, no repairs, and
        the wall time since ``started`` (a ``time.perf_counter()`` reading)."""
        return cls(checkpoints=checkpoints, regret=np.cumsum(inst)[checkpoints - 1],
                   random_regret=random_regret, model_updates=model_updates, repairs=0,
                   reports_ingested=reports_ingested, wall_seconds=time.perf_counter() - started,
                   extra=extra)


def run_plan(
    T: int, runs: int, seed: int, points: int
) -> tuple[np.ndarray, list[np.random.SeedSequence]]:
    """The checkpoints of a ``runs``-run simulation of T users, and one SeedSequence per run
    (spawned from ``seed``: independent, reproducible streams)."""
    if T < 1 or runs < 1:
        raise ValueError("T and runs must be >= 1")
    return checkpoints_for(T, points), np.random.SeedSequence(seed).spawn(runs)


def checkpoints_for(T: int, points: int = 200) -> np.ndarray:
    """Evenly spaced checkpoints ending at T."""
    points = max(1, min(points, T))
    return np.unique(np.linspace(T / points, T, points).round().astype(np.int64))


def run_once(
    policy: Policy,
    env: Environment,
    T: int,
    reward_rng: np.random.Generator,
    device_rng: np.random.Generator,
    checkpoints: np.ndarray,
    on_progress: Callable[[int], None] | None = None,
    log: DecisionLog | None = None,
) -> RunResult:
    """Simulate T users; returns the regret curve at ``checkpoints``. ``log``: where to record
    every decision kept (features, arm, reward, the propensity of the model that decided it,
    the true means) — the users a model switch sends back are recorded when re-decided."""
    start = time.perf_counter()
    cum = np.zeros(checkpoints.shape[0])
    rnd = np.zeros(checkpoints.shape[0])
    total = 0.0
    total_random = 0.0
    ci = 0
    t = 0
    ingested = 0
    theta_star = getattr(env, "theta", None)
    published = covered = 0
    while t < T:
        batch = policy.batch_size  # a batch schedule may grow it after every batch
        version = policy.model.version
        want = policy.window()
        n = min(want, T - t)
        X, mu = env.contexts(n)
        model = policy.model
        if not isinstance(model, ContextDeciding):
            raise TypeError(f"{policy.algo}'s model does not decide from contexts")
        a = model.decide(X)
        idx = np.arange(n)
        mu_a = mu[idx, a]
        r = env.rewards(mu_a, reward_rng)
        rows = policy.randomizer.randomize(X[idx, a], r, device_rng)
        if batch > 1 and n < want:
            k = n  # the shuffler never releases a batch smaller than l
        else:
            k = policy.ingest(rows)
            ingested += k
            if theta_star is not None and policy.model.version != version:
                inside = contains(policy.model, theta_star)
                if inside is not None:
                    published += 1
                    covered += inside
        if k < n:
            env.unread(X[k:], mu[k:])
        if log is not None:
            log.record(X[:k], a[:k], r[:k], propensity_of(model, X[:k], a[:k]), mu[:k],
                       model.distribution(X[:k]) if isinstance(model, Distributional)
                       else None)
        best, average = _best_and_average(mu[:k])
        inst = np.cumsum(best - mu_a[:k])
        inst_random = np.cumsum(best - average)
        # Record every checkpoint that falls inside this window.
        while ci < checkpoints.shape[0] and checkpoints[ci] <= t + k:
            j = int(checkpoints[ci] - t) - 1
            cum[ci] = total + inst[j]
            rnd[ci] = total_random + inst_random[j]
            ci += 1
        total += float(inst[-1])
        total_random += float(inst_random[-1])
        t += k
        if on_progress is not None:
            on_progress(k)
    return RunResult(
        checkpoints=checkpoints,
        regret=cum,
        random_regret=rnd,
        model_updates=policy.model.version,
        repairs=policy.repairs,
        reports_ingested=ingested,
        wall_seconds=time.perf_counter() - start,
        coverage=covered / published if published else None,
    )


def propensity_of(model: Any, X: np.ndarray, a: np.ndarray) -> np.ndarray:
    """π(a_i | X_i) under the model that decided (its ``propensity``)."""
    if not isinstance(model, WithPropensity):
        raise TypeError(f"{type(model).__name__} states no propensity")
    return np.asarray(model.propensity(X, a), dtype=float)


def contains(model: Any, theta_star: np.ndarray) -> bool | None:
    """Whether θ* lies in the model's confidence ellipsoid (θ̃ − θ*)ᵀ Ṽ (θ̃ − θ*) ≤ β²; None for a
    model that states no such ellipsoid (no V, θ̃ or β, or another dimension)."""
    if not isinstance(model, Ellipsoid):
        return None
    V, theta, beta = model.V, model.theta, model.beta
    if V is None or theta is None or beta is None or np.shape(theta) != np.shape(theta_star):
        return None
    diff = np.asarray(theta, dtype=float) - theta_star
    return bool(diff @ V @ diff <= beta * beta)


def _best_and_average(mu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per user: the best mean and the mean of a uniformly random arm (computed once when every
    user shares one arm set, as in ``fixed-linear`` with K up to 10⁴)."""
    if shared_arms(mu):
        n = mu.shape[0]
        return np.full(n, mu[0].max()), np.full(n, mu[0].mean())
    return mu.max(axis=1), mu.mean(axis=1)


# One run on a fresh environment: (env, policy_rng, reward_rng, device_rng, checkpoints) -> result.
RunFn = Callable[
    [Environment, np.random.Generator, np.random.Generator, np.random.Generator, np.ndarray],
    RunResult,
]


def simulate_runs(
    d: int, env_name: str, K: int, T: int, runs: int, seed: int, points: int, run: RunFn
) -> tuple[list[RunResult], dict[str, Any]]:
    """``runs`` independent runs of ``run``, each on a fresh environment drawn from its own
    stream; every run gets four streams (environment, rewards, device, policy) spawned from its
    SeedSequence. Returns the results and the environment's parameters."""
    checkpoints, children = run_plan(T, runs, seed, points)
    results = []
    env_params: dict[str, Any] = {}
    for child in children:
        env_rng, reward_rng, device_rng, policy_rng = (
            np.random.default_rng(s) for s in child.spawn(4)
        )
        env = make_environment(env_name, d, K, env_rng)
        env_params = env.params()
        results.append(run(env, policy_rng, reward_rng, device_rng, checkpoints))
    return results, env_params


def public_warm_start(policy: Any, env: Environment, n: int, rng: np.random.Generator) -> None:
    """The simulator's stand-in for a log the operator declares public (issue 44): n rounds of
    the same environment under uniform logging, drawn from ``rng`` (the users' stream is the
    environment's own, left untouched), given to ``policy.warm_start`` before the first user."""
    saved, env.rng = env.rng, rng
    try:
        X, mu = env._draw(n)
    finally:
        env.rng = saved
    idx = np.arange(n)
    a = rng.integers(0, X.shape[1], size=n)
    policy.warm_start(X[idx, a], env.rewards(mu[idx, a], rng))


def simulate(
    config: PolicyConfig | UniformConfig,
    env_name: str,
    K: int,
    T: int,
    runs: int,
    seed: int,
    on_progress: Callable[[int], None] | None = None,
    points: int = 200,
    extra_checkpoints: Sequence[int] = (),
    logs: list[DecisionLog] | None = None,
    exploration: Exploration | None = None,
) -> tuple[list[RunResult], dict[str, Any]]:
    """``runs`` independent runs; returns the results and the environment's parameters.
    ``exploration``: the policy decides with ε-greedy or softmax exploration (``exploration``;
    an exploring logging policy for ``logs``).
    ``extra_checkpoints``: times t ≤ T recorded besides the ``points`` evenly spread ones
    (checkpoints only record the running regret: they draw nothing, so the runs are the same).
    ``logs``: a list that receives each run's ``DecisionLog`` (logging draws nothing either).
    A ``UniformConfig`` runs the uniform-random logging policy."""
    extra = [t for t in extra_checkpoints if 1 <= t <= T]

    def one(env: Environment, policy_rng: np.random.Generator, reward_rng: np.random.Generator,
            device_rng: np.random.Generator, checkpoints: np.ndarray) -> RunResult:
        policy: Any = make_policy(config, policy_rng)
        policy.bind_arms(env.fixed_arms)
        public = int(getattr(config, "public_warm_start", 0))
        if public:  # its draws from a child stream: the users and the policy's own unchanged
            public_warm_start(policy, env, public, policy_rng.spawn(1)[0])
        if exploration is not None:  # its draws from a child stream: the policy's own unchanged
            policy = ExploringPolicy(policy, exploration, policy_rng.spawn(1)[0])
        if extra:
            checkpoints = np.union1d(checkpoints, extra).astype(checkpoints.dtype)
        log = None
        if logs is not None:
            log = log_for(env)
            logs.append(log)
        return run_once(policy, env, T, reward_rng, device_rng, checkpoints, on_progress, log)

    return simulate_runs(config.d, env_name, K, T, runs, seed, points, one)


def summarize(results: list[RunResult]) -> dict[str, Any]:
    """Mean and standard error across runs (stderr = sample sd / √runs; 0 for one run)."""
    R = len(results)
    curves = np.stack([r.regret for r in results])
    finals = curves[:, -1]
    mean_curve = curves.mean(axis=0)
    stderr_curve = curves.std(axis=0, ddof=1) / math.sqrt(R) if R > 1 else np.zeros_like(mean_curve)
    rand = np.stack([r.random_regret for r in results])
    cps = results[0].checkpoints
    return {
        "final_regret_mean": float(finals.mean()),
        "final_regret_stderr": float(finals.std(ddof=1) / math.sqrt(R)) if R > 1 else 0.0,
        "regret_curve": [[int(t), float(v)] for t, v in zip(cps, mean_curve, strict=True)],
        "regret_curve_stderr": [float(v) for v in stderr_curve],
        "random_regret_mean": float(rand[:, -1].mean()),
        "model_updates_mean": float(np.mean([r.model_updates for r in results])),
        "psd_repairs_mean": float(np.mean([r.repairs for r in results])),
        "reports_ingested_mean": float(np.mean([r.reports_ingested for r in results])),
        "run_wall_seconds": [r.wall_seconds for r in results],
        "coverage": _mean_coverage(results),
    }


def _mean_coverage(results: list[RunResult]) -> float | None:
    """Mean over runs of each run's coverage (None if no run has one)."""
    values = [r.coverage for r in results if r.coverage is not None]
    return float(np.mean(values)) if values else None


def user_streams(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """(environment, reward) generators of the user sequence that ``privbandit demo --seed``
    drives through the services; ``same_users_regret`` replays exactly these users in memory."""
    env_ss, reward_ss = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(env_ss), np.random.default_rng(reward_ss)


def same_users_regret(
    config: PolicyConfig, env_name: str, K: int, T: int, seed: int, reps: int = 20,
    arms: np.ndarray | None = None,
) -> np.ndarray:
    """Final regret of ``reps`` in-memory runs on the demo's users for ``seed`` (same θ*, same
    contexts, same reward draws), varying only the device and analyzer randomness: the spread
    a services run of the same task should fall in. ``arms``: a ``fixed-linear`` run on these
    arms (an ``adar-gope`` task's) instead of the drawn ones."""
    return same_users_curves(config, env_name, K, T, seed, reps, arms, points=1)[1][:, -1]


def same_users_curves(
    config: PolicyConfig, env_name: str, K: int, T: int, seed: int, reps: int = 20,
    arms: np.ndarray | None = None, points: int = 50,
) -> tuple[np.ndarray, np.ndarray]:
    """``same_users_regret``'s runs as curves: the checkpoints (``points`` of them, ending at
    T) and each run's cumulative regret there (reps × checkpoints)."""
    checkpoints = checkpoints_for(T, points)
    curves = np.empty((reps, checkpoints.shape[0]))
    for rep in range(reps):
        env_rng, reward_rng = user_streams(seed)
        env = make_environment(env_name, config.d, K, env_rng)
        if arms is not None:
            env.use_arms(arms)  # type: ignore[attr-defined]  # arms: a fixed-linear env's
        device_rng, policy_rng = (
            np.random.default_rng(s) for s in np.random.SeedSequence([seed, rep, 0x5EED]).spawn(2)
        )
        policy = build_policy(config, policy_rng)
        policy.bind_arms(env.fixed_arms)
        result = run_once(policy, env, T, reward_rng, device_rng, checkpoints)
        curves[rep] = result.regret
    return checkpoints, curves
