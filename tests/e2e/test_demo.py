"""End-to-end: simulated users over HTTP through device → shuffler → analyzer (real processes),
with exact reconciliation of the three services' counts, for every threat model and for
ddp-linucb over the secure sum, all on the e2e package's shared ``cluster``. (The ``privbandit
demo`` and ``privbandit up`` commands, which start services of their own:
``tests/e2e/test_demo_command.py``.)"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import tomllib

import httpx
import pytest

from privbandit.demo import DemoOptions, run_demo_against
from privbandit.launcher import Cluster
from tests.helpers import (
    BATCH,
    E2E_CONFIG,
    TASKS,
    analyzer_totals,
    deadline,
    patience,
)

pytestmark = pytest.mark.slow

USERS = 300
DDP_TASK = "small-ddp"
L = 20  # the e2e config's batch length of small-ddp


@pytest.mark.parametrize("threat_model", ["ldp", "shuffle", "central"])
def test_demo_reconciles_exactly(cluster: Cluster, threat_model: str) -> None:
    opts = DemoOptions(threat_model, users=USERS, concurrency=4, seed=7, progress=False,
                       settle_timeout=patience(60))
    out = asyncio.run(run_demo_against(cluster.urls, TASKS[threat_model], opts))
    rec = out["reconciliation"]
    l = BATCH[threat_model]
    assert rec["consistent"], rec
    assert rec["feedbacks_sent"] == USERS
    assert rec["reports_accepted"] == USERS
    assert rec["reports_pending_before"] == 0  # each task is driven once on this cluster
    assert rec["reports_counted"] + rec["reports_pending"] == USERS
    # Only whole batches of exactly l are counted.
    assert rec["reports_counted"] == l * rec["batches"]
    if l == 1:
        assert rec["reports_pending"] == 0
    assert rec["model_versions"] >= 1
    # The analyzer's own totals agree with the shuffler's queue (absolute, not just deltas).
    status = httpx.get(f"{cluster.urls['shuffler']}/v1/status").json()
    queue = next(q for q in status["tasks"] if q["task"] == TASKS[threat_model])
    privacy = httpx.get(
        f"{cluster.urls['analyzer']}/v1/tasks/{TASKS[threat_model]}/privacy"
    ).json()
    assert privacy["reports_refused"] == rec["reports_refused"] == 0  # only honest devices
    assert privacy["reports_counted"] + queue["pending"] == queue["accepted"]
    assert queue["pending"] < l
    assert queue["batches_formed"] == queue["batches_acknowledged"] == privacy["batches"]
    # The device's counters agree too, and its model catches up with the analyzer's (the
    # broadcast is asynchronous, so allow it a moment).
    until = deadline(10)
    while True:
        device = httpx.get(f"{cluster.urls['device']}/v1/status").json()
        if device["tasks"][TASKS[threat_model]] == privacy["model_version"]:
            break
        assert time.monotonic() < until, (device, privacy["model_version"])
        time.sleep(0.1)
    assert device["outbox_pending"] == 0
    # spec §6 fields
    assert out["privacy"]["threat_model"] == threat_model
    for key in ("ldp_epsilon", "ldp_delta", "central_epsilon", "central_delta", "rdp_alpha",
                "rdp_epsilon", "accounting"):
        assert key in out["privacy"]
    curve = out["regret_curve"]
    assert curve[-1] == [USERS, out["final_regret"]]
    assert all(b[0] > a[0] and b[1] >= a[1] for a, b in zip(curve, curve[1:], strict=False))
    assert 0 <= out["final_regret"] <= USERS
    assert out["users_per_second"] > 0
    assert out["params"]["d"] == 3 and out["params"]["K"] == 5


def test_device_follows_the_sse_broadcast(cluster: Cluster) -> None:
    """Against the real analyzer the device subscribes to every task's model stream (it falls
    back to ETag polling only when a stream fails): linear, multi-armed and BCO tasks alike."""
    every_task = sorted(t["id"] for t in tomllib.loads(E2E_CONFIG)["tasks"])
    assert set(TASKS.values()) < set(every_task)
    until = deadline(10)
    while True:
        health = httpx.get(f"{cluster.urls['device']}/healthz").json()
        if health["streaming"] == every_task:
            break
        assert time.monotonic() < until, health
        time.sleep(0.1)


def test_repeated_demo_on_running_services_reconciles(cluster: Cluster) -> None:
    """A second run on the same services starts with reports left pending by the first; they
    fill this run's batches, and the reconciliation accounts for them."""
    runs = []
    for seed in (1, 2):
        opts = DemoOptions("shuffle", users=110, concurrency=3, seed=seed, progress=False)
        runs.append(asyncio.run(run_demo_against(cluster.urls, TASKS["shuffle"], opts)))
    first, second = (r["reconciliation"] for r in runs)
    assert first["consistent"] and second["consistent"], (first, second)
    assert second["reports_pending_before"] == first["reports_pending"]
    assert (second["reports_counted"] + second["reports_pending"]
            == 110 + second["reports_pending_before"])
    assert second["reports_counted"] % 20 == 0


