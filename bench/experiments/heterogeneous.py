"""Heterogeneous ε_t: users' levels uniform on {0, 0.2, 1, 2, 100} and truncated normal(1, 1),
each across several thresholds ε_min, for HeLDP-UCB-L and HeLDP-UCB-B — with the V_L / V_B
heuristic (shared.core.privacy_levels) for choosing ε_min and how well V predicts the regret: a
least-squares fit regret ≈ a + b·V per mechanism over all thresholds of both distributions, its R²,
and whether V's minimiser is the measured best threshold.

    python -m bench.experiments.heterogeneous [--T 500000 --runs 4 --K 10]

Writes out/experiments/heterogeneous.{json,png}.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.experiments.common import instance, log_t_constant, parser, regret_figure, run, write
from privbandit.shared.core.privacy_levels import choose_eps_min, heuristic_v, parse_levels

DISTRIBUTIONS = {
    "choice:0,0.2,1,2,100": [0.2, 1.0, 2.0, 100.0],
    "normal:1,1": [0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0],
}
MECHANISMS = {"heldp-ucb-l": "laplace", "heldp-ucb-b": "bernoulli"}


def fit(v: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Least squares y ≈ a + b v and its R²."""
    b, a = np.polyfit(v, y, 1)
    resid = y - (a + b * v)
    r2 = 1.0 - float(resid @ resid) / float(((y - y.mean()) ** 2).sum())
    return {"a": float(a), "b": float(b), "r2": r2, "n": int(v.size)}


def main() -> None:
    args = parser(__doc__, T=500_000, runs=4).parse_args()
    env = instance(args.K)
    points = []
    for spec, grid in DISTRIBUTIONS.items():
        levels = parse_levels(spec)
        for algo, mech in MECHANISMS.items():
            choice = choose_eps_min(levels, mech)
            for eps_min in sorted(set(grid) | {choice}):
                r = run(algo, env, args.T, args.runs, args.seed, epsilon_dist=spec,
                        eps_min=eps_min)
                v = heuristic_v(levels, mech, eps_min)
                points.append({"distribution": spec, "algo": algo, "eps_min": eps_min, "V": v,
                               "heuristic_choice": eps_min == choice, "p0": r["fraction_used"],
                               "mean": r["mean"], "stderr": r["stderr"], "finals": r["finals"]})
                print(f"{spec:22s} {algo:12s} ε_min={eps_min:<6g} V={v:9.2f} "
                      f"p0={r['fraction_used']:.3f}  regret {r['mean']:9,.0f} ± {r['stderr']:5,.0f}"
                      f"{'  ← heuristic' if eps_min == choice else ''}", flush=True)
    fits = {}
    for algo in MECHANISMS:
        pts = [p for p in points if p["algo"] == algo]
        vs, ys = np.array([p["V"] for p in pts]), np.array([p["mean"] for p in pts])
        fits[algo] = {"all": fit(vs, ys)}
        for spec in DISTRIBUTIONS:
            sub = [p for p in pts if p["distribution"] == spec]
            best = min(sub, key=lambda p: p["mean"])
            chosen = next(p for p in sub if p["heuristic_choice"])
            fits[algo][spec] = {**fit(np.array([p["V"] for p in sub]),
                                      np.array([p["mean"] for p in sub])),
                                "best_eps_min": best["eps_min"], "best_regret": best["mean"],
                                "heuristic_eps_min": chosen["eps_min"],
                                "heuristic_regret": chosen["mean"]}
        f = fits[algo]["all"]
        print(f"{algo}: regret ≈ {f['a']:,.0f} + {f['b']:,.1f}·V, R² = {f['r2']:.3f} "
              f"(theory's slope 8·Σ1/Δ·ln T = {8 * log_t_constant(env) * np.log(args.T):,.0f})")
    write(args.out, "heterogeneous", {"T": args.T, "runs": args.runs, "K": args.K,
                                      "means": env.means.tolist(), "points": points, "fits": fits,
                                      "random": float(env.gaps.mean() * args.T)})
    panels: dict[str, list[dict[str, Any]]] = {}
    for spec in DISTRIBUTIONS:
        lines = panels[spec] = []
        for i, algo in enumerate(MECHANISMS):
            pts = sorted((p for p in points if p["algo"] == algo and p["distribution"] == spec),
                         key=lambda p: p["eps_min"])
            lines.append({"label": f"{algo} regret", "x": [p["eps_min"] for p in pts],
                          "y": [p["mean"] for p in pts], "yerr": [p["stderr"] for p in pts],
                          "color": f"C{i}"})
            f = fits[algo]["all"]
            lines.append({"label": f"{algo} a + b·V (R² {f['r2']:.2f})",
                          "x": [p["eps_min"] for p in pts],
                          "y": [f["a"] + f["b"] * p["V"] for p in pts], "style": "x--",
                          "color": f"C{i}"})
    regret_figure(panels, "ε_min", args.T, args.out, "heterogeneous",
                  f"heterogeneous ε_t, K = {args.K}, {args.runs} runs: regret and the V fit",
                  logx=True)


if __name__ == "__main__":
    main()
