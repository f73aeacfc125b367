"""The simulator of the bandit convex optimisation tasks (``--env bco-quadratic|bco-convex``).

All runs advance together: the policy holds ``runs`` copies as arrays and one compiled call serves
a window of W users of every run. Per window and run the simulator draws

    U  ∈ S^{d−1}   (W, runs, d)   each device's perturbation direction u_t
    ζ  ~ U[0, 1]   (W, runs)      each user's loss offset (``BCOEnvironment``)
    z  ~ N(0, 1)   (W, runs)      each device's Gaussian noise, scaled by the policy's σ

so every policy meets the same users, directions and noise for one seed (paired comparisons; the
baseline ignores z). Regret at checkpoint t is Σ_{s ≤ t} F_s(played_s) − min_{x ∈ K} Σ_{s ≤ t}
F_s(x) (``BCOEnvironment.best_fixed_cumulative``), the paper's expected-loss regret.

Randomness: ``run_plan`` gives one SeedSequence per run, which spawns a user stream (ζ) and a device
stream (U, z).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from privbandit.shared.core.environments.bco import BCOEnvironment
from privbandit.shared.core.policies.bco import BCOPolicy, build_bco_policy
from privbandit.shared.core.policies.bco_config import BCOConfig
from privbandit.shared.core.simulator import RunResult, run_plan

WINDOW = 65_536


def unit_directions(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """n directions uniform on the unit sphere S^{d−1} (normalised Gaussians)."""
    v = rng.standard_normal((n, d))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def run_policy(policy: BCOPolicy, env: BCOEnvironment, T: int,
               streams: list[tuple[np.random.Generator, np.random.Generator]],
               checkpoints: np.ndarray, on_progress: Callable[[int], None] | None = None,
               window: int = WINDOW) -> np.ndarray:
    """Cumulative expected loss of the points played at ``checkpoints``, shape (cps, runs)."""
    policy.check(env)
    runs = policy.runs
    if len(streams) != runs:
        raise ValueError("one (user, device) stream pair per run")
    cum = np.empty((checkpoints.shape[0], runs))
    total = np.zeros(runs)
    ci, t = 0, 0
    while t < T:
        n = min(window, T - t)
        U = np.stack([unit_directions(n, env.d, dev) for _, dev in streams], axis=1)
        zeta = np.stack([env.user_offsets(n, user) for user, _ in streams], axis=1)
        z = np.stack([dev.standard_normal(n) for _, dev in streams], axis=1)
        inst = np.cumsum(policy.play(env, U, zeta, z), axis=0)
        while ci < checkpoints.shape[0] and checkpoints[ci] <= t + n:
            cum[ci] = total + inst[int(checkpoints[ci] - t) - 1]
            ci += 1
        total += inst[-1]
        t += n
        if on_progress is not None:
            on_progress(n * runs)
    return cum


def simulate_bco(config: BCOConfig, env: BCOEnvironment, T: int, runs: int, seed: int,
                 on_progress: Callable[[int], None] | None = None, points: int = 200
                 ) -> tuple[list[RunResult], dict[str, Any]]:
    """``runs`` independent runs (vectorised) of one BCO policy; the results and the policy's
    step sizes and noise."""
    checkpoints, children = run_plan(T, runs, seed, points)
    streams = []
    for child in children:
        user_ss, device_ss = child.spawn(2)
        streams.append((np.random.default_rng(user_ss), np.random.default_rng(device_ss)))
    policy = build_bco_policy(config, runs)
    start = time.perf_counter()
    cum = run_policy(policy, env, T, streams, checkpoints, on_progress)
    wall = time.perf_counter() - start
    regret = cum - env.best_fixed_cumulative(checkpoints)[:, None]
    random_regret = env.uniform_regret(checkpoints)
    results = [
        RunResult(checkpoints=checkpoints, regret=regret[:, r], random_regret=random_regret,
                  model_updates=T, repairs=0, reports_ingested=T, wall_seconds=wall / runs,
                  extra={"max_played_norm": float(policy.maxnorm[r])})
        for r in range(runs)
    ]
    return results, {**policy.params(), "max_played_norm": float(policy.maxnorm.max()),
                     "points_per_user": policy.points_per_user}
