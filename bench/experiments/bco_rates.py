"""Regret against T for LDP bandit convex optimisation (issue 12; Zheng et al. Alg. 1 and 2),
each private policy at ε ∈ {0.5, 1, 4} beside its non-private baseline, on log–log axes with fitted
exponents next to the paper's rates.

Every T is its own simulation (the step sizes depend on the horizon T), d = 5, δ = 10⁻⁶, R = B = 1,
analytic calibration, the paper's step sizes, fixed optimum; runs vectorised, paired seeds (every
policy meets the same users, directions and device noise). The exponent is the least-squares slope
of log(mean regret) on log T over the horizons run.

Rates (Zheng et al. Corollary 4, Theorem 6; Õ hides logs, d and μ):
    one point, convex + smooth (bco-convex):    ldp-bco T^{2/3}/ε     bco T^{2/3}    (Saha–Tewari)
    one point, strongly convex (bco-quadratic): ldp-bco T^{1/2}/ε     bco T^{1/2}    (Hazan–Levy)
    two points, convex (bco-convex):            ldp-bco2 d³T^{1/2}/ε²  bco2 T^{1/2}   (ADX)
    two points, strongly convex (bco-quadratic): ldp-bco2 d³ log T/(με²)  bco2 log T

    python -m bench.experiments.bco_rates [--Ts 1000,10000,100000,1000000 --runs 5]

Writes out/experiments/bco_rates.{json,png}.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from bench.experiments.cli import experiment_parser
from bench.experiments.common import OUT, write
from privbandit.shared.core.bco_simulator import simulate_bco
from privbandit.shared.core.environments.bco import BCOEnvironment
from privbandit.shared.core.policies.bco_config import BCO_CONFIGS

EPSILONS = (0.5, 1.0, 4.0)
PAIRS = {"one point": ("bco", "ldp-bco"), "two points": ("bco2", "ldp-bco2")}
RATES = {  # (env, pair) → (baseline, private) exponent of T in the paper's bound
    ("bco-convex", "one point"): ("T^{2/3}", "T^{2/3}/ε", 2 / 3),
    ("bco-quadratic", "one point"): ("T^{1/2}", "T^{1/2}/ε", 1 / 2),
    ("bco-convex", "two points"): ("T^{1/2}", "d³T^{1/2}/ε²", 1 / 2),
    ("bco-quadratic", "two points"): ("log T", "d³ log T/(με²)", 0.0),
}


def fit_exponent(Ts: list[int], means: list[float]) -> float:
    """Least-squares slope of log(regret) on log T (nan if a mean is not positive)."""
    if min(means) <= 0:
        return float("nan")
    return float(np.polyfit(np.log(Ts), np.log(means), 1)[0])


def run_point(algo: str, env: BCOEnvironment, T: int, runs: int, seed: int, **kw: Any
              ) -> dict[str, Any]:
    config = BCO_CONFIGS[algo](d=env.d, radius=env.R, loss_bound=env.B, lipschitz=env.lipschitz,
                               smoothness=env.smoothness, strong_convexity=env.strong_convexity,
                               horizon=T, **kw)
    t0 = time.perf_counter()
    results, params = simulate_bco(config, env, T, runs, seed, points=1)
    finals = np.array([r.regret[-1] for r in results])
    return {"T": T, "mean": float(finals.mean()),
            "stderr": float(finals.std(ddof=1) / np.sqrt(runs)) if runs > 1 else 0.0,
            "random": float(results[0].random_regret[-1]), "params": params,
            "seconds": time.perf_counter() - t0}


def main() -> None:
    ap = experiment_parser(__doc__.splitlines()[0], runs=5, d=5, seed=1, out=OUT)
    ap.add_argument("--Ts", default="1000,10000,100000,1000000")
    args = ap.parse_args()
    Ts = [int(x) for x in args.Ts.split(",")]
    started = time.perf_counter()
    series, panels = [], []
    for env_name in ("bco-quadratic", "bco-convex"):
        env = BCOEnvironment(env_name, args.d, np.random.default_rng(args.seed))
        for pair, (base, private) in PAIRS.items():
            base_rate, priv_rate, slope = RATES[(env_name, pair)]
            lines = []
            variants = [(base, None)] + [(private, eps) for eps in EPSILONS]
            for algo, eps in variants:
                kw = {} if eps is None else {"epsilon": eps, "delta": 1e-6}
                points = [run_point(algo, env, T, args.runs, args.seed, **kw) for T in Ts]
                means = [p["mean"] for p in points]
                s = {"env": env_name, "feedback": pair, "algo": algo, "epsilon": eps,
                     "paper_rate": base_rate if eps is None else priv_rate,
                     "paper_exponent": slope, "fitted_exponent": fit_exponent(Ts, means),
                     "points": points}
                series.append(s)
                label = algo if eps is None else f"{algo} ε={eps:g}"
                lines.append({"label": f"{label} (slope {s['fitted_exponent']:.2f})", "x": Ts,
                              "y": means, "yerr": [p["stderr"] for p in points]})
                print(f"{env_name:14s} {pair:10s} {label:16s} "
                      + "  ".join(f"{p['mean']:.4g}±{p['stderr']:.2g}" for p in points)
                      + f"  slope {s['fitted_exponent']:.3f} (paper {s['paper_rate']})",
                      flush=True)
            lines.append({"label": "uniformly random point", "x": Ts,
                          "y": [p["random"] for p in points], "style": "--", "color": "k"})
            panels.append({"title": f"{env_name}, {pair} (paper: {base_rate} / {priv_rate})",
                           "xlabel": "T", "ylabel": "regret at T", "logx": True, "logy": True,
                           "lines": lines})
    write(args.out, "bco_rates", {"Ts": Ts, "runs": args.runs, "d": args.d, "seed": args.seed,
                                  "delta": 1e-6, "series": series,
                                  "seconds": time.perf_counter() - started})
    from privbandit.plots import xy_plot

    png = args.out / "bco_rates.png"
    xy_plot(panels, png, "LDP bandit convex optimisation: regret against T (Zheng Alg. 1, 2)")
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
