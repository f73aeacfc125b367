"""CPU cost of ``privbandit privacy`` (issue 26 item 7): whole processes, start-up included.

Each case is one fresh ``python -m privbandit privacy ...`` process; its CPU time (user + system,
from ``os.wait4``) is reported as a ratio to a floor measured in the same run, interleaved with
the cases: the cheapest ledger, ``privacy --threat-model ldp --eps0 1`` (interpreter, argparse,
pydantic and the ledger module; no accounting). The floor's own CPU seconds are printed too, so
that the targets (≤ 2 s of CPU for a ledger up to l = 10⁶, ≤ 10 s for an inverse solve) can be
read off on the machine that ran it. Each figure is the minimum over ``--repeats`` runs.

    python bench/accountant.py [--repeats 2] [--json out/bench_accountant.json]
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

from bench.args import parse, write_json

FLOOR = ["--threat-model", "ldp", "--eps0", "1"]
SHUFFLE = ["--threat-model", "shuffle", "--delta", "1e-6"]
CASES: dict[str, list[str]] = {
    **{f"secure-sum eps0=2 l={l}": [*SHUFFLE, "--eps0", "2", "--batch-size", str(l)]
       for l in (1_000, 10_000, 100_000, 1_000_000)},
    "reports eps0=2 l=1000000": [*SHUFFLE, "--eps0", "2", "--batch-size", "1000000",
                                 "--aggregation", "reports"],
    "solve eps0 target=1 l=1000": [*SHUFFLE, "--batch-size", "1000", "--target-epsilon", "1",
                                   "--solve", "eps0"],
    "solve eps0 target=1 l=100000": [*SHUFFLE, "--batch-size", "100000", "--target-epsilon", "1",
                                     "--solve", "eps0"],
    "solve batch-size eps0=8 target=0.5": [*SHUFFLE, "--eps0", "8", "--target-epsilon", "0.5",
                                           "--solve", "batch-size"],
}


def cpu_seconds(args: list[str]) -> float:
    """User + system CPU seconds of one ``privbandit privacy`` process (and its children)."""
    proc = subprocess.Popen([sys.executable, "-m", "privbandit", "privacy", *args],
                            stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": "."})
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise RuntimeError(f"privbandit privacy {' '.join(args)} failed")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    args = parse(__doc__, {"repeats": 2}, "out/bench_accountant.json")
    floors: list[float] = []
    results: dict[str, float] = {}
    for name, case in CASES.items():
        runs = []
        for _ in range(args.repeats):
            floors.append(cpu_seconds(FLOOR))
            runs.append(cpu_seconds(case))
        results[name] = min(runs)
    floor = min(floors)
    print(f"floor (privacy --threat-model ldp --eps0 1): {floor:.3f} s of CPU, "
          f"{platform.processor() or platform.machine()}, load {os.getloadavg()[0]:.1f}")
    rows = {}
    for name, cpu in results.items():
        rows[name] = {"cpu_s": round(cpu, 3), "ratio_to_floor": round(cpu / floor, 2)}
        print(f"  {name:<38} {cpu / floor:6.2f}× floor  ({cpu:.2f} s)")
    write_json(args.json, {"floor_cpu_s": round(floor, 3), "cases": rows,
                           "repeats": args.repeats})


if __name__ == "__main__":
    main()
