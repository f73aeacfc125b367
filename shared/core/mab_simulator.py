"""The simulator's fast path for multi-armed tasks (``--env mab``).

Multi-armed policies publish after every user, so the linear simulator's unit — a window of users
served by one fixed model — would be one user. Instead each window of W users is prepared with
array operations and then played in one call:

    R      = env.reward_grid(W)                  every arm's reward for each user   (W × K)
    ε      = levels.sample(W)                    each user's own privacy level      (W,)
    values = randomizer.values(R, ε)             what each user would report for each arm
    u      = uniform(W)                          each device's uniform for sampling policies
    arms   = policy.play(values, ε, u)           decide → report → ingest → publish, per user

``Policy.play`` is the sequential loop with the same semantics as the services' path
(``play_by_rows`` below: ``model.decide`` and ``ingest`` of one report row at a time), which the
tests check decision by decision. The per-user randomness (reward, ε_t, the mechanism's noise,
the device's uniform) does not depend on the policy, so different policies meet the same users.

Randomness: one SeedSequence per run spawns independent streams for rewards, devices (the
mechanism's noise and the uniforms), the analyzer's own noise (AdaR-UCB) and the users' levels.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from privbandit.shared.core.environments.mab import MABEnvironment
from privbandit.shared.core.policies import build_policy
from privbandit.shared.core.policies.mab_base import MABPolicy
from privbandit.shared.core.policies.mab_config import HeLDPConfig
from privbandit.shared.core.privacy_levels import PrivacyLevels
from privbandit.shared.core.simulator import RunResult, run_plan

WINDOW = 4096


def levels_of(policy: MABPolicy) -> PrivacyLevels | None:
    """The users' privacy levels a policy's config describes (None: no per-user levels)."""
    if not policy.randomizer.per_user_epsilon:
        return None
    config = policy.config
    assert isinstance(config, HeLDPConfig), "per-user levels are HeLDP's"
    return config.levels


def check_compatible(policy: MABPolicy, env: MABEnvironment) -> None:
    """Refuse unbounded rewards for a mechanism that needs rewards in [0, 1]."""
    if env.K != policy.K:
        raise ValueError(f"environment has K={env.K} arms, policy expects K={policy.K}")
    if not env.bounded and policy.randomizer.bounded:
        raise ValueError(f"{policy.algo} needs rewards in [0, 1]; the {env.reward_dist} "
                         "environment is unbounded (use a sigmoid variant, --sigmoid)")


def run_mab_once(
    policy: MABPolicy,
    env: MABEnvironment,
    T: int,
    streams: tuple[np.random.Generator, ...],
    checkpoints: np.ndarray,
    on_progress: Callable[[int], None] | None = None,
    window: int = WINDOW,
) -> RunResult:
    """Simulate T users; the regret curve at ``checkpoints``."""
    reward_rng, device_rng, level_rng = streams
    check_compatible(policy, env)
    levels = levels_of(policy)
    start = time.perf_counter()
    inst = np.empty(T)  # instantaneous pseudo-regret μ* − μ_{a_t} of every user
    t = 0
    while t < T:
        n = min(window, T - t)
        R = env.reward_grid(n, reward_rng)
        eps = None if levels is None else levels.sample(n, level_rng)
        values = policy.randomizer.values(R, eps, device_rng)
        u = device_rng.random(n)
        inst[t:t + n] = env.gaps[policy.play(values, eps, u)]
        t += n
        if on_progress is not None:
            on_progress(n)
    return RunResult.of_users(
        checkpoints, inst, checkpoints * float(env.gaps.mean()), policy.model.version,
        policy.reports, start,
        extra={"used": policy.used, "declined": policy.declined, "reports": policy.reports})


def play_by_rows(policy: MABPolicy, values: np.ndarray, eps: np.ndarray | None,
                 u: np.ndarray) -> np.ndarray:
    """The services' path over the same users: each user decides from the published model, her
    report row is ingested, and the policy publishes — one ``ingest`` per window it asks for."""
    n = u.shape[0]
    arms = np.empty(n, dtype=np.int64)
    i = 0
    while i < n:
        k = min(policy.window(), n - i)
        chosen = np.concatenate([policy.model.decide(u[j]) for j in range(i, i + k)])
        vals = values[np.arange(i, i + k), chosen]
        cols = [chosen.astype(float)]
        if policy.randomizer.per_user_epsilon:
            cols.append(np.asarray(eps)[i:i + k])
        if policy.randomizer.carries_probability:
            cols.append(policy.model.probabilities[chosen])  # type: ignore[index]  # rows carry p: a sampling model
        rows = np.stack(cols + [vals], axis=1)
        used = 0
        while used < k:
            used += policy.ingest(rows[used:])
        arms[i:i + k] = chosen
        i += k
    return arms


def simulate_mab(config: Any, env: MABEnvironment, T: int, runs: int, seed: int,
                 on_progress: Callable[[int], None] | None = None, points: int = 200
                 ) -> list[RunResult]:
    """``runs`` independent runs of one policy on one environment."""
    checkpoints, children = run_plan(T, runs, seed, points)
    results = []
    for child in children:
        reward_rng, device_rng, policy_rng, level_rng = (
            np.random.default_rng(s) for s in child.spawn(4))
        policy = build_policy(config, policy_rng)
        if not isinstance(policy, MABPolicy):
            raise ValueError(f"{config.algo} is not a multi-armed policy")
        results.append(run_mab_once(policy, env, T, (reward_rng, device_rng, level_rng),
                                    checkpoints, on_progress))
    return results


def per_user_fractions(results: list[RunResult]) -> tuple[int, int, int]:
    """(used, declined, reports) summed over runs."""
    keys = ("used", "declined", "reports")
    used, declined, reports = (sum(int(r.extra[k]) for r in results) for k in keys)
    return used, declined, reports
