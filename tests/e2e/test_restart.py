"""End-to-end crash test, on each store (SQLite files, and the analyzer and the shuffler on the
real PostgreSQL server): kill -9 the shuffler and the analyzer in the middle of a run, keep the
users coming (the device's durable outbox absorbs the outage and decisions need no network),
restart both on the same data directories and ports, finish, and show that every accepted
report is counted exactly once:

    reports_counted + reports_pending == reports_accepted == feedbacks_sent

and that the analyzer's store holds each report id once, with nothing rejected. One crash serves
every task of a kind at once (their drivers reach each phase together): the linear tasks on each
store, the multi-armed and BCO tasks on SQLite.
"""

from __future__ import annotations

import httpx
import pytest

from privbandit.launcher import Cluster
from privbandit.shared.core.policies.schedule import BatchSchedule
from tests.helpers import (
    CRASH_SCHEDULE,
    TASKS,
    analyzer_totals,
    assert_crash_safe,
    patience,
    run_with_backend_crash,
    run_with_device_crashes,
)

pytestmark = pytest.mark.slow

USERS = 700


def test_crash_of_shuffler_and_analyzer_loses_and_duplicates_nothing(
    store_cluster: Cluster,
) -> None:
    """Once per store, for every threat model's task at once (one crash, users of both). The
    shuffle task (sblb over HPKE reports) is in the middle of its growing schedule when the
    crash comes (``store_cluster``; on PostgreSQL one of two shuffler replicas is killed): the
    batches are the schedule's lengths in order, each once, and the restarted analyzer
    announces the next one."""
    seeds = {TASKS[threat_model]: 11 for threat_model in ("shuffle", "central")}
    runs, events = run_with_backend_crash(store_cluster, seeds, USERS)
    for task_id, (driver, rec) in runs.items():
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


# Pass-through tasks of the multi-armed and BCO kinds (issue 8 item 5, issue 12 item 3): each is
# its own batch, so every accepted report is counted.
ARM_AND_BCO_TASKS = ["small-heldp", "small-ldp-mab", "small-adar-ucb", "small-ldp-bco2"]


def test_crash_of_arm_and_bco_tasks_loses_nothing_and_restart_keeps_the_models(
    fresh_cluster: Cluster,
) -> None:
    """The same crash, on SQLite, with users of every task of ``ARM_AND_BCO_TASKS`` at once:
    nothing lost or duplicated, and a restarted analyzer publishes exactly the models it had."""
    assert_crash_safe(fresh_cluster, {task: 5 for task in ARM_AND_BCO_TASKS}, USERS)


def test_crash_of_the_device_loses_and_duplicates_nothing(store_cluster: Cluster) -> None:
    """kill -9 the device mid-run and restart it: its outbox and open decisions are durable, a
    feedback whose answer was lost in the crash is retried and recognised (409 after a retry
    means it was recorded), so the counts still reconcile exactly."""
    _, rec, _ = run_with_device_crashes(store_cluster, TASKS["shuffle"], USERS, (0.3, 0.6),
                                        concurrency=4, seed=12)
    assert rec["reports_accepted"] == USERS
