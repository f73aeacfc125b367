"""Rewards beyond Bernoulli: the ``mixed`` laws in [0, 1] (Beta, two-point, uniform; HeLDP §3.2)
and unbounded ``gaussian`` rewards μ_a + N(0, 1) with the sigmoid variants HeLDP-UCB-LS / -BS
(Corollary 13), each next to UCB and to the Bernoulli instance with the same means.

Corollary 13 predicts the sigmoid variants' regret at most c_s⁻² times that of -L / -B, c_s the
smallest ratio of smoothed gap E[s(μ* + Z)] − E[s(μ_a + Z)] to Δ_a (Lemma 12); we compute c_s for
the instance and print the measured ratio gaussian-sigmoid / bernoulli beside c_s⁻².

    python -m bench.experiments.mixed_gaussian [--T 500000 --runs 4 --K 10]

Writes out/experiments/mixed_gaussian.{json,png}.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bench.experiments.common import instance, parser, ratio_stderr, regret_figure, run, write
from privbandit.shared.core.randomizers.heldp import sigmoid

EPSILONS = [1.0, 2.0]


def smoothed(mu: np.ndarray) -> np.ndarray:
    """E[s(μ + Z)], Z ~ N(0, 1), by Gauss–Hermite quadrature."""
    z, w = np.polynomial.hermite_e.hermegauss(80)
    return (sigmoid(mu[:, None] + z[None, :]) @ w) / math.sqrt(2 * math.pi)


def main() -> None:
    args = parser(__doc__, T=500_000, runs=4).parse_args()
    envs = {d: instance(args.K, d) for d in ("bernoulli", "mixed", "gaussian")}
    mu = envs["gaussian"].means
    sm = smoothed(mu)
    gaps = mu.max() - mu
    c_s = float(np.min((sm.max() - sm)[gaps > 0] / gaps[gaps > 0]))
    results: dict[str, dict] = {}
    for dist, env in envs.items():
        results[f"{dist}/ucb"] = run("ucb", env, args.T, args.runs, args.seed)
        for eps in EPSILONS:
            for algo in ("heldp-ucb-l", "heldp-ucb-b"):
                key = f"{dist}/{algo}/{eps:g}"
                extra = {"sigmoid": True} if dist == "gaussian" else {}
                results[key] = run(algo, env, args.T, args.runs, args.seed, epsilon=eps, **extra)
    for key, r in results.items():
        print(f"{key:28s} {r['mean']:10,.0f} ± {r['stderr']:6,.0f}   (random {r['random']:,.0f})",
              flush=True)
    ratios = {}
    for eps in EPSILONS:
        for algo in ("heldp-ucb-l", "heldp-ucb-b"):
            g, b = results[f"gaussian/{algo}/{eps:g}"], results[f"bernoulli/{algo}/{eps:g}"]
            m = results[f"mixed/{algo}/{eps:g}"]
            ratios[f"{algo}/{eps:g}"] = {"gaussian_over_bernoulli": ratio_stderr(g, b),
                                         "mixed_over_bernoulli": ratio_stderr(m, b)}
            print(f"{algo} ε={eps:g}: gaussian(sigmoid)/bernoulli = "
                  f"{ratio_stderr(g, b)[0]:.2f}, mixed/bernoulli = {ratio_stderr(m, b)[0]:.2f}")
    print(f"c_s = {c_s:.3f} for this instance: Corollary 13's factor c_s⁻² = {c_s ** -2:.1f}")
    write(args.out, "mixed_gaussian", {"T": args.T, "runs": args.runs, "K": args.K,
                                       "means": mu.tolist(), "c_s": c_s, "results": results,
                                       "ratios": ratios})
    panels: dict[str, list[dict[str, Any]]] = {}
    for dist in ("bernoulli", "mixed", "gaussian"):
        lines = panels[dist] = [
            {"label": f"{algo}{'-sigmoid' if dist == 'gaussian' else ''}",
             "x": EPSILONS, "y": [results[f"{dist}/{algo}/{e:g}"]["mean"] for e in EPSILONS],
             "yerr": [results[f"{dist}/{algo}/{e:g}"]["stderr"] for e in EPSILONS]}
            for algo in ("heldp-ucb-l", "heldp-ucb-b")]
        lines.append({"label": "UCB", "x": EPSILONS,
                      "y": [results[f"{dist}/ucb"]["mean"]] * len(EPSILONS),
                      "style": "--", "color": "k"})
    regret_figure(panels, "ε", args.T, args.out, "mixed_gaussian",
                  f"reward laws, K = {args.K}, {args.runs} runs (gaussian: sigmoid variants)",
                  xticks=EPSILONS)


if __name__ == "__main__":
    main()
