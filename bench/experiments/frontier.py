"""Issues 22 and 44 — learning at the privacy frontier: every private policy at its ``simulate``
defaults, over ε at δ = 10⁻⁶, on the same users as the best non-private setting, with fixed
batches beside growing ones, at one or more horizons T.

Each row is one ``privbandit simulate`` command, run as a subprocess exactly as a user types it
(so a row is what the defaults give, nothing tuned here), all with the same ``--seed``: the same
θ* (or data set order), contexts and reward noise per run for every policy.

- the yardstick (issue 44): ``linucb`` at its defaults and over its search grid of
  ``--confidence-scale`` (``yardstick.SEARCH``, the grid its practical default was chosen from on
  tuning seeds), at each T; the "× linucb" column divides by the best of these, in this run, on
  these users;
- each private policy at its defaults (its registry entry's ``practical``, unless
  ``--paper``), given only ``--epsilon ε --delta 10⁻⁶`` (central ε for the shuffle/central/
  distributed policies, the per-report ε for LDP ones: the "ε" column says which the ledger
  states);
- the batched policies also with fixed batches of 1000 (``--batch-size 1000``), the papers'
  schedule, beside their default growing schedule (``--no-fixed``: not);
- ``--learn-T``: further horizons at which only the private policies run, at ε = 1 (and ε = 4
  for the LDP ones), for the table of the smallest T at which each ends below half of the random
  policy's regret (the random policy's regret on the same users, from each row's own run).

    python -m bench.experiments.frontier --env linear --T 10000,100000 --learn-T 20000,50000
    python -m bench.experiments.frontier --env linear --T 1000000 --epsilons 1 --no-fixed
    python -m bench.experiments.frontier --env digits --d 20 --K 10 --T 200000
    python -m bench.experiments.frontier --env bench.experiments.disjoint_env:DisjointLinear \
        --d 20 --K 5 --T 10000 --epsilons 1 --algos ddp-linucb,adar-oful --no-fixed

writes out/experiments/frontier/<env>.json (rows added as they finish; a rerun skips rows it
has), <env>.md (the tables, one per T, and the learning table) and <env>.png (final regret
against ε per policy at the largest T, with the best ``linucb`` and 10 × it drawn; one panel
per T).
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
from bench.experiments.yardstick import SEARCH

OUT = Path("out/experiments/frontier")
DELTA = 1e-6
REFERENCE = "linucb"
# The yardstick's rows: linucb at its defaults and over its search grid.
GRID = SEARCH[REFERENCE][1]
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


Job = tuple[str, str, float | None, list[str], int]


def is_reference(label: str) -> bool:
    return label == REFERENCE or label.startswith(f"{REFERENCE} --")


def reference_jobs(T: int, grid: tuple[float, ...]) -> Iterator[Job]:
    """The yardstick's rows at horizon T: linucb at its defaults and at each width of ``grid``."""
    yield REFERENCE, REFERENCE, None, [], T
    for cs in grid:
        yield f"{REFERENCE} --confidence-scale {cs:g}", REFERENCE, None, \
            ["--confidence-scale", f"{cs:g}"], T


def jobs(algos: list[str], epsilons: list[float], T: int, *, fixed: bool = True,
         grid: tuple[float, ...] = GRID) -> Iterator[Job]:
    """(row label, algo, ε, extra flags, T) of every row at horizon T."""
    yield from reference_jobs(T, grid)
    for eps in epsilons:
        for algo in algos:
            flags = [EPSILON_FLAG.get(algo, "--epsilon"), f"{eps:g}", "--delta", f"{DELTA:g}"]
            yield algo, algo, eps, flags, T
            if fixed and algo in BATCHED:
                yield f"{algo} {FIXED}", algo, eps, [*flags, "--batch-size", "1000"], T


def learn_epsilons(algo: str) -> tuple[float, ...]:
    """The ε at which the learning table asks when ``algo`` learns: 1, and 4 for LDP policies."""
    return (1.0, 4.0) if PRIVATE.get(algo) == "local" else (1.0,)


def learn_jobs(algos: list[str], T: int) -> Iterator[Job]:
    """The rows of a ``--learn-T`` horizon: each private policy at ε = 1 (and 4 if LDP)."""
    for algo in algos:
        for eps in learn_epsilons(algo):
            yield algo, algo, eps, [EPSILON_FLAG.get(algo, "--epsilon"), f"{eps:g}", "--delta",
                                    f"{DELTA:g}"], T


