"""Homogeneous ε: HeLDP-UCB-L and HeLDP-UCB-B next to UCB, and their regret ratios to UCB next to
the theoretical factors (1 + 4/ε)² (Corollary 8) and ((e^ε + 1)/(e^ε − 1))² (Corollary 11).

    python -m bench.experiments.homogeneous [--T 1000000 --runs 5 --K 10]

Writes out/experiments/homogeneous.{json,png}.
"""

from __future__ import annotations

import math

from bench.experiments.common import instance, parser, ratio_stderr, run, write
from privbandit.plots import curves_plot, xy_plot

EPSILONS = [0.2, 0.5, 1.0, 2.0, 5.0]


def factors(eps: float) -> tuple[float, float]:
    """(1 + 4/ε)² and ((e^ε + 1)/(e^ε − 1))²: the regret factors over UCB of Corollaries 8, 11."""
    return (1 + 4 / eps) ** 2, ((math.exp(eps) + 1) / (math.exp(eps) - 1)) ** 2


def main() -> None:
    args = parser(__doc__, T=1_000_000, runs=5).parse_args()
    env = instance(args.K)
    ucb = run("ucb", env, args.T, args.runs, args.seed)
    rows = []
    for eps in EPSILONS:
        lap = run("heldp-ucb-l", env, args.T, args.runs, args.seed, epsilon=eps)
        ber = run("heldp-ucb-b", env, args.T, args.runs, args.seed, epsilon=eps)
        fl, fb = factors(eps)
        rl, rl_se = ratio_stderr(lap, ucb)
        rb, rb_se = ratio_stderr(ber, ucb)
        rows.append({"epsilon": eps, "laplace": lap, "bernoulli": ber, "ratio_l": rl,
                     "ratio_l_se": rl_se, "ratio_b": rb, "ratio_b_se": rb_se,
                     "factor_l": fl, "factor_b": fb})
        print(f"ε={eps:<4g} L {lap['mean']:10,.0f} ± {lap['stderr']:6,.0f} (×{rl:6.1f}, theory "
              f"{fl:6.1f})   B {ber['mean']:10,.0f} ± {ber['stderr']:6,.0f} (×{rb:5.1f}, theory "
              f"{fb:5.1f})", flush=True)
    print(f"UCB {ucb['mean']:,.0f} ± {ucb['stderr']:,.0f}; random policy {ucb['random']:,.0f}")
    data = {"T": args.T, "runs": args.runs, "K": args.K, "means": env.means.tolist(),
            "ucb": ucb, "rows": rows}
    write(args.out, "homogeneous", data)
    eps = [r["epsilon"] for r in rows]
    xy_plot([
        {"title": "final regret", "xlabel": "ε", "ylabel": f"regret at T = {args.T:,}",
         "logx": True, "logy": True, "xticks": eps, "lines": [
             {"label": "HeLDP-UCB-L", "x": eps, "y": [r["laplace"]["mean"] for r in rows],
              "yerr": [r["laplace"]["stderr"] for r in rows]},
             {"label": "HeLDP-UCB-B", "x": eps, "y": [r["bernoulli"]["mean"] for r in rows],
              "yerr": [r["bernoulli"]["stderr"] for r in rows]},
             {"label": "UCB", "x": eps, "y": [ucb["mean"]] * len(eps), "style": "--", "color": "k"},
             {"label": "uniformly random", "x": eps, "y": [ucb["random"]] * len(eps),
              "style": ":", "color": "grey"}]},
        {"title": "ratio to UCB vs theory", "xlabel": "ε", "ylabel": "regret / UCB regret",
         "logx": True, "logy": True, "xticks": eps, "lines": [
             {"label": "L measured", "x": eps, "y": [r["ratio_l"] for r in rows],
              "yerr": [r["ratio_l_se"] for r in rows], "color": "C0"},
             {"label": "(1 + 4/ε)²", "x": eps, "y": [r["factor_l"] for r in rows],
              "style": "--", "color": "C0"},
             {"label": "B measured", "x": eps, "y": [r["ratio_b"] for r in rows],
              "yerr": [r["ratio_b_se"] for r in rows], "color": "C1"},
             {"label": "((e^ε+1)/(e^ε−1))²", "x": eps, "y": [r["factor_b"] for r in rows],
              "style": "--", "color": "C1"}]},
    ], args.out / "homogeneous.png", f"homogeneous ε, K = {args.K}, T = {args.T:,}, "
                                      f"{args.runs} runs")
    curves_plot([{"label": "UCB", "curve": ucb["curve"], "stderr": ucb["curve_stderr"],
                  "color": "k"}]
                + [{"label": f"{m} ε={r['epsilon']:g}", "curve": r[key]["curve"],
                    "stderr": r[key]["curve_stderr"], "color": f"C{i}", "ls": ls}
                   for i, r in enumerate(rows)
                   for key, m, ls in (("laplace", "L", "-"), ("bernoulli", "B", "--"))],
                args.out / "homogeneous_curves.png", "regret curves (L solid, B dashed)",
                logy=True)
    print(f"wrote {args.out / 'homogeneous.png'}")


if __name__ == "__main__":
    main()
