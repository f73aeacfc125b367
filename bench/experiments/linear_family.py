"""Issue 9's experiments: fixed arm sets, logistic rewards and the letter data set.

    python -m bench.experiments.linear_family fixed    [--T 10000,100000,1000000 --runs 3]
    python -m bench.experiments.linear_family logistic [--T 100000 --runs 3]
    python -m bench.experiments.linear_family letter   [--T 100000 --runs 3]

``fixed``: ``fixed-linear`` (d = 5, K = 100) at several horizons: linucb, ldp-linucb, sblb (shuffle
batch l = 100, secure summation, ε0 solved so that the central ε equals the budget's),
adar-gope (RDP ε solved so that its (ε, δ) conversion equals the budget's) and lplr (pure
ε-LDP, so δ = 0 meets every budget), at per-user budgets
(ε, δ) = (1, 10⁻²), (0.5, 10⁻²) and (1, 10⁻⁶), each with the papers' widths (confidence_scale 1,
paper regularizer) and the practical ones (0.1, clip; adar-gope: phases shrunk by 0.1²).
``logistic``: ldp-glb against ldp-linucb on ``logistic`` (d = 5, K = 20) at ε ∈ {1, 4}, δ = 10⁻⁶.
``letter``: every private linear policy on ``letter`` (d = 52, K = 26) next to linucb and the
random policy, at ε = 1 (δ = 10⁻⁶) per user.

Runs of one table share their seeds (the same users for every policy). Writes
out/experiments/<name>.json and .png; prints one line per cell.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from scipy.optimize import brentq

from bench.experiments.cli import experiment_parser
from bench.experiments.common import OUT, write
from privbandit.plots import curves_plot
from privbandit.shared.core.accounting import ledgers, sum_only
from privbandit.shared.core.lplr_simulator import simulate_lplr
from privbandit.shared.core.policies import build_policy, make_config
from privbandit.shared.core.simulator import simulate, summarize

WIDTHS = {"paper": {"confidence_scale": 1.0}, "practical": {"confidence_scale": 0.1}}
CLIPPED = ("ldp-linucb", "sblb", "ldp-glb")  # the policies with a ``regularizer`` field
BATCH = 100


def rdp_epsilon_for(target: float, delta: float, alpha: float = 2.0) -> float:
    """The RDP ε at order α whose ledger conversion is (target, δ)."""
    def gap(rdp: float) -> float:
        return ledgers.central_ledger(alpha, rdp, delta).central_epsilon - target
    return brentq(gap, 1e-6, 1e3, xtol=1e-10)


def private_params(algo: str, eps: float, delta: float, d: int) -> dict[str, Any]:
    """Parameters giving each policy the per-user (ε, δ) budget (module doc)."""
    if algo in ("ldp-linucb", "ldp-glb"):
        return {"epsilon": eps, "delta": delta}
    if algo == "lplr":  # pure ε-LDP: δ = 0 meets every budget's δ
        return {"epsilon": eps}
    if algo == "sblb":
        return {"eps0": sum_only.sum_only_max_eps0(eps, BATCH, delta, d=d, m=1),
                "batch_size": BATCH, "delta": delta}
    if algo in ("adar-gope", "adar-oful"):
        return {"alpha": 2.0, "epsilon": rdp_epsilon_for(eps, delta), "delta": delta}
    return {}


def cell(algo: str, env: str, d: int, K: int, T: int, runs: int, seed: int, width: str,
         **params: Any) -> dict[str, Any]:
    params = {**WIDTHS[width], **params}
    if width == "practical" and algo in CLIPPED:
        params["regularizer"] = "clip"
    if algo in ("ldp-linucb", "ldp-glb"):
        params["horizon"] = T
    if algo == "lplr":
        params["K"] = K  # one private regression oracle per action
    config = make_config(algo, d=d, **params)
    t0 = time.perf_counter()
    sim = simulate_lplr if algo == "lplr" else simulate
    results, env_params = sim(config, env, K, T, runs, seed, points=100)
    s = summarize(results)
    ledger = build_policy(config).ledger(T, aggregation="secure-sum").model_dump()
    row = {"algo": algo, "env": env, "T": T, "width": width, "params": config.model_dump(),
           "env_params": env_params, "mean": s["final_regret_mean"],
           "stderr": s["final_regret_stderr"], "random": s["random_regret_mean"],
           "updates": s["model_updates_mean"], "curve": s["regret_curve"],
           "curve_stderr": s["regret_curve_stderr"], "ldp_epsilon": ledger["ldp_epsilon"],
           "central_epsilon": ledger["central_epsilon"], "central_delta": ledger["central_delta"],
           "seconds": time.perf_counter() - t0}
    print(f"{env} T={T:>8,} {algo:<11} {width:<9} {_budget(row):<34} regret "
          f"{row['mean']:>10,.0f} ± {row['stderr']:>7,.0f}  random {row['random']:>10,.0f}  "
          f"({row['seconds']:.0f} s)", flush=True)
    return row


def _budget(row: dict[str, Any]) -> str:
    p = row["params"]
    if row["central_epsilon"] is None:
        return "non-private"
    extra = (f"ε0={p['eps0']:.3g}, l={p['batch_size']}" if "eps0" in p
             else f"RDP α=2, ε={p['epsilon']:.3g}" if row["algo"].startswith("adar") else "LDP")
    return f"ε={row['central_epsilon']:.3g}, δ={row['central_delta']:g} ({extra})"


def fixed(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    budgets = [b for i, b in enumerate([(1.0, 1e-2), (0.5, 1e-2), (1.0, 1e-6)])
               if args.budgets is None or i in args.budgets]
    for T in args.T:
        for width in args.widths:
            if args.algos is None:
                rows.append(cell("linucb", "fixed-linear", 5, 100, T, args.runs, args.seed,
                                 width))
            for eps, delta in budgets:
                for algo in args.algos or ("ldp-linucb", "sblb", "adar-gope", "lplr"):
                    rows.append(cell(algo, "fixed-linear", 5, 100, T, args.runs, args.seed,
                                     width, **private_params(algo, eps, delta, 5)))
    return rows


def logistic(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for T in args.T:
        for width in args.widths:
            for eps in (1.0, 4.0):
                for algo in ("ldp-linucb", "ldp-glb"):
                    rows.append(cell(algo, "logistic", 5, 20, T, args.runs, args.seed, width,
                                     **private_params(algo, eps, 1e-6, 5)))
    return rows


def letter(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for T in args.T:
        for width in args.widths:
            for algo in args.algos or ("linucb", "ldp-linucb", "ldp-glb", "sblb", "adar-oful",
                                       "lplr"):
                rows.append(cell(algo, "letter", 52, 26, T, args.runs, args.seed, width,
                                 **private_params(algo, 1.0, 1e-6, 52)))
    return rows


TABLES = {"fixed": fixed, "logistic": logistic, "letter": letter}


def main() -> None:
    ap = experiment_parser(__doc__.splitlines()[0], runs=3, seed=1, out=OUT)
    ap.add_argument("table", choices=list(TABLES))
    ap.add_argument("--T", type=lambda s: [int(x) for x in s.split(",")], default=None,
                    help="horizons, comma-separated")
    ap.add_argument("--widths", type=lambda s: s.split(","), default=list(WIDTHS),
                    help="paper,practical (default both)")
    ap.add_argument("--budgets", type=lambda s: [int(x) for x in s.split(",")], default=None,
                    help="fixed: indices into (1, 1e-2), (0.5, 1e-2), (1, 1e-6) (default all)")
    ap.add_argument("--algos", type=lambda s: s.split(","), default=None,
                    help="fixed, letter: only these private policies (default all)")
    args = ap.parse_args()
    if args.T is None:
        args.T = [10_000, 100_000, 1_000_000] if args.table == "fixed" else [100_000]
    rows = TABLES[args.table](args)
    name = f"linear_family_{args.table}"
    write(args.out, name, {"table": args.table, "T": args.T, "runs": args.runs,
                           "seed": args.seed, "rows": rows})
    T = max(args.T)
    for width in args.widths:
        curves_plot([{"label": f"{r['algo']} {_budget(r)}", "curve": r["curve"],
                      "stderr": r["curve_stderr"]}
                     for r in rows if r["T"] == T and r["width"] == width],
                    args.out / f"{name}_{width}.png",
                    f"{args.table}: {width} widths, T = {T:,}, {args.runs} runs")
        print(f"wrote {args.out / f'{name}_{width}.png'}")


if __name__ == "__main__":
    main()
