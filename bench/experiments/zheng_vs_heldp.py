"""Zheng et al.'s black-box reduction (Alg. 1, (ε, δ)-LDP) against HeLDP-UCB-L and -B (pure ε-LDP)
at the same ε — a matched guarantee that favours the reduction, since (ε, 0) implies (ε, δ).

Zheng is run with its own black box (Tsallis-INF on losses rescaled to the high-probability range
B̃ = 1/2 + σ√(2 ln 2T²), Thm 3 / Thm 11) and with a sub-Gaussian UCB box (proxy 1/4 + σ², the
proof of Thm 11), whose width relative to UCB1's predicts a regret factor 1 + 4σ².

    python -m bench.experiments.zheng_vs_heldp [--T 500000 --runs 4 --K 10 --delta 1e-6]

Writes out/experiments/zheng_vs_heldp.{json,png}.
"""

from __future__ import annotations

from bench.experiments.common import instance, parser, ratio_stderr, run, write
from privbandit.plots import curves_plot, xy_plot
from privbandit.shared.core.randomizers.arms import GaussianArmRandomizer

EPSILONS = [0.5, 1.0, 2.0, 5.0]
POLICIES = {
    "ldp-mab (Tsallis-INF)": ("ldp-mab", {"black_box": "tsallis-inf"}),
    "ldp-mab (UCB box)": ("ldp-mab", {"black_box": "ucb"}),
    "heldp-ucb-l": ("heldp-ucb-l", {}),
    "heldp-ucb-b": ("heldp-ucb-b", {}),
}


def main() -> None:
    ap = parser(__doc__, T=500_000, runs=4)
    ap.add_argument("--delta", type=float, default=1e-6, help="Zheng's δ (default 1e-6)")
    args = ap.parse_args()
    env = instance(args.K)
    ucb = run("ucb", env, args.T, args.runs, args.seed)
    rows = []
    for eps in EPSILONS:
        rz = GaussianArmRandomizer(args.K, eps, args.delta)
        row = {"epsilon": eps, "sigma": rz.sigma, "paper_sigma": rz.paper_sigma,
               "factor_ucb_box": 1 + 4 * rz.sigma**2, "results": {}}
        for label, (algo, params) in POLICIES.items():
            extra = {"delta": args.delta, "horizon": args.T} if algo == "ldp-mab" else {}
            r = run(algo, env, args.T, args.runs, args.seed, epsilon=eps, **params, **extra)
            r["ratio_to_ucb"], r["ratio_se"] = ratio_stderr(r, ucb)
            row["results"][label] = r
            print(f"ε={eps:<4g} {label:24s} {r['mean']:10,.0f} ± {r['stderr']:6,.0f}  "
                  f"(×{r['ratio_to_ucb']:6.1f} UCB)", flush=True)
        print(f"        σ = {rz.sigma:.3f} (paper's constant {rz.paper_sigma:.3f}); UCB-box "
              f"factor 1 + 4σ² = {row['factor_ucb_box']:.1f}", flush=True)
        rows.append(row)
    print(f"UCB {ucb['mean']:,.0f} ± {ucb['stderr']:,.0f}; random policy {ucb['random']:,.0f}")
    write(args.out, "zheng_vs_heldp", {"T": args.T, "runs": args.runs, "K": args.K,
                                       "delta": args.delta, "means": env.means.tolist(),
                                       "ucb": ucb, "rows": rows})
    eps = [r["epsilon"] for r in rows]
    lines = [{"label": label, "x": eps, "y": [r["results"][label]["mean"] for r in rows],
              "yerr": [r["results"][label]["stderr"] for r in rows]} for label in POLICIES]
    lines += [{"label": "UCB (non-private)", "x": eps, "y": [ucb["mean"]] * len(eps),
               "style": "--", "color": "k"},
              {"label": "uniformly random", "x": eps, "y": [ucb["random"]] * len(eps),
               "style": ":", "color": "grey"}]
    xy_plot([{"title": f"final regret at T = {args.T:,}", "xlabel": "ε (Zheng: δ = "
              f"{args.delta:g}; HeLDP: δ = 0)", "ylabel": "regret", "logx": True, "logy": True,
              "xticks": eps, "lines": lines}],
            args.out / "zheng_vs_heldp.png", f"matched ε, K = {args.K}, {args.runs} runs")
    one = next(r for r in rows if r["epsilon"] == 1.0)
    curves_plot([{"label": label, "curve": one["results"][label]["curve"],
                  "stderr": one["results"][label]["curve_stderr"]} for label in POLICIES]
                + [{"label": "UCB", "curve": ucb["curve"], "color": "k"}],
                args.out / "zheng_vs_heldp_curves.png", "regret curves at ε = 1", logy=True)
    print(f"wrote {args.out / 'zheng_vs_heldp.png'}")


if __name__ == "__main__":
    main()