def test_ddp_demo_reconciles_exactly(cluster: Cluster) -> None:
    """The demo's users on ``small-ddp`` of the e2e deployment (the package's shared ``cluster``:
    no other test drives that task): ddp-linucb over real HTTP between real processes. Devices
    send their rounded statistics as Prio3 shares, the shuffler and the analyzer verify them,
    each adds its Skellam noise to its aggregate share of l = 20, and the analyzer learns only
    each noisy batch sum: the counts
    reconcile exactly as for sblb's secure sum, and the ledger is the distributed-DP one
    (central (1, 1e-6), no local ε). (``privbandit demo --task`` on fresh services, with its
    ``aggregation_overridden``: ``test_demo_ddp_runs_its_schedule_end_to_end`` in
    ``test_secure_sum.py``.)"""
    users = 250
    opts = DemoOptions("shuffle", users=users, concurrency=4, seed=5, progress=False,
                       settle_timeout=patience(60))
    out = asyncio.run(run_demo_against(cluster.urls, DDP_TASK, opts))
    assert out["task"] == DDP_TASK and out["algo"] == "ddp-linucb"
    # (aggregation_overridden is the CLI's: asserted on the demo-ddp CLI run)
    assert out["aggregation"] == "secure-sum"
    assert out["secure_sum"] == "prio3"
    assert out["params"]["d"] == 3 and out["params"]["K"] == 5 and out["params"]["batch_size"] == L
    rec = out["reconciliation"]
    assert rec["consistent"], rec
    assert rec["reports_pending_before"] == 0  # the task is driven once on this cluster
    assert rec["feedbacks_sent"] == rec["reports_accepted"] == users
    assert (rec["reports_counted"], rec["reports_pending"], rec["batches"]) == (240, 10, 12)
    assert rec["model_versions"] >= 1 and rec["reports_refused"] == 0
    privacy = out["privacy"]
    assert privacy["aggregation"] == "secure-sum" and privacy["threat_model"] == "shuffle"
    assert privacy["ldp_epsilon"] is None
    assert privacy["central_delta"] == 1e-6 and 0.99 < privacy["central_epsilon"] <= 1.0
    # Issue 40's design: the aggregators add the noise, no share on the devices; each observer
    # covered by the noise it did not add, the public by both.
    assert privacy["honest_shares"] is None and "Skellam" in privacy["accounting"]
    assert privacy["noise"] == "aggregators"
    observers = privacy["observers"]
    assert observers["analyzer"]["central_epsilon"] == privacy["central_epsilon"]
    assert observers["public"]["central_epsilon"] < privacy["central_epsilon"]
    assert 0 <= out["final_regret"] <= users and out["users_per_second"] > 0
    totals = analyzer_totals(cluster.data_dir, DDP_TASK)
    assert totals["per_batch"] == [L] * 12 and totals["counted"] == 240
    assert totals["report_ids"] == totals["distinct_report_ids"] == 240
    assert totals["rejected"] == 0
    # The shuffler keeps nothing of the task's acknowledged batches (its other tasks' rows are
    # other tests' business on this shared deployment).
    db = cluster.data_dir / "shuffler" / "shuffler.sqlite3"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        assert conn.execute(
            "SELECT COUNT(*) FROM batch_reports r JOIN batches b ON b.batch_id = r.batch_id "
            "WHERE b.task = ?", (DDP_TASK,)).fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM batches WHERE task = ?",
                            (DDP_TASK,)).fetchone()[0] == 12
