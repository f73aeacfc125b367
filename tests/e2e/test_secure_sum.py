"""End-to-end secure-sum: real device, shuffler and analyzer processes on loopback, with 2048-bit
Paillier keys (the production path: the services offer no setting for smaller ones).

The e2e config's shuffle task (d = 3, K = 5, l = 20) is configured with the ``reports``
transport; ``privbandit demo --aggregation secure-sum`` runs it with ``secure-sum`` instead, and the
crash test starts a deployment from the same kind of derived config. A secure-sum task runs the
prio3 transport unless it says ``secure_sum = "paillier"`` (issue 23): devices secret-share their
randomized counts between shuffler and analyzer with a validity proof, the two verify each report
jointly and the analyzer learns only the sum of the valid ones of each batch; the Paillier
transport (``test_paillier_secure_sum_demo_reconciles_exactly``) releases encrypted batch sums.
Either way the counts must reconcile exactly as for HPKE reports.
The config's ``small-ddp`` task (ddp-linucb, l = 20) runs the same way with signed values (on the
e2e package's shared ``cluster``: ``tests/e2e/test_demo.py``); with a growing batch schedule
(issue 22) and the centered encoding in the crash test, and the demo's own ``demo-ddp`` at its
defaults (centered; a short first batch) in ``test_demo_ddp_runs_its_schedule_end_to_end``.
"""

from __future__ import annotations

import json
import sqlite3
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import tomli_w

from privbandit.demo import derived_config
from privbandit.launcher import Cluster
from privbandit.shared.core.environments.linear import LinearEnvironment
from privbandit.shared.core.policies.practical import DDP_LINUCB
from privbandit.shared.core.schedule import BatchSchedule
from privbandit.shared.settings import DEFAULT_CONFIG
from tests.helpers import (
    CRASH_SCHEDULE,
    SBLB_SCHEDULED,
    TASKS,
    analyzer_totals,
    cli,
    cluster_serving,
    only_tasks,
    patience,
    run_with_backend_crash,
    with_policy,
)

pytestmark = pytest.mark.slow

TASK = TASKS["shuffle"]
L = 20


def test_secure_sum_demo_reconciles_exactly(tmp_path: Path, e2e_config: Path) -> None:
    """``--aggregation secure-sum`` runs the default secure-sum transport, prio3 (issue 23): the
    shuffler and the analyzer verify every report jointly and count the valid ones; no
    Paillier key is made."""
    users = 250
    out_json, data = tmp_path / "demo.json", tmp_path / "data"
    # The demo keeps the whole config in a data directory of the user's: the driven task only.
    config = tmp_path / "shuffle.toml"
    config.write_text(only_tasks(e2e_config.read_text(), [TASK]))
    code = cli([
        "demo", "--threat-model", "shuffle", "--aggregation", "secure-sum", "--users", str(users),
        "--concurrency", "4", "--config", str(config), "--data-dir", str(data),
        "--no-progress", "--seed", "5", "--json", str(out_json),
    ])
    assert code == 0
    out = json.loads(out_json.read_text())
    assert out["aggregation_overridden"] is True and out["secure_sum"] == "prio3"
    check_sblb_secure_sum_demo(out, data, users)
    assert not (data / "analyzer" / "paillier.json").exists()


def test_paillier_secure_sum_demo_reconciles_exactly(tmp_path: Path, e2e_config: Path) -> None:
    """The same run over the Paillier transport (``secure_sum = "paillier"``), with a
    2048-bit key."""
    users = 250
    config = derived_config(e2e_config, TASK, tmp_path / "paillier.toml",
                            aggregation="secure-sum")
    data_toml = tomllib.loads(only_tasks(config.read_text(), [TASK]))
    for task in data_toml["tasks"]:
        if task["id"] == TASK:
            task["secure_sum"] = "paillier"
    config.write_text(tomli_w.dumps(data_toml))
    out_json, data = tmp_path / "demo.json", tmp_path / "data"
    code = cli([
        "demo", "--task", TASK, "--users", str(users), "--concurrency", "4",
        "--config", str(config), "--data-dir", str(data), "--no-progress", "--seed", "5",
        "--json", str(out_json),
    ])
    assert code == 0
    out = json.loads(out_json.read_text())
    assert out["secure_sum"] == "paillier"
    check_sblb_secure_sum_demo(out, data, users)
    key = json.loads((data / "analyzer" / "paillier.json").read_text())
    assert key["key_bits"] == 2048


