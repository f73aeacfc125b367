"""Bounded load test of the device API (loopback only).

Drives simulated users (decide → reward → feedback, the same driver as ``privbandit demo``)
against a device at one or more concurrency levels, each level bounded by a user count *and* a
time limit, and reports users/s with request latency percentiles. After each level it waits for
the pipeline to drain and checks the count reconciliation, so a load test also shows that
nothing was lost under load.

    python load/drive.py --start --threat-model central --concurrency 1,4,16 --users 2000
    python load/drive.py --threat-model shuffle --users 5000 --time-limit 60   # running services

Refuses any address that is not on this machine's loopback interface.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from load.loopback import loopback_only  # noqa: E402
from privbandit.demo import (  # noqa: E402
    THREAT_MODELS,
    Driver,
    config_path,
    fetch_task,
    load_settings,
    pick_task,
    reconcile,
    snapshot,
    wait_quiescent,
)
from privbandit.launcher import SERVICES, local_cluster  # noqa: E402

MAX_USERS = 1_000_000
MAX_TIME = 3600.0
MAX_CONCURRENCY = 512


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None}
    arr = np.asarray(values) * 1e3
    p50, p95, p99 = np.percentile(arr, [50, 95, 99])
    return {"p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99)}


async def one_level(
    urls: dict[str, str], task_id: str, users: int, concurrency: int, time_limit: float,
    seed: int,
) -> dict[str, Any]:
    task = await fetch_task(urls["analyzer"], task_id)
    async with httpx.AsyncClient(timeout=10.0) as client:
        before = await snapshot(urls, task_id, client)
    driver = Driver(urls["device"], task, users, concurrency, seed, time_limit=time_limit)
    result = await driver.run()
    after = await wait_quiescent(urls, task_id, task.max_batch, timeout=300)
    rec = reconcile(result.feedbacks_sent, before, after)
    return {
        "concurrency": concurrency,
        "users": result.users,
        "wall_seconds": result.wall_seconds,
        "users_per_second": result.users_per_second,
        "decide": percentiles(driver.latencies["decide"]),
        "feedback": percentiles(driver.latencies["feedback"]),
        "request_retries": result.errors,
        "reconciliation": rec,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threat-model", choices=THREAT_MODELS, default="central")
    p.add_argument("--task", help="task id (default: the config's task for the threat model)")
    p.add_argument("--users", type=int, default=2000, help=f"users per level (<= {MAX_USERS})")
    p.add_argument("--time-limit", type=float, default=60.0,
                   help=f"seconds per level; no new users after it (<= {MAX_TIME:.0f})")
    p.add_argument("--concurrency", default="1,8",
                   help=f"comma-separated levels of users in flight (each <= {MAX_CONCURRENCY})")
    p.add_argument("--config", type=Path, help="config file (default: as the services)")
    p.add_argument("--start", action="store_true",
                   help="start fresh services on free loopback ports (else use the configured "
                        "addresses)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", dest="json_out", type=Path, help="write the results here")
    args = p.parse_args(argv)

    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    if not levels or any(not 1 <= c <= MAX_CONCURRENCY for c in levels):
        p.error(f"--concurrency levels must be in 1..{MAX_CONCURRENCY}")
    if not 1 <= args.users <= MAX_USERS:
        p.error(f"--users must be in 1..{MAX_USERS}")
    if not 0 < args.time_limit <= MAX_TIME:
        p.error(f"--time-limit must be in (0, {MAX_TIME:.0f}]")

    cfg = config_path(args.config)
    settings = load_settings(cfg)
    task_id = args.task or pick_task(settings, args.threat_model, None)
    results = []

    def run_levels(urls: dict[str, str]) -> None:
        for level in levels:
            out = asyncio.run(one_level(urls, task_id, args.users, level, args.time_limit,
                                        args.seed))
            results.append(out)
            rec = out["reconciliation"]
            print(f"concurrency {level:4d}: {out['users']:7d} users in {out['wall_seconds']:6.1f}s"
                  f" = {out['users_per_second']:7.1f} users/s | decide p50 "
                  f"{out['decide']['p50_ms']:.1f} ms p99 {out['decide']['p99_ms']:.1f} ms | "
                  f"feedback p50 {out['feedback']['p50_ms']:.1f} ms p99 "
                  f"{out['feedback']['p99_ms']:.1f} ms | reconciled: {rec['consistent']}",
                  flush=True)

    print(f"task {task_id}; {args.users} users or {args.time_limit:.0f}s per level", flush=True)
    if args.start:
        with tempfile.TemporaryDirectory(prefix="privbandit-load-") as tmp, local_cluster(
            Path(tmp) / "data", config=cfg, log_dir=Path(tmp) / "logs"
        ) as cluster:
            run_levels(cluster.urls)
    else:
        urls = {n: loopback_only(getattr(settings, n).url) for n in SERVICES}
        run_levels(urls)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps({"task": task_id, "levels": results}, indent=2) + "\n")
        print(f"wrote {args.json_out}")
    return 0 if all(r["reconciliation"]["consistent"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