def run_row(label: str, algo: str, eps: float | None, flags: list[str], T: int,
            args: argparse.Namespace) -> dict[str, Any]:
    """One ``privbandit simulate`` command; its JSON reduced to the table's figures."""
    cmd = ["privbandit", "simulate", "--algo", algo, "--env", args.env, "--T", str(T),
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
        "T": T, "runs": args.runs, "seed": args.seed, "env": args.env,
        "mean": res["final_regret_mean"],
        "stderr": res["final_regret_stderr"], "random": res.get("random_regret_mean"),
        "coverage": res.get("coverage"), "central_epsilon": privacy.get("central_epsilon"),
        "ldp_epsilon": privacy.get("ldp_epsilon"), "per_batch": privacy.get("per_batch"),
        "params": res.get("params"), "seconds": time.perf_counter() - t0,
    }


def best_reference(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The yardstick of rows of one T: the linucb row (defaults or a grid width) of least
    regret."""
    refs = [r for r in rows if is_reference(r["label"])]
    if not refs:
        raise ValueError("no linucb row at this T: the yardstick runs with every table")
    return min(refs, key=lambda r: r["mean"])


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: regret ± s.e., × the best linucb with its s.e. (delta method), % of the random
    policy, coverage, and the ε the ledger states."""
    ref = best_reference(rows)
    lines = [f"Best non-private: `{ref['label']}`, {ref['mean']:,.1f} ± {ref['stderr']:,.1f}.",
             "", "| policy | ε | ledger: central ε / LDP ε | regret ± s.e. | × best linucb "
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


def learning_table(rows: list[dict[str, Any]]) -> str:
    """Markdown: for each private policy (growing batches, its defaults) and ε of
    ``learn_epsilons``, its regret as % of the random policy's at every T run, and the smallest
    of those T at which it ends below 50 %."""
    Ts = sorted({r["T"] for r in rows})
    head = "| policy | ε | " + " | ".join(f"T = {T:,}" for T in Ts) + \
        " | smallest T below 50 % of random |"
    lines = [head, "|---|---|" + "---|" * (len(Ts) + 1)]
    for algo in sorted({r["label"] for r in rows if r["label"] in PRIVATE}):
        for eps in learn_epsilons(algo):
            cells, first = [], None
            for T in Ts:
                r = next((r for r in rows if r["label"] == algo and r["epsilon"] == eps
                          and r["T"] == T), None)
                if r is None or not r["random"]:
                    cells.append("—")
                    continue
                share = r["mean"] / r["random"]
                cells.append(f"{100 * share:.1f}%" if share >= 0.01 else f"{100 * share:.2f}%")
                if share < 0.5 and first is None:
                    first = T
            learned = "not by the largest T run" if first is None else f"{first:,}"
            lines.append(f"| {algo} | {eps:g} | " + " | ".join(cells) + f" | {learned} |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # A panel per T that has an ε grid (two ε or more) and the yardstick; the learning horizons
    # have neither. Then, over two horizons or more, a panel of % of random against T.
    Ts = sorted(T for T in {r["T"] for r in rows}
                if len({r["epsilon"] for r in rows if r["T"] == T and r["epsilon"]}) > 1
                and any(r["label"].startswith(f"{REFERENCE} --") for r in rows
                        if r["T"] == T)) or \
        [max(r["T"] for r in rows if is_reference(r["label"]))]
    learning = len({r["T"] for r in rows}) > 1
    panels = len(Ts) + learning
    fig, axes = plt.subplots(1, panels, figsize=(6.4 * panels, 4.6), squeeze=False)
    if learning:
        learning_panel(axes[0][-1], rows)
    for ax, T in zip(axes[0], Ts, strict=False):
        at = [r for r in rows if r["T"] == T]
        ref = best_reference(at)
        for name in sorted({r["label"] for r in at if r["epsilon"] is not None}):
            pts = sorted((r["epsilon"], r["mean"], r["stderr"]) for r in at
                         if r["label"] == name)
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts],
                        marker="o", capsize=3, ls="--" if FIXED in name else "-", label=name)
        ax.axhline(ref["mean"], color="k", lw=1, label=f"best linucb ({ref['label']})")
        ax.axhline(10 * ref["mean"], color="k", lw=1, ls="--", label="10 × best linucb")
        if ref.get("random"):
            ax.axhline(ref["random"], color="grey", lw=1, ls=":", label="random policy")
            ax.axhline(ref["random"] / 2, color="grey", lw=1, ls="-.", label="½ random policy")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("ε (δ = 10⁻⁶; central, or per report for LDP policies)")
        ax.set_ylabel(f"final regret at T = {T:,}")
        ax.set_title(f"{ref['env']}, T = {T:,}, {ref['runs']} runs, seed {ref['seed']}",
                     fontsize=9)
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def learning_panel(ax: Any, rows: list[dict[str, Any]]) -> None:
    """Final regret as % of the random policy's against T, each private policy at its defaults at
    ε = 1 (solid) and, for LDP ones, ε = 4 (dashed); the line at 50 %."""
    for algo in sorted({r["label"] for r in rows if r["label"] in PRIVATE}):
        for eps in learn_epsilons(algo):
            pts = sorted((r["T"], 100 * r["mean"] / r["random"]) for r in rows
                         if r["label"] == algo and r["epsilon"] == eps and r["random"])
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                        ls="-" if eps == 1.0 else "--", label=f"{algo} ε = {eps:g}")
    ax.axhline(50, color="grey", lw=1, ls="-.", label="½ random policy")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("T (users)")
    ax.set_ylabel("final regret, % of the random policy's")
    ax.set_title(f"{rows[0]['env']}: when each policy learns (δ = 10⁻⁶)", fontsize=9)
    ax.legend(fontsize=6)


