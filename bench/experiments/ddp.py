"""Distributed DP (``ddp-linucb``, issue 10 item 5): final regret over ε × l × γ at δ = 10⁻⁶,
d = 5, K = 20 on the ``linear`` environment, practical widths (confidence scale 0.1, eigenvalue
clipping — post-processing, as for the sblb figures it is compared with).

    python -m bench.experiments.ddp [--T 1000000 --runs 3] [--epsilons 0.5,1,4]
        [--batch-sizes 100,1000,10000] [--gammas 1,0.5] [--tag NAME]

Each configuration is written to out/experiments/ddp/<tag>.json as soon as it finishes (a partial
grid is kept), then the plot out/experiments/ddp/<tag>.png (final regret against ε, one line per
(l, γ)). Seeds are shared across configurations (paired users).

    python -m bench.experiments.ddp --combine out/experiments/ddp/gamma1.json,... [--tag all]

re-plots finished (or partial) grids together and prints their table.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from shared.core.policies import build_policy, make_config
from shared.core.simulator import simulate, summarize

OUT = Path("out/experiments/ddp")


def floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",")]


def run_one(eps: float, l: int, gamma: float, T: int, runs: int, seed: int) -> dict[str, Any]:
    config = make_config("ddp-linucb", d=5, epsilon=eps, delta=1e-6, batch_size=l,
                         honest_fraction=gamma, confidence_scale=0.1, regularizer="clip")
    t0 = time.perf_counter()
    results, _ = simulate(config, "linear", 20, T, runs, seed, points=100)
    s = summarize(results)
    ledger = build_policy(config).ledger(T)
    return {
        "epsilon": eps, "batch_size": l, "honest_fraction": gamma,
        "finals": [float(r.regret[-1]) for r in results],
        "mean": s["final_regret_mean"], "stderr": s["final_regret_stderr"],
        "random": s["random_regret_mean"], "model_updates": s["model_updates_mean"],
        "curve": s["regret_curve"], "central_epsilon": ledger.central_epsilon,
        "skellam_mu": ledger.model_dump()["skellam_mu"], "seconds": time.perf_counter() - t0,
    }


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    keys = sorted({(r["batch_size"], r["honest_fraction"]) for r in rows})
    for l, g in keys:
        pts = sorted((r["epsilon"], r["mean"], r["stderr"]) for r in rows
                     if (r["batch_size"], r["honest_fraction"]) == (l, g))
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts],
                    marker="o", capsize=3, label=f"l={l}, γ={g:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("central ε (δ = 1e-6)")
    ax.set_ylabel(f"final regret (T = {rows[0]['curve'][-1][0]})")
    ax.set_title("ddp-linucb, d=5, K=20, linear")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--epsilons", type=floats, default=[1.0, 0.5, 4.0])
    ap.add_argument("--batch-sizes", type=floats, default=[1000, 100, 10000])
    ap.add_argument("--gammas", type=floats, default=[1.0, 0.5])
    ap.add_argument("--tag", default="grid")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--combine", help="comma-separated grid JSONs to table and plot together")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.combine:
        rows = [r for f in args.combine.split(",") for r in json.loads(Path(f).read_text())]
        rows.sort(key=lambda r: (r["honest_fraction"] != 1.0, r["batch_size"], r["epsilon"]))
        for r in rows:
            print(f"| {r['epsilon']:g} | {r['batch_size']} | {r['honest_fraction']:g} | "
                  f"{r['mean']:,.0f} ± {r['stderr']:,.0f} | {r['model_updates']:.0f} | "
                  f"{r['skellam_mu']:.4g} |")
        plot(rows, args.out / f"{args.tag}.png")
        print(f"wrote {args.out / (args.tag + '.png')}")
        return
    rows: list[dict[str, Any]] = []
    for gamma in args.gammas:
        for l in args.batch_sizes:
            for eps in args.epsilons:
                row = run_one(eps, int(l), gamma, args.T, args.runs, args.seed)
                rows.append(row)
                print(f"ε={eps:<4g} l={int(l):<6d} γ={gamma:<4g} regret {row['mean']:10,.0f} ± "
                      f"{row['stderr']:7,.0f}  (central ε {row['central_epsilon']:.4f}, "
                      f"{row['seconds']:.0f} s)", flush=True)
                (args.out / f"{args.tag}.json").write_text(json.dumps(rows, indent=1) + "\n")
    plot(rows, args.out / f"{args.tag}.png")
    print(f"wrote {args.out / (args.tag + '.json')} and .png")


if __name__ == "__main__":
    main()
