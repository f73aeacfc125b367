"""Issue 22 item 4 — ``adar-oful``'s practical settings, swept on paired users.

Each variant is an ``AdaROFULConfig`` override (JSON) on top of the central (ε, δ = 10⁻⁶) budget: α
= 2 and the RDP ε whose ledger conversion is ε (``RDP_EPSILON``, found in
docs/benchmarks/ddp-linucb.md by ``bench.experiments.ddp.match_central_epsilon``). All variants run
on the same ``--seed``, hence the same θ*, contexts and reward draws per run, so differences are
paired; the table gives the mean final regret, its standard error, the paired difference to the
first variant and its s.e.

    python -m bench.experiments.adar_sweep --T 20000 --runs 12 --seed 100 --epsilon 1 \\
        '{}' '{"confidence_scale": 0.1}' '{"confidence_scale": 0.1, "first_episode": 300}'
"""

from __future__ import annotations

import json
import math
import time

import numpy as np

from bench.experiments.cli import experiment_parser
from privbandit.shared.core.policies import build_policy, make_config
from privbandit.shared.core.simulator import simulate, summarize

DELTA = 1e-6
# RDP ε at α = 2 whose dp-accounting conversion is central ε at δ = 10⁻⁶
# (docs/benchmarks/ddp-linucb.md, issue 10).
RDP_EPSILON = {0.5: 0.01326, 1.0: 0.04871, 4.0: 0.622}


def main(argv: list[str] | None = None) -> None:
    ap = experiment_parser(__doc__, T=20_000, runs=12, seed=100, d=5, K=20)
    ap.add_argument("variants", nargs="+", help="JSON config overrides, one per variant")
    ap.add_argument("--epsilon", type=float, default=1.0, choices=sorted(RDP_EPSILON))
    args = ap.parse_args(argv)
    base: np.ndarray | None = None
    for text in args.variants:
        over = json.loads(text)
        config = make_config("adar-oful", d=args.d, alpha=2.0, epsilon=RDP_EPSILON[args.epsilon],
                             delta=DELTA, **over)
        ledger = build_policy(config).ledger(args.T)
        t0 = time.perf_counter()
        results, _ = simulate(config, "linear", args.K, args.T, args.runs, args.seed, points=20)
        s = summarize(results)
        finals = np.array([r.regret[-1] for r in results])
        if base is None:
            base = finals
        diff = finals - base
        dse = diff.std(ddof=1) / math.sqrt(len(diff)) if len(diff) > 1 else 0.0
        cov = s["coverage"]
        print(f"eps={args.epsilon:g} (ledger {ledger.central_epsilon:.4f}) {text:60s} "
              f"{s['final_regret_mean']:9.1f} ± {s['final_regret_stderr']:7.1f}  "
              f"Δ {diff.mean():+8.1f} ± {dse:6.1f}  median {np.median(finals):8.1f}  "
              f"cov {'—' if cov is None else f'{cov:.2f}'}  upd {s['model_updates_mean']:.0f}  "
              f"{time.perf_counter() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