def main(argv: list[str] | None = None) -> int:
    p = experiment_parser(__doc__.split("\n\n")[0], runs=3, seed=1, d=5, K=20, out=OUT)
    p.add_argument("--T", type=int_list, default=[1_000_000],
                   help="horizons of the full grid, comma-separated (default 1000000)")
    p.add_argument("--learn-T", type=int_list, default=[],
                   help="further horizons for the learning table only (private policies at "
                        "ε = 1, and 4 for LDP), comma-separated")
    p.add_argument("--env", default="linear",
                   help="linear, letter, digits, or package.module:Class (simulate's --env)")
    p.add_argument("--epsilons", default="0.5,1,4")
    p.add_argument("--algos", default=",".join(PRIVATE))
    p.add_argument("--grid", type=float_list, default=list(GRID),
                   help="linucb's --confidence-scale values for the yardstick (default: its "
                        "search grid, bench.experiments.yardstick)")
    p.add_argument("--no-fixed", action="store_true",
                   help="no fixed-batch (l = 1000) rows beside the growing schedules")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="simulations at once (default: one per core)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    name = args.env.rpartition(":")[2] if ":" in args.env else args.env
    path = args.out / f"{name}.json"
    rows: list[dict[str, Any]] = json.loads(path.read_text())["rows"] if path.exists() else []
    done = {(r["label"], r["epsilon"], r["T"]) for r in rows
            if (r["runs"], r["seed"]) == (args.runs, args.seed)}
    algos = args.algos.split(",")
    epsilons = [float(e) for e in args.epsilons.split(",")]
    wanted: list[Job] = []
    for T in args.T:
        wanted += jobs(algos, epsilons, T, fixed=not args.no_fixed, grid=tuple(args.grid))
    for T in args.learn_T:
        wanted += [*reference_jobs(T, ()), *learn_jobs(algos, T)]
    todo = list({(j[0], j[2], j[4]): j for j in wanted if (j[0], j[2], j[4]) not in done}
                .values())
    print(f"{len(todo)} simulations to run ({len(done)} already in {path})", flush=True)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(run_row, *job, args): job for job in todo}
        for n, fut in enumerate(as_completed(futures), 1):
            row = fut.result()
            rows.append(row)
            path.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
            print(f"[{n}/{len(todo)}] T={row['T']} {row['label']} ε={row['epsilon']}: "
                  f"{row['mean']:,.1f} ± {row['stderr']:,.1f} (coverage {row['coverage']}, "
                  f"{row['seconds']:.0f} s)", flush=True)
    print(f"wall time {time.perf_counter() - t0:.0f} s", flush=True)
    rows = [r for r in rows if (r["runs"], r["seed"]) == (args.runs, args.seed)]
    plot(rows, args.out / f"{name}.png")
    # A table per horizon run with the yardstick's grid (the learning horizons have only
    # linucb's defaults: they are in the learning table, as % of random).
    parts = [f"### T = {T:,}\n\n{table([r for r in rows if r['T'] == T])}"
             for T in sorted({r["T"] for r in rows})
             if any(r["label"].startswith(f"{REFERENCE} --") for r in rows if r["T"] == T)]
    md = "\n\n".join([*parts, "### When each private policy learns\n\n" + learning_table(rows)])
    (args.out / f"{name}.md").write_text(md + "\n")
    print(md)
    return 0


def int_list(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x]


def float_list(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


if __name__ == "__main__":
    raise SystemExit(main())
