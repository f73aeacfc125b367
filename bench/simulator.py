"""Simulator throughput per policy, as a ratio to a pure-numpy floor measured in the same run.

The floor does the same arithmetic as the simulator for T users with no policy logic: draw the
contexts, score all arms against one fixed model (one triangular solve for all users), pick the
argmax, draw rewards and run the policy's local randomizer — all in large chunks. The ratio
simulator time / floor time is the cost of windowing, ingesting, estimating and publishing, and it
is stable across machines where absolute times are not.

    python bench/simulator.py [--T 1000000] [--d 10] [--K 20] [--json out/bench_simulator.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from privbandit.shared.core.environments.linear import LinearEnvironment
from privbandit.shared.core.policies import build_policy, make_config
from privbandit.shared.core.policies.model import Model
from privbandit.shared.core.simulator import simulate

ALGOS = ["linucb", "ldp-linucb", "sblb", "sblb-fixed", "adar-oful"]
CHUNKS = (1024, 4096, 16_384)


def floor_seconds(algo: str, T: int, d: int, K: int, seed: int) -> float:
    """The fastest of a few chunk sizes: a floor must not be slowed by a poor chunk choice."""
    return min(_floor(algo, T, d, K, seed, chunk) for chunk in CHUNKS)


def _floor(algo: str, T: int, d: int, K: int, seed: int, chunk: int) -> float:
    rng = np.random.default_rng(seed)
    env = LinearEnvironment(d, K, rng)
    randomizer = build_policy(make_config(algo, d=d)).randomizer
    model = Model(version=1, theta=rng.normal(size=d) * 0.1, V=np.eye(d) * 3, beta=1.0, reports=0)
    start = time.perf_counter()
    done = 0
    while done < T:
        n = min(chunk, T - done)
        X, mu = env.contexts(n)
        a = model.decide(X)
        idx = np.arange(n)
        r = env.rewards(mu[idx, a], rng)
        randomizer.randomize(X[idx, a], r, rng)
        done += n
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--K", type=int, default=20)
    ap.add_argument("--json", type=Path, default=Path("out/bench_simulator.json"))
    args = ap.parse_args()
    rows = []
    for algo in ALGOS:
        config = make_config(algo, d=args.d)
        floor = floor_seconds(algo, args.T, args.d, args.K, seed=0)
        t0 = time.perf_counter()
        results, _ = simulate(config, "linear", args.K, args.T, 1, seed=0)
        sim = time.perf_counter() - t0
        rows.append({
            "algo": algo,
            "rounds_per_second": args.T / sim,
            "seconds": sim,
            "floor_seconds": floor,
            "ratio_to_floor": sim / floor,
            "model_updates": results[0].model_updates,
        })
        print(f"{algo:11s} {args.T / sim:12,.0f} rounds/s  {sim:6.2f} s  floor {floor:6.2f} s  "
              f"ratio {sim / floor:5.2f}  updates {results[0].model_updates}", flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    machine = platform.processor() or platform.machine()
    summary = {"T": args.T, "d": args.d, "K": args.K, "machine": machine, "results": rows}
    args.json.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
