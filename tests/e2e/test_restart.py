"""End-to-end crash test: kill -9 the shuffler and the analyzer in the middle of a run, keep the
users coming (the device's durable outbox absorbs the outage and decisions need no network),
restart both on the same data directories and ports, finish, and show that every accepted
report is counted exactly once:

    reports_counted + reports_pending == reports_accepted == feedbacks_sent

and that the analyzer's store holds each report id once, with nothing rejected.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shared.demo import Driver, fetch_task, reconcile, snapshot, wait_quiescent
from shared.launcher import Cluster, local_cluster
from tests.e2e.conftest import TASKS

pytestmark = pytest.mark.slow

USERS = 700


@pytest.fixture
def fresh_cluster(tmp_path: Path, e2e_config: Path) -> Iterator[Cluster]:
    with local_cluster(tmp_path / "data", config=e2e_config, log_dir=tmp_path / "logs") as c:
        yield c


async def _wait_done(driver: Driver, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while driver.done < n:
        assert time.monotonic() < deadline, f"driver stuck at {driver.done} users"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("threat_model", ["shuffle", "central"])
def test_crash_of_shuffler_and_analyzer_loses_and_duplicates_nothing(
    fresh_cluster: Cluster, threat_model: str
) -> None:
    cluster = fresh_cluster
    urls = cluster.urls
    task_id = TASKS[threat_model]
    events: list[str] = []

    async def chaos(driver: Driver) -> None:
        await _wait_done(driver, USERS // 5)
        # Crash both back-end services with SIGKILL: no shutdown code runs.
        await asyncio.to_thread(cluster.kill, "shuffler")
        await asyncio.to_thread(cluster.kill, "analyzer")
        events.append(f"killed at {driver.done}")
        # Users keep coming while both are down: decide is local, feedback goes to the outbox.
        mark = driver.done
        await _wait_done(driver, mark + USERS // 5)
        async with httpx.AsyncClient() as c:
            st = (await c.get(f"{urls['device']}/v1/status")).json()
        assert st["outbox_pending"] > 0, st
        events.append(f"outbox {st['outbox_pending']} at {driver.done}")
        # The shuffler comes back first and cannot deliver its batches (analyzer still down) ...
        await asyncio.to_thread(cluster.restart, "shuffler")
        await _wait_done(driver, driver.done + USERS // 10)
        # ... then the analyzer, on its old store and key.
        await asyncio.to_thread(cluster.restart, "analyzer")
        events.append(f"restarted at {driver.done}")

    async def run() -> tuple[Driver, dict]:
        task = await fetch_task(urls["analyzer"], task_id)
        async with httpx.AsyncClient(timeout=10) as c:
            before = await snapshot(urls, task_id, c)
        driver = Driver(urls["device"], task, USERS, concurrency=4, seed=11)
        result, _ = await asyncio.gather(driver.run(), chaos(driver))
        after = await wait_quiescent(urls, task_id, task.batch_size, timeout=90)
        return driver, reconcile(result.feedbacks_sent, before, after)

    driver, rec = asyncio.run(run())
    assert len(events) == 3, events
    assert driver.feedbacks_sent == USERS
    assert rec["consistent"], (rec, events)
    assert rec["reports_accepted"] == USERS
    assert rec["reports_counted"] + rec["reports_pending"] == USERS

    # The analyzer's durable store: each counted report id exactly once, nothing rejected,
    # and the per-batch counts add up to the total.
    db = Path(cluster.data_dir) / "analyzer" / "analyzer.sqlite3"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        ids, distinct = conn.execute(
            "SELECT COUNT(*), COUNT(DISTINCT report_id) FROM report_ids WHERE task = ?",
            (task_id,),
        ).fetchone()
        counted, rejected, batches = conn.execute(
            "SELECT reports_counted, rejected, batches FROM tasks WHERE task = ?", (task_id,)
        ).fetchone()
        per_batch = conn.execute(
            "SELECT COALESCE(SUM(counted), 0) FROM batches WHERE task = ?", (task_id,)
        ).fetchone()[0]
    assert ids == distinct == counted == per_batch == rec["reports_counted"]
    assert rejected == 0
    assert batches == rec["batches"]


def test_crash_of_the_device_loses_and_duplicates_nothing(fresh_cluster: Cluster) -> None:
    """kill -9 the device mid-run and restart it: its outbox and open decisions are durable, a
    feedback whose answer was lost in the crash is retried and recognised (409 after a retry
    means it was recorded), so the counts still reconcile exactly."""
    cluster = fresh_cluster
    urls = cluster.urls
    task_id = TASKS["shuffle"]
    events: list[str] = []

    async def chaos(driver: Driver) -> None:
        for fraction in (0.3, 0.6):
            await _wait_done(driver, int(USERS * fraction))
            await asyncio.to_thread(cluster.kill, "device")
            events.append(f"device killed at {driver.done}")
            await asyncio.to_thread(cluster.restart, "device")

    async def run() -> tuple[Driver, dict]:
        task = await fetch_task(urls["analyzer"], task_id)
        async with httpx.AsyncClient(timeout=10) as c:
            before = await snapshot(urls, task_id, c)
        driver = Driver(urls["device"], task, USERS, concurrency=4, seed=12)
        result, _ = await asyncio.gather(driver.run(), chaos(driver))
        after = await wait_quiescent(urls, task_id, task.batch_size, timeout=90)
        return driver, reconcile(result.feedbacks_sent, before, after)

    driver, rec = asyncio.run(run())
    assert len(events) == 2, events
    assert driver.errors > 0  # the crashes were felt by the users' requests
    assert driver.feedbacks_sent == USERS
    assert rec["consistent"], (rec, events)
    assert rec["reports_accepted"] == USERS
