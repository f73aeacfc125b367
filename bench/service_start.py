"""The CPU a start of the three services costs, as ratios to a floor measured in the same run.

Every end-to-end test, every restart of a crash test and every ``privbandit up`` pays it, once
per process: on a 2-core machine running the test suite, this CPU is taken from the tests.

- Floor: a Python process that imports only the libraries every service needs (numpy, scipy's
  ``linalg`` and ``special``, pydantic, FastAPI, uvicorn, httpx) and exits: what no service start
  can go below (the least of 5 such processes, before each start; the median over starts).
- Measured: ``local_cluster`` with a config (default: the packaged small config, 13 tasks of
  every family and both transports), each service's user + system CPU read from ``/proc`` once
  all three answer ``/healthz`` and again ``--settle`` seconds later; a process's descendants
  (the device's Paillier refill worker) count towards it. ``--repeat`` starts; the median.

    python -m bench.service_start [--repeat 3] [--settle 10] [--config FILE]
                                  [--json out/bench/service_start.json]

Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

from bench.args import write_json
from privbandit.launcher import SERVICES, Cluster, local_cluster

FLOOR_IMPORTS = "import numpy, scipy.linalg, scipy.special, pydantic, fastapi, uvicorn, httpx"
TICK = os.sysconf("SC_CLK_TCK")


def floor_cpu(runs: int = 5) -> float:
    """User + system CPU seconds of an interpreter importing ``FLOOR_IMPORTS``: the least of
    ``runs`` (a floor: what other processes' contention adds is not part of it)."""
    out = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", FLOOR_IMPORTS], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return min(out)


def _stat(pid: int) -> tuple[int, float]:
    """(parent pid, user + system CPU seconds) of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


def tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and its live descendants."""
    cpu: dict[int, float] = {}
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent[int(entry)], cpu[int(entry)] = _stat(int(entry))
            except (OSError, ValueError, IndexError):
                continue  # exited meanwhile
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(p for p, pp in parent.items() if pp == pid)
    return total


def one_start(config: Path, settle: float) -> dict[str, dict[str, float]]:
    """Per service: CPU seconds when all three are healthy, and after ``settle`` seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with local_cluster(root / "data", config=config, log_dir=root / "logs",
                           timeout=120.0) as cluster:
            healthy = per_service(cluster)
            time.sleep(settle)
            settled = per_service(cluster)
    return {name: {"healthy": healthy[name], "settled": settled[name]} for name in SERVICES}


def per_service(cluster: Cluster) -> dict[str, float]:
    out = {}
    for name in SERVICES:
        pid = cluster[name].pid
        assert pid is not None, name
        out[name] = tree_cpu(pid)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="(default 3)")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds (default 10)")
    ap.add_argument("--config", type=Path, default=None,
                    help="(default: the packaged small config)")
    ap.add_argument("--json", type=Path, default=Path("out/bench/service_start.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = args.config
        if config is None:
            config = Path(tmp) / "small.toml"
            config.write_text('shuffler_token = "bench-service-start-token-0123456789"\n'
                              + (resources.files("privbandit.shared") / "defaults" / "small.toml")
                              .read_text("utf-8"))
        floors, starts = [], []
        for _ in range(args.repeat):
            floors.append(floor_cpu())
            starts.append(one_start(config, args.settle))
    floor = statistics.median(floors)
    result: dict[str, object] = {"floor_cpu_s": floor, "floor": FLOOR_IMPORTS,
                                 "config": str(args.config or "small.toml"),
                                 "repeat": args.repeat, "settle_s": args.settle}
    print(f"floor (import of the services' libraries): {floor:.2f} s of CPU")
    for when in ("healthy", "settled"):
        per = {n: statistics.median(s[n][when] for s in starts) for n in SERVICES}
        total = sum(per.values())
        result[when] = {"cpu_s": per, "total_cpu_s": total, "total_over_floor": total / floor,
                        "over_floor": {n: v / floor for n, v in per.items()}}
        print(f"{when:8s} " + "  ".join(f"{n} {v / floor:4.2f}x" for n, v in per.items())
              + f"  total {total / floor:4.2f}x the floor ({total:.2f} s of CPU)")
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