def check_sblb_secure_sum_demo(out: dict[str, Any], data: Path, users: int) -> None:
    assert out["task"] == TASK and out["aggregation"] == "secure-sum"
    assert out["params"]["d"] == 3 and out["params"]["K"] == 5 and out["params"]["batch_size"] == L
    rec = out["reconciliation"]
    assert rec["consistent"], rec
    assert rec["feedbacks_sent"] == rec["reports_accepted"] == users
    # Fresh services: 250 = 12 batch sums of l = 20, counted as 20 reports each, + 10 pending.
    assert (rec["reports_counted"], rec["reports_pending"], rec["batches"]) == (240, 10, 12)
    assert rec["model_versions"] >= 1
    # The sum-only ledger: the analyzer saw batch sums, not reports.
    privacy = out["privacy"]
    assert privacy["aggregation"] == "secure-sum" and privacy["threat_model"] == "shuffle"
    assert privacy["ldp_epsilon"] == 8.0
    assert 0 < privacy["central_epsilon"] <= privacy["ldp_epsilon"]
    assert "batch sums" in privacy["accounting"]
    assert 0 <= out["final_regret"] <= users and out["users_per_second"] > 0
    # What the stores kept: the analyzer counted l per sum and holds the report id of each
    # counted report (its tag's, or its Prio3 nonce), each once; the shuffler keeps nothing of
    # an acknowledged batch.
    totals = analyzer_totals(data, TASK)
    assert totals["per_batch"] == [L] * 12 and totals["counted"] == 240
    assert totals["report_ids"] == totals["distinct_report_ids"] == 240
    assert totals["rejected"] == 0 and rec["reports_refused"] == 0
    db = data / "shuffler" / "shuffler.sqlite3"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT COUNT(*) FROM batch_reports").fetchone()[0] == 0


DDP_TASK = "small-ddp"
# small-ddp and small-shuffle (sblb over the secure sum, ε0 from a central target) in the crash
# test: the kill, a fifth of the way into 600 users, falls after batch 1 and before the cap.
SCHEDULE = BatchSchedule.parse(CRASH_SCHEDULE)


def run_demo(task_id: str, users: int, config: Path, data: Path, seed: int) -> dict[str, Any]:
    """``privbandit demo --task`` at concurrency 4 on fresh services in ``data``: its JSON."""
    out_json = data.parent / f"{task_id}-demo.json"
    code = cli([
        "demo", "--task", task_id, "--users", str(users), "--concurrency", "4",
        "--config", str(config), "--data-dir", str(data), "--no-progress", "--seed", str(seed),
        "--json", str(out_json),
    ])
    assert code == 0
    return dict(json.loads(out_json.read_text()))


def shuffler_batches(data_dir: Path, task_id: str) -> dict[int, int]:
    """The shuffler's batches of a task (SQLite): schedule index → length."""
    db = data_dir / "shuffler" / "shuffler.sqlite3"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT idx, size FROM batches WHERE task = ?", (task_id,)).fetchall()
    out = dict(rows)
    assert len(out) == len(rows), f"two batches share an index: {rows}"
    return out


