"""The in-process simulator of ``lplr`` (Li, Simchi-Levi & Wang, Alg. 1 over Algs. 2–6).

LPLR's analyzer needs only per-block sums of a layer group's reports, so the simulator plays the
devices' clean contributions exactly (``LPLR.encode`` → ``LPLRRandomizer.clean``) and adds the
sum of the group's n device noises in one draw of exactly that distribution
(``LPLRRandomizer.aggregate_noise``: Laplace sums as Gamma differences, Wishart sums as one
Wishart) — the same sums n separate ``report`` calls would produce, without materialising
n × (K · bins) noisy numbers. Users are processed in chunks of at most ``CHUNK`` within a group
(the broadcast tree is fixed during a group). Randomness as in ``shared.core.simulator``: one
SeedSequence per run spawns the context, reward, device and analyzer streams.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from privbandit.shared.core.environments import Environment
from privbandit.shared.core.policies.lplr import LPLR
from privbandit.shared.core.policies.lplr_config import LPLRConfig
from privbandit.shared.core.randomizers.lplr import BlockSums
from privbandit.shared.core.simulator import RunResult, simulate_runs

CHUNK = 20_000


def run_lplr_once(policy: LPLR, env: Environment, T: int, reward_rng: np.random.Generator,
                  device_rng: np.random.Generator, checkpoints: np.ndarray,
                  on_progress: Callable[[int], None] | None = None) -> RunResult:
    """Simulate T users; the regret curve at ``checkpoints``."""
    start = time.perf_counter()
    inst = np.empty(T)
    inst_random = np.empty(T)
    t = 0
    ingested = 0
    eliminated = 0.0
    while t < T:
        group = min(policy.window(), T - t)
        complete = group == policy.window()
        sums: BlockSums | None = None
        done = 0
        while done < group:
            n = min(CHUNK, group - done)
            X, mu = env.contexts(n)
            mask = policy.active_sets(X)
            a = policy.choose(mask, device_rng)
            idx = np.arange(n)
            r = env.rewards(mu[idx, a], reward_rng)
            block, u, z, n_blocks = policy.encode(X[idx, a], r, a)
            part = policy.randomizer.clean(block, u, z, n_blocks)
            sums = part if sums is None else sums + part
            best = mu.max(axis=1)
            inst[t + done: t + done + n] = best - mu[idx, a]
            inst_random[t + done: t + done + n] = best - mu.mean(axis=1)
            eliminated += float((env.K - mask.sum(axis=1)).sum())
            policy.consumed(n)
            done += n
        if complete and sums is not None:
            noise = policy.randomizer.aggregate_noise(sums.n, sums.counts.shape[0], policy.rng)
            policy.ingest_blocks(sums + noise)
            ingested += sums.n
        t += group
        if on_progress is not None:
            on_progress(group)
    return RunResult.of_users(
        checkpoints, inst, np.cumsum(inst_random)[checkpoints - 1], policy.model.version,
        ingested, start,
        extra={"epochs_finished": len(policy.finished), "mean_arms_eliminated": eliminated / T})


def simulate_lplr(config: LPLRConfig, env_name: str, K: int, T: int, runs: int, seed: int,
                  on_progress: Callable[[int], None] | None = None, points: int = 200
                  ) -> tuple[list[RunResult], dict[str, Any]]:
    """``runs`` independent runs of ``lplr`` (same contract as ``simulator.simulate``)."""
    if config.K != K:
        raise ValueError(f"config.K = {config.K} but the environment has K = {K}")

    def one(env: Environment, policy_rng: np.random.Generator, reward_rng: np.random.Generator,
            device_rng: np.random.Generator, checkpoints: np.ndarray) -> RunResult:
        return run_lplr_once(LPLR(config, policy_rng), env, T, reward_rng, device_rng,
                             checkpoints, on_progress)

    return simulate_runs(config.d, env_name, K, T, runs, seed, points, one)
