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

import httpx
import pytest

from privbandit.launcher import Cluster
from privbandit.shared.core.schedule import BatchSchedule
from tests.helpers import (
    CRASH_SCHEDULE,
    TASKS,
    analyzer_totals,
    assert_pass_through_crash_safe,
    patience,
    run_with_backend_crash,
    run_with_device_crashes,
)

pytestmark = pytest.mark.slow

USERS = 700


# Pass-through tasks of the multi-armed and BCO kinds (issue 8 item 5, issue 12 item 3): each is
# its own batch, so every accepted report is counted. They share the SQLite crash.
ARM_AND_BCO_TASKS = ["small-heldp", "small-ldp-mab", "small-adar-ucb", "small-ldp-bco2"]
# What ``store_cluster`` serves: the tasks the test drives.
DRIVEN_TASKS = [TASKS["shuffle"], TASKS["central"], *ARM_AND_BCO_TASKS]


def test_crashes_of_the_backend_then_the_device_lose_and_duplicate_nothing(
    store_cluster: Cluster,
) -> None:
    """Once per store, for every threat model's task at once (one crash, users of both). The
    shuffle task (sblb over HPKE reports) is in the middle of its growing schedule when the
    crash comes (``store_cluster``; on PostgreSQL one of two shuffler replicas is killed): the
    batches are the schedule's lengths in order, each once, and the restarted analyzer
    announces the next one. On SQLite with users of every task of ``ARM_AND_BCO_TASKS`` in the
    same crash: nothing lost or duplicated there either, and a restarted analyzer publishes
    exactly the models it had. Then the device's crashes on the same deployment
    (``assert_device_crash_safe``): one start per store serves both (a deployment's start costs
    seconds of CPU on every service)."""
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
    # The schedule: 700 reports fill 20 + 40 + 80 + 160 + 160 + 160 = 620, 80 wait for a 160.
    rec = runs[TASKS["shuffle"]][1]
    sizes = BatchSchedule.parse(CRASH_SCHEDULE).sizes(USERS)
    assert (rec["reports_counted"], rec["reports_pending"], rec["batches"]) == (
        sum(sizes), USERS - sum(sizes), len(sizes)) == (620, 80, 6)
    totals = analyzer_totals(store_cluster.data_dir, TASKS["shuffle"], store=store_cluster.store)
    assert sorted(totals["per_batch"]) == sorted(sizes)
    assert rec["reports_refused"] == 0
    with httpx.Client(base_url=store_cluster.urls["analyzer"], timeout=patience(10)) as c:
        model = c.get(f"/v1/tasks/{TASKS['shuffle']}/model").json()
    assert model["batch_size"] == 160
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
    _, rec, _ = run_with_device_crashes(cluster, TASKS["shuffle"], USERS, (0.3, 0.6),
                                        concurrency=4, seed=12)
    assert rec["reports_accepted"] == USERS
