"""Issue 22 — the sblb / sblb-fixed defaults sweep at central ε (δ = 10⁻⁶) on ``linear``.

One process, one simulation at a time (the ε0 searches are cached across rows). Each row is a
config (JSON object of SBLBConfig fields on top of ``--base``); prints final regret ± sd, coverage,
updates, and appends to out/experiments/sblb_sweep.jsonl.

    nice -n 10 python -m bench.experiments.sblb_sweep --T 20000 --runs 12 --seed 100 \
        --rows '[{"batch_schedule": "geometric:500,2,4096", "regularizer": "noise"}, ...]'
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from bench.experiments.cli import experiment_parser
from privbandit.shared.core.policies import make_config
from privbandit.shared.core.simulator import simulate, summarize

OUT = Path("out/experiments/sblb_sweep.jsonl")


def main() -> None:
    ap = experiment_parser(None, T=20_000, runs=12, seed=100, d=5, K=20)
    ap.add_argument("--base", default='{"epsilon": 1.0, "delta": 1e-6, '
                    '"accountant": "secure-sum"}')
    ap.add_argument("--rows", required=True, help="JSON list of config overrides")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    base = json.loads(args.base)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    for row in json.loads(args.rows):
        params = {**base, **row}
        algo = params.pop("algo", "sblb")
        config = make_config(algo, d=args.d, **params)
        t0 = time.perf_counter()
        results, _ = simulate(config, "linear", args.K, args.T, args.runs, args.seed)
        s = summarize(results)
        rec = {"tag": args.tag, "algo": algo, "row": row, "T": args.T, "runs": args.runs,
               "seed": args.seed, "regret": s["final_regret_mean"],
               "stderr": s["final_regret_stderr"],
               "coverage": s.get("coverage"), "updates": s.get("model_updates_mean"),
               "seconds": time.perf_counter() - t0}
        print(f"{algo:10s} {json.dumps(row):90s} {rec['regret']:9.1f} ± {rec['stderr']:7.1f}  "
              f"cov {rec['coverage']}  upd {rec['updates']}  {rec['seconds']:.0f}s", flush=True)
        with OUT.open("a") as f:
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