@pytest.fixture
def secure_sum_cluster(tmp_path: Path, e2e_config: Path) -> Iterator[Cluster]:
    """A fresh deployment whose shuffle task (sblb) uses secure-sum aggregation, and whose
    ``small-ddp`` and ``small-shuffle`` tasks follow ``CRASH_SCHEDULE`` (sblb's ε0 from a central
    target, sized by the sum-only accountant; ddp-linucb in the centered encoding — "auto" with
    the linear contexts' intercept 1/√2 —, its default, as ``demo-ddp``)."""
    config = derived_config(e2e_config, TASK, tmp_path / "secure-sum.toml",
                            aggregation="secure-sum")
    config = with_policy(config, DDP_TASK, config, batch_schedule=CRASH_SCHEDULE,
                         encoding="auto", intercept=LinearEnvironment.intercept)
    config = with_policy(config, TASK, config, **SBLB_SCHEDULED, accountant="secure-sum")
    with cluster_serving(tmp_path, config, config.read_text(), [TASK, DDP_TASK]) as c:
        yield c


def test_crash_of_shuffler_and_analyzer_counts_every_secure_sum_report_once(
    secure_sum_cluster: Cluster,
) -> None:
    """kill -9 of the shuffler and the analyzer mid-run (both tasks on the default prio3
    transport): the device's retries re-send the stored reports (a nonce already held is a
    duplicate at the shuffler), a batch whose verification or aggregate was cut off is verified
    again on the next attempt, and every accepted report ends up in exactly one counted sum or
    still pending: counted + pending == accepted == feedbacks.

    ``small-ddp`` and ``small-shuffle`` (sblb, ε0 following the lengths) run at once with a
    growing schedule, killed in its middle (after batch 1, before the cap): the restarted
    shuffler goes on from its stored batch index, so batch k is l_k long for every k, once, and
    the restarted analyzer announces the right next length."""
    users = 600
    data = secure_sum_cluster.data_dir
    runs, events = run_with_backend_crash(secure_sum_cluster, {TASK: 13, DDP_TASK: 17}, users)
    for task_id, (driver, rec) in runs.items():
        assert driver.feedbacks_sent == users
        assert rec["consistent"], (task_id, rec, events)
        assert rec["reports_accepted"] == users
        assert rec["reports_counted"] + rec["reports_pending"] == users
        totals = analyzer_totals(data, task_id)
        assert totals["counted"] == sum(totals["per_batch"]) == rec["reports_counted"]
        assert totals["rejected"] == 0 and rec["reports_refused"] == 0
        assert totals["report_ids"] == totals["distinct_report_ids"] == rec["reports_counted"]
        # The schedule: 600 reports fill 20 + 40 + 80 + 160 + 160 = 460, 140 wait for a 160.
        sizes = SCHEDULE.sizes(users)
        assert (rec["reports_counted"], rec["reports_pending"], rec["batches"]) == (
            sum(sizes), users - sum(sizes), len(sizes)) == (460, 140, 5), task_id
        assert sorted(totals["per_batch"]) == sorted(sizes), task_id
        assert shuffler_batches(data, task_id) == dict(enumerate(sizes)), task_id
    with httpx.Client(base_url=secure_sum_cluster.urls["shuffler"], timeout=patience(10)) as c:
        status = {t["task"]: t for t in c.get("/v1/status").json()["tasks"]}
    with httpx.Client(base_url=secure_sum_cluster.urls["analyzer"], timeout=patience(10)) as c:
        for task_id in (TASK, DDP_TASK):
            assert status[task_id]["refused_oversized"] == 0
            assert status[task_id]["next_batch_size"] == SCHEDULE.size(5) == 160
            assert c.get(f"/v1/tasks/{task_id}/model").json()["batch_size"] == 160
        # sblb's ledger: one row per length, each within the central target, ε0 growing.
        ledger = c.get(f"/v1/tasks/{TASK}/privacy").json()["ledger"]
        ddp = c.get(f"/v1/tasks/{DDP_TASK}/privacy").json()["ledger"]
    assert "encoding centered" in ddp["accounting"]
    assert [r["batch_size"] for r in ddp["per_batch"]] == [20, 40, 80, 160]
    assert all(r["central_epsilon"] <= 1.0 for r in ddp["per_batch"])
    rows = ledger["per_batch"]
    assert [r["batch_size"] for r in rows] == [20, 40, 80, 160]
    assert all(r["central_epsilon"] <= 1.0 for r in rows)
    assert [r["eps0"] for r in rows] == sorted(r["eps0"] for r in rows)
    assert ledger["worst_batch_epsilon"] == max(r["central_epsilon"] for r in rows)


