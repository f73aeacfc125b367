"""LPLR (Li, Simchi-Levi & Wang, Alg. 1 over Algs. 2–6) against ``ldp-linucb`` (Zheng et al.
Alg. 5) at the same LDP ε on ``linear``: regret against T on log–log axes, 10⁴ to T, with the
fitted exponents (the paper's claim: √T for LPLR against T^{3/4}).

Each policy runs ``--runs`` times to ``--T``; its cumulative regret curve R(t) (the mean over runs)
is read at every checkpoint in [10⁴, T] and the exponent is the least-squares slope of log R
against log t. LPLR does not depend on T (its epochs double), so one run to T gives R(t) for
every t ≤ T; ``ldp-linucb`` uses T in Υ_t (Alg. 5 line 3), so its curve is that of the horizon-T
instance. The random policy's curve (slope 1) is drawn for reference.

    python -m bench.experiments.lplr [--T 1000000 --runs 3 --eps 1]

Writes out/experiments/lplr_eps<ε>.{json,png} (rewritten after every row).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.experiments.cli import experiment_parser
from privbandit.shared.core.lplr_simulator import simulate_lplr
from privbandit.shared.core.policies import make_config
from privbandit.shared.core.simulator import simulate, summarize

D, K = 5, 20
T_MIN = 10_000


def fitted_exponent(curve: list[list[float]], t_min: int = T_MIN) -> float:
    """Least-squares slope of log R(t) on log t over the checkpoints t ≥ t_min with R > 0."""
    t = np.array([c[0] for c in curve], dtype=float)
    r = np.array([c[1] for c in curve], dtype=float)
    keep = (t >= t_min) & (r > 0)
    return float(np.polyfit(np.log(t[keep]), np.log(r[keep]), 1)[0])


def run(label: str, config: Any, T: int, runs: int, seed: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    sim = simulate_lplr if config.algo == "lplr" else simulate
    results, _ = sim(config, "linear", K, T, runs, seed)
    s = summarize(results)
    out = {
        "label": label,
        "algo": config.algo,
        "params": config.model_dump(),
        "mean": s["final_regret_mean"],
        "stderr": s["final_regret_stderr"],
        "random": s["random_regret_mean"],
        "curve": s["regret_curve"],
        "random_curve": [[int(t), float(v)] for t, v in zip(
            results[0].checkpoints, np.mean([r.random_regret for r in results], axis=0),
            strict=True)],
        "exponent": fitted_exponent(s["regret_curve"]),
        "extra": [r.extra for r in results],
        "seconds": time.perf_counter() - t0,
    }
    print(f"{label:48s} regret {out['mean']:10,.0f} ± {out['stderr']:8,.0f}  (random "
          f"{out['random']:,.0f})  exponent {out['exponent']:.3f}  [{out['seconds']:.0f} s]",
          flush=True)
    return out


def main() -> None:
    ap = experiment_parser(__doc__.splitlines()[0], T=1_000_000, runs=3, seed=1,
                           out=Path("out/experiments"))
    ap.add_argument("--eps", type=float, default=1.0, help="LDP ε of both policies (default 1)")
    ap.add_argument("--lplr-scale", type=float, default=0.1,
                    help="confidence_scale of the second lplr row (post-processing; default 0.1)")
    args = ap.parse_args()
    eps, T = args.eps, args.T
    common = {"d": D, "epsilon": eps}
    configs = [
        (f"lplr ε={eps:g} δ=0 (scale {args.lplr_scale:g})",
         make_config("lplr", K=K, confidence_scale=args.lplr_scale, **common)),
        (f"lplr ε={eps:g} δ=0 (scale 1)", make_config("lplr", K=K, **common)),
        (f"ldp-linucb ε={eps:g} δ=1e-6 (paper widths)",
         make_config("ldp-linucb", horizon=T, **common)),
        (f"ldp-linucb ε={eps:g} δ=1e-6 (scale 0.1, clip)",
         make_config("ldp-linucb", horizon=T, confidence_scale=0.1, regularizer="clip",
                     **common)),
    ]
    rows = []
    name = f"lplr_eps{eps:g}"
    args.out.mkdir(parents=True, exist_ok=True)
    for label, config in configs:  # written after every row: a cut-short run keeps its rows
        rows.append(run(label, config, T, args.runs, args.seed))
        path = args.out / f"{name}.json"
        path.write_text(json.dumps({"T": T, "runs": args.runs, "d": D, "K": K, "epsilon": eps,
                                    "t_min": T_MIN, "rows": rows}, indent=2) + "\n")
        figure(rows, args.out / f"{name}.png", T, args.runs)
    print(f"wrote {path}")


def figure(rows: list[dict[str, Any]], path: Path, T: int, runs: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for r in rows:
        t, v = np.array(r["curve"]).T
        keep = t >= T_MIN
        ax.plot(t[keep], v[keep], label=f"{r['label']}: slope {r['exponent']:.2f}")
    t, v = np.array(rows[0]["random_curve"]).T
    keep = t >= T_MIN
    ax.plot(t[keep], v[keep], "k:", label="uniformly random policy (slope 1)")
    for power, style in ((0.5, "--"), (0.75, "-.")):
        ref = v[keep][-1] * (t[keep] / t[keep][-1]) ** power / 4
        ax.plot(t[keep], ref, color="grey", ls=style, lw=0.8, label=f"∝ T^{power:g} (reference)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("users t")
    ax.set_ylabel("cumulative pseudo-regret")
    ax.set_title(f"LPLR vs LDP-LinUCB on linear (d = {D}, K = {K}), mean of {runs} runs, "
                 f"T = {T:,}", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
