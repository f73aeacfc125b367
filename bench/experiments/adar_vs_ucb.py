"""AdaR-UCB (Azize–Basu Alg. 2, central (α, ε)-RDP) against non-private UCB at (α, ε) = (2, 1),
with a few other budgets at α = 2 for context, and the ledger's (ε, δ) conversion of each.

Thm 5 bounds the price of RDP by an additive 8√(βα/ε)√(ln T) per suboptimal arm, next to the
8β ln T/Δ_a of UCB-type exploration; both columns are printed beside the measured regret.

    python -m bench.experiments.adar_vs_ucb [--T 1000000 --runs 5 --K 10]

Writes out/experiments/adar_vs_ucb.{json,png}.
"""

from __future__ import annotations

import math

from bench.experiments.common import instance, log_t_constant, parser, ratio_stderr, run, write
from privbandit.plots import curves_plot
from privbandit.shared.core.policies import build_policy, make_config

BUDGETS = [(2.0, 1.0), (2.0, 0.1), (2.0, 0.01), (2.0, 10.0)]
BETA = 4.0


def main() -> None:
    args = parser(__doc__, T=1_000_000, runs=5).parse_args()
    env = instance(args.K)
    ucb = run("ucb", env, args.T, args.runs, args.seed)
    arms = int((env.gaps > 0).sum())
    rows = []
    for alpha, eps in BUDGETS:
        r = run("adar-ucb", env, args.T, args.runs, args.seed, alpha=alpha, epsilon=eps)
        ledger = build_policy(make_config("adar-ucb", K=args.K, alpha=alpha, epsilon=eps)
                              ).ledger().model_dump()
        r["ratio_to_ucb"], r["ratio_se"] = ratio_stderr(r, ucb)
        r.update(alpha=alpha, epsilon=eps, central_epsilon=ledger["central_epsilon"],
                 central_delta=ledger["central_delta"],
                 thm5_privacy_term=arms * 8 * math.sqrt(BETA * alpha / eps * math.log(args.T)),
                 thm5_exploration_term=8 * BETA * math.log(args.T) * log_t_constant(env))
        rows.append(r)
        print(f"(α, ε) = ({alpha:g}, {eps:g}) → (ε, δ) = ({r['central_epsilon']:.3g}, "
              f"{r['central_delta']:g}):  regret {r['mean']:8,.0f} ± {r['stderr']:5,.0f}  "
              f"(×{r['ratio_to_ucb']:.2f} UCB); Thm 5 terms: privacy {r['thm5_privacy_term']:,.0f}"
              f", exploration {r['thm5_exploration_term']:,.0f}", flush=True)
    print(f"UCB {ucb['mean']:,.0f} ± {ucb['stderr']:,.0f}; random policy {ucb['random']:,.0f}")
    write(args.out, "adar_vs_ucb", {"T": args.T, "runs": args.runs, "K": args.K, "beta": BETA,
                                    "means": env.means.tolist(), "ucb": ucb, "rows": rows})
    curves_plot([{"label": "UCB (non-private)", "curve": ucb["curve"],
                  "stderr": ucb["curve_stderr"], "color": "k"}]
                + [{"label": f"AdaR-UCB (α, ε) = ({r['alpha']:g}, {r['epsilon']:g}) → "
                             f"ε = {r['central_epsilon']:.3g} at δ = {r['central_delta']:g}",
                    "curve": r["curve"], "stderr": r["curve_stderr"]} for r in rows],
                args.out / "adar_vs_ucb.png",
                f"AdaR-UCB vs UCB, K = {args.K}, {args.runs} runs")
    print(f"wrote {args.out / 'adar_vs_ucb.png'}")


if __name__ == "__main__":
    main()