DEMO_DDP = "demo-ddp"
# demo-ddp at its defaults but a first batch of 50 (its own is sized from the noise, ≈ 570 at
# ε = 1): 900 users cross four batches, 50 + 100 + 200 + 400, and wait for the fifth.
DEMO_SCHEDULE = BatchSchedule.parse("geometric:50,2,400")


def test_demo_ddp_runs_its_schedule_end_to_end(tmp_path: Path) -> None:
    """``privbandit demo --task demo-ddp`` with the packaged defaults (ddp-linucb's practical
    ones: the centered encoding with the linear contexts' intercept, noise-calibrated
    regularizer, the practical width, a growing schedule): real processes over HTTP, exact
    reconciliation, batches of the scheduled lengths, the ledger of the centered encoding, and a
    regret where the in-process simulator lands on the same users."""
    users = 900
    packaged = tomllib.loads(DEFAULT_CONFIG.read_text())
    policy = next(t for t in packaged["tasks"] if t["id"] == DEMO_DDP)["policy"]
    assert policy["batch_schedule"].startswith("geometric:auto,")
    assert (policy["regularizer"], policy["confidence_scale"]) == (
        "noise", DDP_LINUCB["confidence_scale"])
    assert (policy["encoding"], policy["intercept"]) == ("auto", LinearEnvironment.intercept)
    config = with_policy(DEFAULT_CONFIG, DEMO_DDP, tmp_path / "demo-ddp.toml", only=True,
                         batch_schedule=DEMO_SCHEDULE.spec())
    data = tmp_path / "data"
    out = run_demo(DEMO_DDP, users, config, data, seed=3)
    assert out["task"] == DEMO_DDP and out["aggregation_overridden"] is False
    assert out["params"]["batch_schedule"] == DEMO_SCHEDULE.spec()
    assert (out["params"]["encoding"], out["params"]["u_weight"]) == ("centered", 1.5)
    rec = out["reconciliation"]
    assert rec["consistent"], rec
    sizes = DEMO_SCHEDULE.sizes(users)
    assert sizes == [50, 100, 200, 400]
    assert rec["feedbacks_sent"] == rec["reports_accepted"] == users
    assert (rec["reports_counted"], rec["reports_pending"], rec["batches"]) == (
        sum(sizes), users - sum(sizes), len(sizes))
    assert rec["reports_refused"] == 0
    totals = analyzer_totals(data, DEMO_DDP)
    assert sorted(totals["per_batch"]) == sizes and totals["rejected"] == 0
    assert totals["report_ids"] == totals["distinct_report_ids"] == sum(sizes)
    assert shuffler_batches(data, DEMO_DDP) == dict(enumerate(sizes))
    # The ledger: every batch central (1, 1e-6), the worst over the schedule's lengths.
    privacy = out["privacy"]
    assert privacy["central_delta"] == 1e-6 and 0.99 < privacy["central_epsilon"] <= 1.0
    assert "encoding centered" in privacy["accounting"]
    assert [r["batch_size"] for r in privacy["per_batch"]] == DEMO_SCHEDULE.distinct_sizes()
    # Learning through the services lands where the simulator does on the same users (20 runs):
    # within 4 of their standard deviations (the devices may decide with a model a batch old,
    # and size their share for its length: more noise than the simulator's, never less).
    ref = out["simulator_reference"]
    assert abs(ref["demo_z"]) < 4, ref


DEMO_SHUFFLE = "demo-shuffle"


