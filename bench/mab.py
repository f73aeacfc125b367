"""Multi-armed simulator throughput per policy, as a ratio to a floor measured in the same run.

The floor draws what T users bring and send, with no policy at all: each user's arm (uniform),
her Bernoulli reward for it, her privacy level, and the policy's own device mechanism on that
reward — in large chunks (best of three passes over a few chunk sizes). The simulator additionally
draws every arm's reward for each user (the window grid), runs the mechanism on the grid, and plays
the users one at a time through the policy (decide, ingest, publish after every user; AdaR-UCB per
episode). The ratio is the price of the per-user updates.

    python bench/mab.py [--T 1000000] [--K 20] [--json out/bench_mab.json]
"""

from __future__ import annotations

import json
import platform
import time

import numpy as np

from bench.args import parse
from privbandit.shared.core.environments.mab import MABEnvironment, default_means
from privbandit.shared.core.mab_simulator import levels_of, simulate_mab
from privbandit.shared.core.policies import build_policy, make_config

CASES = [
    ("ucb", {}),
    ("heldp-ucb-l", {"epsilon": 1.0}),
    ("heldp-ucb-b", {"epsilon": 1.0}),
    ("heldp-ucb-l", {"epsilon_dist": "choice:0,0.2,1,2,100"}),
    ("heldp-ucb-b", {"epsilon_dist": "normal:1,1"}),
    ("ldp-mab", {"epsilon": 1.0}),
    ("ldp-mab", {"epsilon": 1.0, "black_box": "ucb"}),
    ("adar-ucb", {"epsilon": 1.0, "alpha": 2.0}),
]
CHUNKS = (4096, 16_384, 65_536)


def floor_seconds(config, env: MABEnvironment, T: int, repeats: int = 3) -> float:
    """Best of ``repeats`` passes over each chunk size: the floor takes tens of milliseconds, so
    one pass is at the mercy of the other jobs on a shared machine."""
    return min(_floor(config, env, T, chunk) for chunk in CHUNKS for _ in range(repeats))


def _floor(config, env: MABEnvironment, T: int, chunk: int) -> float:
    rng = np.random.default_rng(0)
    policy = build_policy(config)
    levels = levels_of(policy)
    start = time.perf_counter()
    done = 0
    while done < T:
        n = min(chunk, T - done)
        arms = rng.integers(0, env.K, size=n)
        r = (rng.random(n) < env.means[arms]).astype(float)
        eps = None if levels is None else levels.sample(n, rng)
        policy.randomizer.values(r, eps, rng)
        done += n
    return time.perf_counter() - start


def label(algo: str, params: dict) -> str:
    extra = ", ".join(f"{k}={v}" for k, v in params.items())
    return f"{algo} ({extra})" if extra else algo


def main() -> None:
    args = parse(__doc__, {"T": 1_000_000, "K": 20}, "out/bench_mab.json")
    env = MABEnvironment(default_means(args.K))
    rows = []
    for algo, params in CASES:
        if algo == "ldp-mab":
            params = {**params, "horizon": args.T}
        config = make_config(algo, K=args.K, **params)
        floor = floor_seconds(config, env, args.T)
        t0 = time.perf_counter()
        results = simulate_mab(config, env, args.T, 1, seed=0)
        sim = time.perf_counter() - t0
        rows.append({
            "policy": label(algo, {k: v for k, v in params.items() if k != "horizon"}),
            "seconds": sim,
            "users_per_second": args.T / sim,
            "floor_seconds": floor,
            "ratio_to_floor": sim / floor,
            "model_updates": results[0].model_updates,
            "final_regret": float(results[0].regret[-1]),
        })
        r = rows[-1]
        print(f"{r['policy']:48s} {sim:6.2f} s  {r['users_per_second']:10,.0f} users/s  floor "
              f"{floor:5.2f} s  ratio {sim / floor:6.1f}  updates {r['model_updates']}",
              flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    summary = {"T": args.T, "K": args.K, "machine": platform.processor() or platform.machine(),
               "results": rows}
    args.json.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
