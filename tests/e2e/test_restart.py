"""End-to-end crash test, on each store (SQLite files, and the analyzer and the shuffler on the
real PostgreSQL server): kill -9 the shuffler and the analyzer in the middle of a run, keep the
users coming (the device's durable outbox absorbs the outage and decisions need no network),
restart both on the same data directories and ports, finish, and show that every accepted
report is counted exactly once (then, on the same deployment, the device's crash):

    reports_counted + reports_pending == reports_accepted == feedbacks_sent

and that the analyzer's store holds each report id once, with nothing rejected. One crash serves
every task at once (their drivers reach each phase together): the linear tasks on each store,
with the multi-armed and BCO tasks beside them on SQLite.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from privbandit.demo import Driver, fetch_task, reconcile, snapshot, wait_quiescent
from privbandit.demo.driver import REQUEST_RETRIES
from privbandit.launcher import Cluster
from tests.helpers import (
    TASKS,
    analyzer_totals,
    assert_pass_through_crash_safe,
    patience,
    patient_tries,
    run_with_backend_crash,
    wait_done,
)

pytestmark = pytest.mark.slow

USERS = 700


# Pass-through tasks of the multi-armed and BCO kinds (issue 8 item 5, issue 12 item 3): each is
# its own batch, so every accepted report is counted. They share the SQLite crash.
ARM_AND_BCO_TASKS = ["small-heldp", "small-ldp-mab", "small-adar-ucb", "small-ldp-bco2"]


def test_crashes_of_the_backend_then_the_device_lose_and_duplicate_nothing(
    store_cluster: Cluster,
) -> None:
    """Once per store, for every threat model's task at once (one crash, users of both); on
    SQLite with users of every task of ``ARM_AND_BCO_TASKS`` in the same crash: nothing lost or
    duplicated there either, and a restarted analyzer publishes exactly the models it had.
    Then the device's crashes on the same deployment (``assert_device_crash_safe``): one start
    per store serves both (a deployment's start costs seconds of CPU on every service)."""
    seeds = {TASKS[threat_model]: 11 for threat_model in ("shuffle", "central")}
    pass_through = ({task: 5 for task in ARM_AND_BCO_TASKS}
                    if store_cluster.store == "sqlite" else {})
    runs, events = run_with_backend_crash(store_cluster, {**seeds, **pass_through}, USERS)
    for task_id in seeds:
        driver, rec = runs[task_id]
        assert driver.feedbacks_sent == USERS
        assert rec["consistent"], (task_id, rec, events)
        assert rec["reports_accepted"] == USERS
        assert rec["reports_counted"] + rec["reports_pending"] == USERS
        # The analyzer's durable store: each counted report id exactly once, nothing rejected,
        # and the per-batch counts add up to the total.
        totals = analyzer_totals(store_cluster.data_dir, task_id, store=store_cluster.store)
        assert (totals["report_ids"] == totals["distinct_report_ids"] == totals["counted"]
                == sum(totals["per_batch"]) == rec["reports_counted"]), task_id
        assert totals["rejected"] == 0
        assert totals["batches"] == rec["batches"]
    if pass_through:
        assert_pass_through_crash_safe(
            store_cluster, {t: runs[t] for t in pass_through}, events, USERS)
    # After the absolute totals above: the device's users add to the same task.
    assert_device_crash_safe(store_cluster)


def assert_device_crash_safe(cluster: Cluster) -> None:
    """kill -9 the device mid-run and restart it: its outbox and open decisions are durable, a
    feedback whose answer was lost in the crash is retried and recognised (409 after a retry
    means it was recorded), so the counts still reconcile exactly (relative to the counts the
    task had before: the reconciliation's snapshot)."""
    urls = cluster.urls
    task_id = TASKS["shuffle"]
    events: list[str] = []

    async def chaos(driver: Driver) -> None:
        for fraction in (0.3, 0.6):
            await wait_done(driver, int(USERS * fraction))
            await asyncio.to_thread(cluster.kill, "device")
            events.append(f"device killed at {driver.done}")
            await asyncio.to_thread(cluster.restart, "device", patience(60))

    async def run() -> tuple[Driver, dict]:
        task = await fetch_task(urls["analyzer"], task_id)
        async with httpx.AsyncClient(timeout=patience(10)) as c:
            before = await snapshot(urls, task_id, c)
        # The device's restart is felt by the users: their tries must outlast it.
        driver = Driver(urls["device"], task, USERS, concurrency=4, seed=12,
                        request_retries=patient_tries(REQUEST_RETRIES))
        result, _ = await asyncio.gather(driver.run(), chaos(driver))
        after = await wait_quiescent(urls, task_id, task.max_batch, timeout=patience(90))
        return driver, reconcile(result.feedbacks_sent, before, after)

    driver, rec = asyncio.run(run())
    assert len(events) == 2, events
    assert driver.errors > 0  # the crashes were felt by the users' requests
    assert driver.feedbacks_sent == USERS
    assert rec["consistent"], (rec, events)
    assert rec["reports_accepted"] == USERS