@pytest.mark.parametrize(("algo", "aggregation"), [("sblb", "secure-sum"),
                                                   ("sblb-fixed", "reports")])
def test_demo_shuffle_runs_its_schedule_end_to_end(
    tmp_path: Path, algo: str, aggregation: str
) -> None:
    """``privbandit demo --task demo-shuffle`` with the packaged practical defaults (a central
    target ε = 1 with ε0 per batch length, the noise-calibrated regularizer, confidence_scale
    0.02; over reports, the reports transport's own: m = 1), as sblb over the secure sum and as
    sblb-fixed over whole HPKE reports, with a first batch of 50 (the packaged one is 1000):
    real processes over HTTP, exact reconciliation, batches of the scheduled lengths, every
    model announcing the next length, the per-batch ledger within the target, and a regret
    where the in-process simulator lands on the same users."""
    users = 900
    packaged = tomllib.loads(DEFAULT_CONFIG.read_text())
    task = next(t for t in packaged["tasks"] if t["id"] == DEMO_SHUFFLE)
    policy = task["policy"]
    assert (task["aggregation"], policy["algo"]) == ("secure-sum", "sblb")
    assert (policy["epsilon"], policy["regularizer"], policy["confidence_scale"]) == (
        1.0, "noise", 0.02)
    assert policy["batch_schedule"] == "geometric:1000,1.25,4096" and policy["m"] == 4
    config = derived_config(DEFAULT_CONFIG, DEMO_SHUFFLE, tmp_path / "demo-shuffle.toml",
                            aggregation=aggregation)
    config = with_policy(config, DEMO_SHUFFLE, config, only=True, algo=algo,
                         batch_schedule=DEMO_SCHEDULE.spec())
    data = tmp_path / "data"
    out = run_demo(DEMO_SHUFFLE, users, config, data, seed=3)
    assert out["algo"] == algo and out["aggregation"] == aggregation
    assert out["params"]["batch_schedule"] == DEMO_SCHEDULE.spec()
    assert out["params"]["m"] == (4 if aggregation == "secure-sum" else 1)
    rec = out["reconciliation"]
    assert rec["consistent"], rec
    sizes = DEMO_SCHEDULE.sizes(users)
    assert rec["feedbacks_sent"] == rec["reports_accepted"] == users
    assert (rec["reports_counted"], rec["reports_pending"], rec["batches"]) == (
        sum(sizes), users - sum(sizes), len(sizes))
    # A model is published after every batch whose successor has another length (it announces
    # it: ScheduledBatchPolicy._must_publish); after the last, whose successor keeps the cap of
    # 400, only if det Ṽ grew by 1 + η, which the noise decides (not met in 1 of 300 simulator
    # runs of this task).
    changes = sum(DEMO_SCHEDULE.size(k + 1) != s for k, s in enumerate(sizes))
    assert changes == 3
    assert rec["reports_refused"] == 0 and rec["model_versions"] >= changes
    totals = analyzer_totals(data, DEMO_SHUFFLE)
    assert sorted(totals["per_batch"]) == sizes and totals["rejected"] == 0
    assert shuffler_batches(data, DEMO_SHUFFLE) == dict(enumerate(sizes))
    assert out["next_batch_size"] == DEMO_SCHEDULE.size(len(sizes))
    privacy = out["privacy"]
    rows = privacy["per_batch"]
    assert [r["batch_size"] for r in rows] == DEMO_SCHEDULE.distinct_sizes()
    assert all(r["central_epsilon"] <= 1.0 for r in rows) and privacy["central_epsilon"] <= 1.0
    assert privacy["ldp_epsilon"] == max(r["eps0"] for r in rows) == rows[-1]["eps0"]
    # Learning through the services lands where the simulator does on the same users (20 runs):
    # within 4 of their standard deviations (late reports carry a smaller ε0 than the
    # simulator's, never a larger one).
    ref = out["simulator_reference"]
    assert abs(ref["demo_z"]) < 4, ref
