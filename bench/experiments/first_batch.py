"""The first batch (issue 44, items 2–3): how much of a private policy's regret is the users before
its first model, and paired comparisons of settings that change it, on held-out seeds.

Each setting is the policy's practical defaults (what ``privbandit simulate`` runs) with some
fields replaced (NAME=FIELD:VALUE[,FIELD:VALUE...]; ``batch_schedule`` takes the rest of the
line, as in ``ddp_settings``). Every setting runs on the same seeds (``--seeds``, ``--runs`` runs
each), hence the same users, so differences to the first setting are paired. Central ε is the
target's (``--epsilon``: ddp-linucb's central ε; adar-oful's central target at δ, its RDP ε
derived as ``privbandit simulate --central-epsilon`` does).

    python -m bench.experiments.first_batch --algo ddp-linucb --env linear --T 10000 \\
        --seeds 101,102,103 --runs 3 base= small=batch_schedule:geometric:300,2,100000

Prints per setting: the first release's time t₁ (the first batch / first episode), the regret
before it (users playing uniformly, no model), the final regret ± s.e. over all runs, the paired
difference to the first setting ± s.e., the random policy's regret on the same users, and the
seconds the setting took.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from bench.experiments.cli import experiment_parser
from bench.experiments.ddp_settings import parse_setting as parse_numeric
from privbandit.shared.core.simulator import simulate
from privbandit.simulation import resolve_config

DEFAULT_DIMS = {"linear": (5, 20), "digits": (40, 10), "letter": (52, 26)}


TEXT_VALUED = ("noise",)


def parse_setting(spec: str) -> tuple[str, dict[str, Any]]:
    """``ddp_settings.parse_setting``, with ``noise`` (aggregators/devices) kept as text."""
    name, _, body = spec.partition("=")
    texts = {}
    for key in TEXT_VALUED:
        prefix = f"{key}:"
        parts = body.split(",")
        for part in [p for p in parts if p.startswith(prefix)]:
            texts[key] = part.removeprefix(prefix)
            parts.remove(part)
        body = ",".join(parts)
    name, params = parse_numeric(f"{name}={body}")
    return name, {**params, **texts}


def first_release(config: Any) -> int:
    """t₁: the number of users before the first model (ddp-linucb: the first batch's length;
    adar-oful: its first episode)."""
    for name in ("first_episode", "batch_size"):
        if hasattr(config, name):
            return int(getattr(config, name))
    return 0


def run_setting(algo: str, env: str, params: dict[str, Any], T: int, seeds: list[int],
                runs: int, epsilon: float, delta: float) -> dict[str, Any]:
    d, K = DEFAULT_DIMS[env]
    given = {"delta": delta, **params}
    central = None
    if algo == "adar-oful":
        central = epsilon
    else:
        given["epsilon"] = epsilon
    config, ignored = resolve_config(algo, d=d, K=K, env=env, T=T, params=given,
                                     central_epsilon=central)
    if ignored:
        raise SystemExit(f"{algo} does not take {', '.join(ignored)}")
    t1 = first_release(config)
    finals, before, rand = [], [], []
    started = time.perf_counter()
    for seed in seeds:
        results, _ = simulate(config, env, K, T, runs, seed, extra_checkpoints=[t1] if t1 else [])
        for r in results:
            finals.append(float(r.regret[-1]))
            rand.append(float(r.random_regret[-1]))
            i = int(np.searchsorted(r.checkpoints, t1)) if t1 else 0
            before.append(float(r.regret[i]) if t1 and t1 <= T else 0.0)
    return {"t1": t1, "finals": np.array(finals), "before": np.array(before),
            "random": float(np.mean(rand)), "seconds": time.perf_counter() - started}


def se(values: np.ndarray) -> float:
    return float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else 0.0


def main(argv: list[str] | None = None) -> int:
    p = experiment_parser((__doc__ or "").split("\n\n")[0], T=10_000, runs=3, epsilon=1.0,
                          delta=1e-6)
    p.add_argument("--algo", choices=["ddp-linucb", "adar-oful"], default="ddp-linucb")
    p.add_argument("--env", choices=sorted(DEFAULT_DIMS), default="linear")
    p.add_argument("--seeds", default="101,102,103", help="comma-separated seeds (tuning: "
                   "101,102,103; reported figures: 1)")
    p.add_argument("settings", nargs="+", help="NAME=FIELD:VALUE,... ('base=' for the defaults)")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    ref: np.ndarray | None = None
    ref_name = ""
    print(f"{args.algo} on {args.env}, T={args.T}, ε={args.epsilon:g}, δ={args.delta:g}, "
          f"seeds {args.seeds} × {args.runs} runs")
    for spec in args.settings:
        name, params = parse_setting(spec)
        out = run_setting(args.algo, args.env, params, args.T, seeds, args.runs, args.epsilon,
                          args.delta)
        finals, before = out["finals"], out["before"]
        line = (f"{name:18s} t1={out['t1']:6d} before t1 {before.mean():8.1f}   final "
                f"{finals.mean():9.1f} ± {se(finals):6.1f}")
        if ref is None:
            ref, ref_name = finals, name
        else:
            line += f"   vs {ref_name}: {(finals - ref).mean():+8.1f} ± {se(finals - ref):6.1f}"
        line += (f"   ({100 * finals.mean() / out['random']:.1f} % of random "
                 f"{out['random']:.0f}; {out['seconds']:.0f} s)")
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
