"""The privacy audits at full size (issue 43): every mechanism honest and with its planted bug.

For each mechanism of ``privbandit audit --list``: ε_lo at 95% confidence from ``--samples``
outputs per input (the AdaR mechanisms, whose samplers are the policies' own per-release code
in a Python loop, from a fifth and a tenth of that), beside the claimed ε; then the same with the
planted calibration bug. CPU seconds per audit are also given as a ratio to a floor measured in
the same run: the bare audit (``bounds.split_audit``) of as many 1-D standard normal samples,
drawn by numpy, as the mechanism's run used. Rows go to ``--json`` (default out/audit.json) and a
Markdown table to stdout.

    python -m bench.audit [--samples 1000000] [--seed 0] [--json out/audit.json]
"""

from __future__ import annotations

import os
import platform
import time

import numpy as np

from bench.args import parse, write_json
from privbandit.shared.core.audit.bounds import split_audit
from privbandit.shared.core.audit.run import audit, names

# The samplers that call the policies' release code once per output (Python loops).
SLOW = {"adar-ucb": 5, "adar-gope": 10, "adar-oful": 10}


def floor_seconds(samples: int) -> float:
    """CPU seconds of the bare audit of ``samples`` N(0, 1) against N(1, 1) draws a side."""
    rng = np.random.default_rng(0)
    start = time.process_time()
    split_audit(rng.standard_normal(samples), rng.standard_normal(samples) + 1.0, 1e-6, 0.95)
    return time.process_time() - start


def main() -> None:
    args = parse(__doc__, {"samples": 1_000_000, "seed": 0}, "out/audit.json")
    floor_seconds(1000)  # scipy's import, outside every measurement
    rows = []
    print(f"{platform.processor() or platform.machine()}, load {os.getloadavg()[0]:.1f}")
    print("| mechanism | claimed ε | δ | ε_lo | samples | CPU s | CPU ÷ floor | "
          "planted bug: ε_lo |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in names():
        n = args.samples // SLOW.get(name, 1)
        honest = audit(name, samples=n, seed=args.seed)[0]
        planted = audit(name, samples=n, seed=args.seed, plant=True)[0]
        floor = floor_seconds(n)
        row = {**honest.to_dict(), "cpu_floor_seconds": floor,
               "cpu_ratio": honest.cpu_seconds / floor,
               "planted_bug": planted.planted,
               "planted_epsilon_lower": planted.audited_epsilon_lower}
        rows.append(row)
        print(f"| {name} | {honest.claimed_epsilon:.4g} | {honest.delta:.0e} | "
              f"{honest.audited_epsilon_lower:.3f} | {n} | {honest.cpu_seconds:.2f} | "
              f"{row['cpu_ratio']:.1f} | {planted.audited_epsilon_lower:.3f} |", flush=True)
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
