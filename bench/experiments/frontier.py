"""Issue 22 — learning at the privacy frontier: every private policy at its ``simulate`` defaults,
over ε at δ = 10⁻⁶, on the same users as ``linucb``, with fixed batches beside growing ones.

Each row is one ``privbandit simulate`` command, run as a subprocess exactly as a user types it
(so a row is what the defaults give, nothing tuned here), all with the same ``--seed``: the same
θ* (or data set order), contexts and reward noise per run for every policy.

- ``linucb``: the non-private reference at its defaults (the "× linucb" column divides by it);
- each private policy at its defaults (its registry entry's ``practical``, unless
  ``--paper``), given only ``--epsilon ε --delta 10⁻⁶`` (central ε for the shuffle/central/
  distributed policies, the per-report ε for LDP ones: the "ε" column says which the ledger states);
- the batched policies also with fixed batches of 1000 (``--batch-size 1000``), the papers'
  schedule, beside their default growing schedule.

    python -m bench.experiments.frontier --env linear              # T = 10⁶, 3 runs, seed 1
    python -m bench.experiments.frontier --env letter --T 100000   # the UCI letter data set

writes out/experiments/frontier/<env>.json (rows added as they finish; a rerun skips rows it
has), <env>.md (the table) and <env>.png (final regret against ε per policy, with ``linucb`` and
10 × ``linucb`` drawn).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from bench.experiments.cli import experiment_parser

OUT = Path("out/experiments/frontier")
DELTA = 1e-6
REFERENCE = "linucb"
# The private policies of the linear family and how each states its guarantee.
PRIVATE = {
    "ddp-linucb": "central",
    "sblb": "central",
    "sblb-fixed": "central",
    "adar-oful": "central",
    "ldp-linucb": "local",
}
BATCHED = ("ddp-linucb", "sblb", "sblb-fixed")
# The flag that states a policy's guarantee as (ε, δ) where --epsilon means something else
# (the adar policies' --epsilon is a Rényi ε).
EPSILON_FLAG = {"adar-oful": "--central-epsilon"}
FIXED = "fixed l=1000"


def jobs(algos: list[str], epsilons: list[float]) -> Iterator[tuple[str, str, float | None,
                                                                    list[str]]]:
    """(row label, algo, ε, extra flags) of every row."""
    yield REFERENCE, "linucb", None, []
    for eps in epsilons:
        for algo in algos:
            flags = [EPSILON_FLAG.get(algo, "--epsilon"), f"{eps:g}", "--delta", f"{DELTA:g}"]
            yield algo, algo, eps, flags
            if algo in BATCHED:
                yield f"{algo} {FIXED}", algo, eps, [*flags, "--batch-size", "1000"]


def run_row(label: str, algo: str, eps: float | None, flags: list[str],
            args: argparse.Namespace) -> dict[str, Any]:
    """One ``privbandit simulate`` command; its JSON reduced to the table's figures."""
    cmd = ["privbandit", "simulate", "--algo", algo, "--env", args.env, "--T", str(args.T),
           "--runs", str(args.runs), "--seed", str(args.seed), *flags]
    if args.env != "letter":
        cmd += ["--d", str(args.d), "--K", str(args.K)]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "privbandit.cli", *cmd[1:], "--json",
                               str(out), "--no-progress"], capture_output=True, text=True,
                              check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
        res = json.loads(out.read_text())
    privacy = res.get("privacy") or {}
    return {
        "label": label, "algo": algo, "epsilon": eps, "command": " ".join(cmd),
        "T": args.T, "runs": args.runs, "seed": args.seed, "env": args.env,
        "mean": res["final_regret_mean"],
        "stderr": res["final_regret_stderr"], "random": res.get("random_regret_mean"),
        "coverage": res.get("coverage"), "central_epsilon": privacy.get("central_epsilon"),
        "ldp_epsilon": privacy.get("ldp_epsilon"), "per_batch": privacy.get("per_batch"),
        "params": res.get("params"), "seconds": time.perf_counter() - t0,
    }


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: regret ± s.e., × linucb with its s.e. (delta method), % of the random policy,
    coverage, and the ε the ledger states."""
    ref = next(r for r in rows if r["label"] == REFERENCE)
    lines = ["| policy | ε | ledger: central ε / LDP ε | regret ± s.e. | × linucb "
             "| % of random | coverage |", "|---|---|---|---|---|---|---|"]

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["epsilon"] is not None, r["epsilon"] or 0, r["label"])

    for r in sorted(rows, key=key):
        ratio = r["mean"] / ref["mean"]
        rse = ratio * math.hypot(r["stderr"] / r["mean"] if r["mean"] else 0.0,
                                 ref["stderr"] / ref["mean"])
        cov = "—" if r["coverage"] is None else f"{r['coverage']:.2f}"
        eps = "—" if r["epsilon"] is None else f"{r['epsilon']:g}"
        stated = " / ".join("—" if v is None else f"{v:.3g}"
                            for v in (r["central_epsilon"], r["ldp_epsilon"]))
        random = "—" if not r["random"] else f"{100 * r['mean'] / r['random']:.2f}%"
        lines.append(f"| {r['label']} | {eps} | {stated} | {r['mean']:,.0f} ± "
                     f"{r['stderr']:,.0f} | {ratio:.1f} ± {rse:.1f} | {random} | {cov} |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = next(r for r in rows if r["label"] == REFERENCE)
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    for name in sorted({r["label"] for r in rows if r["epsilon"] is not None}):
        pts = sorted((r["epsilon"], r["mean"], r["stderr"]) for r in rows if r["label"] == name)
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts],
                    marker="o", capsize=3, ls="--" if FIXED in name else "-", label=name)
    ax.axhline(ref["mean"], color="k", lw=1, label="linucb")
    ax.axhline(10 * ref["mean"], color="k", lw=1, ls="--", label="10 × linucb")
    if ref.get("random"):
        ax.axhline(ref["random"], color="grey", lw=1, ls=":", label="random policy")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ε (δ = 10⁻⁶; central, or per report for LDP policies)")
    ax.set_ylabel(f"final regret at T = {ref['T']:,}")
    ax.set_title(f"{ref['env']}, {ref['runs']} runs, seed {ref['seed']}")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = experiment_parser(__doc__.split("\n\n")[0], T=1_000_000, runs=3, seed=1, d=5, K=20,
                          out=OUT)
    p.add_argument("--env", default="linear", choices=["linear", "letter", "digits"])
    p.add_argument("--epsilons", default="0.5,1,4")
    p.add_argument("--algos", default=",".join(PRIVATE))
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="simulations at once (default: one per core)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.env}.json"
    rows: list[dict[str, Any]] = json.loads(path.read_text())["rows"] if path.exists() else []
    done = {(r["label"], r["epsilon"]) for r in rows if r["T"] == args.T}
    todo = [j for j in jobs(args.algos.split(","), [float(e) for e in args.epsilons.split(",")])
            if (j[0], j[2]) not in done]
    print(f"{len(todo)} simulations to run ({len(done)} already in {path})", flush=True)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(run_row, *job, args): job for job in todo}
        for n, fut in enumerate(as_completed(futures), 1):
            row = fut.result()
            rows.append(row)
            path.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
            print(f"[{n}/{len(todo)}] {row['label']} ε={row['epsilon']}: {row['mean']:,.1f} ± "
                  f"{row['stderr']:,.1f} (coverage {row['coverage']}, {row['seconds']:.0f} s)",
                  flush=True)
    rows = [r for r in rows if r["T"] == args.T]
    plot(rows, args.out / f"{args.env}.png")
    md = table(rows)
    (args.out / f"{args.env}.md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
