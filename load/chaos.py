"""A fault campaign you can rerun: simulated users drive the three services while the shuffler,
the analyzer and the device are killed with SIGKILL at random moments and restarted; at the end
every report answered 202 must have been counted or refused exactly once.

    python load/chaos.py [--kills 100] [--seed 1] [--concurrency 8] [--json out/chaos.json]

Each round waits a random time, kills one service chosen at random (kill -9), waits a little
longer and restarts it on its old data directory and port. Users keep coming throughout: decide
is local to the device, feedback lands in the device's durable outbox, and the demo driver
retries requests a killed device could not answer. When every kill is done the campaign waits
until the system is quiescent and checks, per task:

    reports accepted by the shuffler == feedbacks answered 202
    counted + refused + pending      == accepted   (nothing lost)
    distinct report ids counted      == counted    (nothing counted twice; HPKE tasks)

It prints the tally and exits 1 if any identity fails. Loopback only, bounded by ``--kills`` and
``--time-limit``. A shorter campaign (10 kills) runs in ``make test`` (tests/e2e/test_chaos.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import httpx

from privbandit.demo.driver import Driver, fetch_task
from privbandit.demo.reconcile import reconcile, snapshot, wait_quiescent
from privbandit.launcher import Cluster, local_cluster

SERVICES = ("shuffler", "analyzer", "device")

# The packaged small deployment (d = 3, K = 5): fast tasks, one per HPKE threat model. (Secure-sum
# would spend the campaign on 2048-bit Paillier key generation and pool refills on 2 cores.)
CHAOS_CONFIG = (resources.files("privbandit.shared") / "defaults" / "small.toml").read_text("utf-8")
TASKS = ("small-shuffle", "small-ldp", "small-central")


@dataclass
class Tally:
    kills: Counter[str] = field(default_factory=Counter)
    restarts_failed: int = 0
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.restarts_failed == 0 and all(t["consistent"] for t in self.tasks.values())


async def killer(cluster: Cluster, kills: int, rng: random.Random, tally: Tally,
                 deadline: float, wait_scale: float = 1.0) -> None:
    """``kills`` rounds of: wait, kill -9 one service, wait, restart it (given 60 s ×
    ``wait_scale`` to come back)."""
    for _ in range(kills):
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(rng.uniform(0.2, 1.2))
        name = rng.choice(SERVICES)
        await asyncio.to_thread(cluster.kill, name)
        tally.kills[name] += 1
        await asyncio.sleep(rng.uniform(0.0, 0.4))
        try:
            await asyncio.to_thread(cluster.restart, name, 60.0 * wait_scale)
        except Exception as exc:  # the tally says so; the campaign goes on to the checks
            tally.restarts_failed += 1
            print(f"restart of {name} failed: {exc}", file=sys.stderr)


def distinct_report_ids(data_dir: Path, task_id: str) -> int:
    db = data_dir / "analyzer" / "analyzer.sqlite3"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        row = conn.execute(
            "SELECT COUNT(DISTINCT report_id) FROM report_ids WHERE task = ?", (task_id,)
        ).fetchone()
    return int(row[0])


async def campaign(cluster: Cluster, data_dir: Path, kills: int, seed: int, concurrency: int,
                   time_limit: float, wait_scale: float = 1.0) -> Tally:
    rng = random.Random(seed)
    tally = Tally()
    urls = cluster.urls
    tasks = list(TASKS)
    infos = {t: await fetch_task(urls["analyzer"], t) for t in tasks}
    async with httpx.AsyncClient(timeout=10) as c:
        before = {t: await snapshot(urls, t, c) for t in tasks}
    drivers = {
        t: Driver(urls["device"], infos[t], users=10**6, concurrency=concurrency,
                  seed=seed + i, time_limit=time_limit, request_retries=60)
        for i, t in enumerate(tasks)
    }
    deadline = time.monotonic() + time_limit
    stop = asyncio.Event()

    async def chaos() -> None:
        try:
            await killer(cluster, kills, rng, tally, deadline, wait_scale)
        finally:
            stop.set()

    async def drive(d: Driver) -> Any:
        run = asyncio.create_task(d.run())
        await stop.wait()
        d.users = d.done + concurrency  # let the users in flight finish, start no new ones
        return await run

    results = await asyncio.gather(chaos(), *(drive(d) for d in drivers.values()))
    for t, result in zip(tasks, results[1:], strict=True):
        after = await wait_quiescent(urls, t, infos[t].max_batch, timeout=120 * wait_scale)
        rec = reconcile(result.feedbacks_sent, before[t], after)
        distinct = distinct_report_ids(data_dir, t)
        if distinct != rec["reports_counted"]:
            rec["consistent"] = False
            rec["problems"].append(f"{distinct} distinct report ids for "
                                   f"{rec['reports_counted']} counted")
        rec["distinct_report_ids"] = distinct
        rec["users"] = result.users
        rec["driver_retries"] = result.errors
        tally.tasks[t] = rec
    return tally


def print_tally(tally: Tally) -> None:
    kills = ", ".join(f"{n} {tally.kills[n]}" for n in SERVICES)
    print(f"kills: {sum(tally.kills.values())} ({kills}); failed restarts: "
          f"{tally.restarts_failed}")
    for t, r in tally.tasks.items():
        print(f"{t:14s} users {r['users']:6d}  202s {r['feedbacks_sent']:6d}  accepted "
              f"{r['reports_accepted']:6d}  counted {r['reports_counted']:6d}  refused "
              f"{r.get('reports_refused', 0):4d}  pending {r['reports_pending']:3d}  "
              f"distinct ids {r['distinct_report_ids']:6d}  "
              f"{'OK' if r['consistent'] else 'FAIL: ' + '; '.join(r['problems'])}")
    print("campaign", "passed" if tally.ok else "FAILED")


def run_campaign(kills: int, seed: int = 1, concurrency: int = 8, time_limit: float = 1800.0,
                 workdir: Path | None = None, wait_scale: float = 1.0,
                 config_text: str = CHAOS_CONFIG) -> Tally:
    """The campaign on fresh local services; ``wait_scale`` multiplies every wait for a
    service (start, restart, settling), so that a busy machine is given time (the tests pass
    their ``PRIVBANDIT_TEST_TIME_SCALE``). ``config_text``: the services' config file (it must
    hold ``TASKS``; the tests pass theirs, with a smaller device pool)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(workdir) if workdir is not None else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        config = root / "chaos.toml"
        config.write_text(config_text)
        data = root / "data"
        with local_cluster(data, config=config, log_dir=root / "logs",
                           timeout=60.0 * wait_scale) as cluster:
            return asyncio.run(campaign(cluster, data, kills, seed, concurrency, time_limit,
                                        wait_scale))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=8, help="users in flight per task")
    ap.add_argument("--time-limit", type=float, default=1800.0, help="seconds (default 1800)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not 1 <= args.kills <= 10_000 or not 1 <= args.concurrency <= 256:
        ap.error("--kills must be 1..10000 and --concurrency 1..256")
    tally = run_campaign(args.kills, args.seed, args.concurrency, args.time_limit)
    print_tally(tally)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"kills": dict(tally.kills),
                                         "restarts_failed": tally.restarts_failed,
                                         "tasks": tally.tasks, "ok": tally.ok}, indent=2) + "\n")
    return 0 if tally.ok else 1


if __name__ == "__main__":
    sys.exit(main())
