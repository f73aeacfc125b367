"""``make load``: every Locust scenario of ``load/locustfile.py`` against fresh local services and
against the bare floor (``load/bare.py``), with the same client, in the same run.

For each scenario it runs Locust headless (bounded by users, spawn rate and time; loopback only),
reads its CSV, and reports throughput and latency percentiles of the service as ratios to the
floor. After the shuffler-intake run it waits for the pipeline to drain and checks that every
report answered 202 was counted (or refused) by the analyzer: nothing accepted may be lost.

    python load/run.py [--time 20] [--only decide,...] [--json out/load/summary.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from privbandit.launcher import free_ports, healthy, local_cluster

HERE = Path(__file__).resolve().parent
TASK = "demo-ldp"  # pass-through: every report becomes a batch, so the whole path is loaded


@dataclass(frozen=True)
class Scenario:
    name: str
    user_class: str
    service: str  # which service it targets
    users: int


SCENARIOS = [
    Scenario("shuffler-intake", "ShufflerIntake", "shuffler", 32),
    Scenario("model-fetch", "ModelFetch", "analyzer", 32),
    Scenario("decide", "Decide", "device", 50),
    Scenario("device-flow", "DeviceFlow", "device", 50),
]


def run_locust(s: Scenario, host: str, seconds: int, out: Path, env: dict[str, str]) -> dict:
    prefix = out / f"{s.name}-{'bare' if 'bare' in env.get('LOAD_TARGET', '') else 'service'}"
    cmd = [sys.executable, "-m", "locust", "-f", str(HERE / "locustfile.py"), s.user_class,
           "--headless", "-u", str(s.users), "-r", str(s.users), "-t", f"{seconds}s",
           "--host", host, "--csv", str(prefix), "--only-summary", "--stop-timeout", "5",
           "--loglevel", "WARNING"]
    subprocess.run(cmd, env=env, check=False, timeout=seconds + 120,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with open(f"{prefix}_stats.csv", newline="") as fh:
        rows = {row["Name"]: row for row in csv.DictReader(fh)}
    agg = rows["Aggregated"]
    return {
        "requests": int(agg["Request Count"]),
        "failures": int(agg["Failure Count"]),
        "rps": float(agg["Requests/s"]),
        "p50_ms": float(agg["50%"]),
        "p99_ms": float(agg["99%"]),
        "by_name": {n: {"rps": float(r["Requests/s"]), "p99_ms": float(r["99%"])}
                    for n, r in rows.items() if n != "Aggregated"},
    }


def counted(analyzer: str) -> int:
    body = httpx.get(f"{analyzer}/v1/tasks/{TASK}/privacy", timeout=10).json()
    return int(body["reports_counted"]) + int(body.get("reports_refused", 0))


def wait_counted(analyzer: str, target: int, timeout: float = 120.0) -> int:
    deadline = time.monotonic() + timeout
    n = counted(analyzer)
    while n < target and time.monotonic() < deadline:
        time.sleep(0.5)
        n = counted(analyzer)
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time", type=int, default=20, help="seconds per run (default 20)")
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--json", type=Path, default=Path("out/load/summary.json"))
    args = ap.parse_args()
    if not 1 <= args.time <= 600:
        ap.error("--time must be 1..600 seconds")
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only.split(",")]
    out = args.json.parent
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp, \
            local_cluster(Path(tmp) / "data", log_dir=Path(tmp) / "logs") as cluster:
        urls = cluster.urls
        (port,) = free_ports(1)
        bare_url = f"http://127.0.0.1:{port}"
        bare = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "load.bare:app", "--host", "127.0.0.1", "--port",
             str(port), "--log-level", "warning", "--no-access-log"],
            cwd=HERE.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 30
            while not healthy(bare_url) and time.monotonic() < deadline:
                time.sleep(0.2)
            env = {**os.environ, "LOAD_ANALYZER": urls["analyzer"], "LOAD_TASK": TASK,
                   "PYTHONPATH": str(HERE.parent)}
            for s in chosen:
                floor = run_locust(s, bare_url, args.time, out, {**env, "LOAD_TARGET": "bare"})
                before = counted(urls["analyzer"]) if s.name == "shuffler-intake" else 0
                real = run_locust(s, urls[s.service], args.time, out, env)
                row = {"scenario": s.name, "users": s.users, "seconds": args.time,
                       "service": real, "floor": floor,
                       "throughput_ratio": real["rps"] / floor["rps"] if floor["rps"] else None,
                       "p99_ratio": real["p99_ms"] / floor["p99_ms"] if floor["p99_ms"] else None}
                if s.name == "shuffler-intake":
                    accepted = real["requests"] - real["failures"]
                    after = wait_counted(urls["analyzer"], before + accepted)
                    row["accepted_202"] = accepted
                    row["counted_or_refused"] = after - before
                results[s.name] = row
                print(f"{s.name:16s} {s.users:3d} users  service {real['rps']:8.0f}/s "
                      f"p99 {real['p99_ms']:6.0f} ms | floor {floor['rps']:8.0f}/s "
                      f"p99 {floor['p99_ms']:6.0f} ms | ratio {row['throughput_ratio']:.2f}"
                      f"  failures {real['failures']}", flush=True)
        finally:
            bare.terminate()
            bare.wait(10)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.json}")
    lost = [r for r in results.values()
            if "accepted_202" in r and r["counted_or_refused"] != r["accepted_202"]]
    for r in lost:
        print(f"error: {r['accepted_202']} reports accepted, {r['counted_or_refused']} counted",
              file=sys.stderr)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
