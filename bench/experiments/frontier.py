"""Issue 22 — learning at the privacy frontier: ``ddp-linucb`` with fixed batches against its
``simulate`` defaults (growing batches, noise-calibrated ridge and width), on the same users as
``linucb``, over ε at δ = 10⁻⁶ on ``linear`` (d = 5, K = 20, T = 10⁶).

Policies (one ``simulate`` call each, all with the same ``--seed``, hence the same θ* and contexts
per run):

- ``linucb``: the non-private reference at its defaults (what ``privbandit simulate --algo linucb``
  runs; the "× linucb" column divides by it) and at the practical width 0.1 of BENCHMARKS.md;
- ``ddp-linucb fixed l=1000``: the issue's best fixed setting (eigen-clip, confidence scale 0.1);
- ``ddp-linucb defaults``: ``DDPLinUCBConfig.PRACTICAL`` (what ``simulate`` runs without flags).

    python -m bench.experiments.frontier [--T 1000000 --runs 3 --seed 1] [--epsilons 0.5,1,4]

writes out/experiments/frontier/frontier.json (rows appended as they finish; a rerun skips rows
already there) and frontier.png (final regret against ε per policy, with linucb and 10 × linucb).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

from shared.core.policies import PolicyConfig, build_policy, make_config
from shared.core.policies.config import DDPLinUCBConfig
from shared.core.simulator import simulate, summarize

OUT = Path("out/experiments/frontier")
DELTA = 1e-6
REFERENCE = "linucb (defaults)"


def configs(d: int, eps: float) -> dict[str, PolicyConfig]:
    """The private policies compared at central (ε, δ = 10⁻⁶)."""
    return {
        "ddp-linucb fixed l=1000": make_config(
            "ddp-linucb", d=d, epsilon=eps, delta=DELTA, batch_size=1000, regularizer="clip",
            confidence_scale=0.1),
        "ddp-linucb defaults": make_config(
            "ddp-linucb", d=d, epsilon=eps, delta=DELTA, **DDPLinUCBConfig.PRACTICAL),
    }


def baselines(d: int) -> dict[str, PolicyConfig]:
    return {REFERENCE: make_config("linucb", d=d),
            "linucb (width 0.1)": make_config("linucb", d=d, confidence_scale=0.1)}


def run_row(name: str, config: PolicyConfig, eps: float | None, args: argparse.Namespace
            ) -> dict[str, Any]:
    t0 = time.perf_counter()
    results, _ = simulate(config, "linear", args.K, args.T, args.runs, args.seed, points=50)
    s = summarize(results)
    ledger = build_policy(config).ledger(args.T, aggregation="secure-sum"
                                         if config.algo == "ddp-linucb" else "reports")
    return {
        "policy": name, "epsilon": eps, "T": args.T, "runs": args.runs, "seed": args.seed,
        "d": args.d, "K": args.K, "finals": [float(r.regret[-1]) for r in results],
        "mean": s["final_regret_mean"], "stderr": s["final_regret_stderr"],
        "coverage": s["coverage"], "random": s["random_regret_mean"],
        "model_updates": s["model_updates_mean"], "curve": s["regret_curve"],
        "central_epsilon": ledger.central_epsilon, "config": config.model_dump(),
        "seconds": time.perf_counter() - t0,
    }


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: regret ± s.e., × linucb (defaults) with its s.e. (delta method), coverage."""
    ref = next(r for r in rows if r["policy"] == REFERENCE)
    lines = ["| policy | ε | central ε (ledger) | regret ± s.e. | × linucb | coverage |",
             "|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["epsilon"] is not None, r["epsilon"] or 0,
                                         r["policy"])):
        ratio = r["mean"] / ref["mean"]
        rse = ratio * math.hypot(r["stderr"] / r["mean"], ref["stderr"] / ref["mean"])
        cov = "—" if r["coverage"] is None else f"{r['coverage']:.2f}"
        eps = "—" if r["epsilon"] is None else f"{r['epsilon']:g}"
        central = "—" if r["central_epsilon"] is None else f"{r['central_epsilon']:.3f}"
        lines.append(f"| {r['policy']} | {eps} | {central} | {r['mean']:,.0f} ± "
                     f"{r['stderr']:,.0f} | {ratio:.1f} ± {rse:.1f} | {cov} |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = next(r for r in rows if r["policy"] == REFERENCE)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name in sorted({r["policy"] for r in rows if r["epsilon"] is not None}):
        pts = sorted((r["epsilon"], r["mean"], r["stderr"]) for r in rows if r["policy"] == name)
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts],
                    marker="o", capsize=3, label=name)
    ax.axhline(ref["mean"], color="k", lw=1, label="linucb (defaults)")
    ax.axhline(10 * ref["mean"], color="k", lw=1, ls="--", label="10 × linucb")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("central ε (δ = 10⁻⁶)")
    ax.set_ylabel(f"final regret at T = {ref['T']:,}")
    ax.set_title(f"linear d={ref['d']} K={ref['K']}, {ref['runs']} runs, seed {ref['seed']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--T", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--d", type=int, default=5)
    p.add_argument("--K", type=int, default=20)
    p.add_argument("--epsilons", default="0.5,1,4")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "frontier.json"
    rows: list[dict[str, Any]] = json.loads(path.read_text())["rows"] if path.exists() else []
    done = {(r["policy"], r["epsilon"]) for r in rows}
    jobs: list[tuple[str, PolicyConfig, float | None]] = [
        (n, c, None) for n, c in baselines(args.d).items()]
    for eps in (float(e) for e in args.epsilons.split(",")):
        jobs += [(n, c, eps) for n, c in configs(args.d, eps).items()]
    for name, config, eps in jobs:
        if (name, eps) in done:
            continue
        row = run_row(name, config, eps, args)
        rows.append(row)
        path.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
        print(f"{name} ε={eps}: {row['mean']:.1f} ± {row['stderr']:.1f} "
              f"(coverage {row['coverage']}, {row['seconds']:.0f} s)", flush=True)
    plot(rows, args.out / "frontier.png")
    md = table(rows)
    (args.out / "frontier.md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
