"""Returning users (issue 24): final regret and the per-person guarantee against the bound k.

N persons make T visits in all (T/N each, in random order, each with her own context offset;
``shared.core.returning``); the device keeps each person's first k reports. For each policy and
k: final regret (mean ± stderr over runs, same seeds hence the same persons and visits for every
k) and the per-report and per-person central ε of the ledger (``accounting.persons``).

    python -m bench.experiments.returning [--T 50000 --users 2000 --runs 3]
        [--ks 1,2,5,10,25] [--out out/experiments/returning]

Writes <out>/returning.json (one row per policy and k) and <out>/returning.png (regret against
k, and the per-person central ε against k, log scales), and prints the Markdown table.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench.experiments.cli import experiment_parser
from privbandit.cli import main as cli

# The policies the issue names, each at a per-report (or per-batch) level of 1, practical
# defaults (``privbandit simulate``'s).
POLICIES: dict[str, list[str]] = {
    "ldp-linucb": ["--env", "linear", "--d", "5", "--K", "20", "--epsilon", "1"],
    "ddp-linucb": ["--env", "linear", "--d", "5", "--K", "20", "--epsilon", "1",
                   "--aggregation", "secure-sum"],
    "heldp-ucb-b": ["--env", "mab", "--K", "20", "--epsilon", "1", "--user-offset", "0.05"],
}


def run(algo: str, k: int, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    path = out / f"{algo}-k{k}.json"
    argv = ["simulate", "--algo", algo, *POLICIES[algo], "--T", str(args.T), "--runs",
            str(args.runs), "--seed", str(args.seed), "--users", str(args.users),
            "--contributions", str(k), "--json", str(path), "--no-progress"]
    started = time.perf_counter()
    if cli(argv) != 0:
        raise SystemExit(f"simulate failed: {' '.join(argv)}")
    data = json.loads(path.read_text())
    p, person = data["privacy"], data["privacy"]["per_person"]
    return {
        "algo": algo, "k": k, "users": args.users, "T": args.T, "runs": args.runs,
        "final_regret_mean": data["final_regret_mean"],
        "final_regret_stderr": data["final_regret_stderr"],
        "random_regret_mean": data["random_regret_mean"],
        "withheld_mean": data["withheld_mean"],
        "report_central_epsilon": p["central_epsilon"], "report_central_delta": p["central_delta"],
        "person_central_epsilon": person["central_epsilon"],
        "person_central_delta": person["central_delta"],
        "person_accounting": person["accounting"],
        "seconds": time.perf_counter() - started,
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| policy | k | reports kept | final regret | random | ε per report (δ) | "
             "ε per person (δ) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        kept = r["T"] - r["withheld_mean"]
        lines.append(
            f"| {r['algo']} | {r['k']} | {kept:.0f} | {r['final_regret_mean']:.0f} ± "
            f"{r['final_regret_stderr']:.0f} | {r['random_regret_mean']:.0f} | "
            f"{r['report_central_epsilon']:.3g} ({r['report_central_delta']:.0e}) | "
            + ("—" if r["person_central_epsilon"] is None else
               f"{r['person_central_epsilon']:.3g} ({r['person_central_delta']:.0e})") + " |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for algo in POLICIES:
        mine = [r for r in rows if r["algo"] == algo]
        ks = [r["k"] for r in mine]
        random = mine[0]["random_regret_mean"]
        left.errorbar(ks, [r["final_regret_mean"] / random for r in mine],
                      yerr=[2 * r["final_regret_stderr"] / random for r in mine],
                      marker="o", capsize=3, label=algo)
        eps = [(r["k"], r["person_central_epsilon"]) for r in mine
               if r["person_central_epsilon"] is not None]
        right.plot([k for k, _ in eps], [e for _, e in eps], marker="o", label=algo)
    left.set(xscale="log", xlabel="k (reports kept per person)",
             ylabel="final regret / uniformly random policy's",
             title=f"regret, {rows[0]['T']} visits of {rows[0]['users']} persons (±2 se)")
    right.set(xscale="log", yscale="log", xlabel="k (reports kept per person)",
              ylabel="central ε per person", title="the per-person guarantee")
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = experiment_parser(__doc__.split("\n")[0], T=50_000, runs=3, seed=1,
                          out=Path("out/experiments/returning"))
    p.add_argument("--users", type=int, default=2_000)
    p.add_argument("--ks", default="1,2,5,10,25")
    p.add_argument("--algos", default=",".join(POLICIES))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [run(algo, int(k), args, args.out) for algo in args.algos.split(",")
            for k in args.ks.split(",")]
    (args.out / "returning.json").write_text(json.dumps(rows, indent=2) + "\n")
    plot(rows, args.out / "returning.png")
    print(table(rows))
    print(f"wrote {args.out / 'returning.json'} and {args.out / 'returning.png'}")


if __name__ == "__main__":
    main()
