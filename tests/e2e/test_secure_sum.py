"""End-to-end secure-sum: real device, shuffler and analyzer processes on loopback, with 2048-bit
Paillier keys (the production path: the services offer no setting for smaller ones).

The e2e config's shuffle task (d = 3, K = 5, l = 20) is configured with the ``reports``
transport; ``privbandit demo --aggregation secure-sum`` runs it with ``secure-sum`` instead, and the
crash test starts a deployment from the same kind of derived config. Devices encrypt their
randomized counts, the shuffler releases only encrypted batch sums, the analyzer decrypts only
those and counts l reports per sum, so the counts must reconcile exactly as for HPKE reports.
The config's ``small-ddp`` task (ddp-linucb, l = 20) runs the same way with signed values.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from privbandit.demo import derived_config
from privbandit.launcher import Cluster, local_cluster
from tests.helpers import TASKS, analyzer_totals, cli, patience, run_with_backend_crash

pytestmark = pytest.mark.slow

TASK = TASKS["shuffle"]
L = 20


def test_secure_sum_demo_reconciles_exactly(tmp_path: Path, e2e_config: Path) -> None:
    users = 250
    out_json, data = tmp_path / "demo.json", tmp_path / "data"
    code = cli([
        "demo", "--threat-model", "shuffle", "--aggregation", "secure-sum", "--users", str(users),
        "--concurrency", "4", "--config", str(e2e_config), "--data-dir", str(data),
        "--no-progress", "--seed", "5", "--json", str(out_json),
    ])
    assert code == 0
    out = json.loads(out_json.read_text())
    assert out["task"] == TASK and out["aggregation"] == "secure-sum"
    assert out["aggregation_overridden"] is True
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
    # What the stores kept: the analyzer counted l per decrypted sum and holds the report id of
    # each counted report (from its tag), each once; the shuffler keeps nothing of an
    # acknowledged batch.
    totals = analyzer_totals(data, TASK)
    assert totals["per_batch"] == [L] * 12 and totals["counted"] == 240
    assert totals["report_ids"] == totals["distinct_report_ids"] == 240
    assert totals["rejected"] == 0 and rec["reports_refused"] == 0
    db = data / "shuffler" / "shuffler.sqlite3"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT COUNT(*) FROM batch_reports").fetchone()[0] == 0
    key = json.loads((data / "analyzer" / "paillier.json").read_text())
    assert key["key_bits"] == 2048


@pytest.fixture
def secure_sum_cluster(tmp_path: Path, e2e_config: Path) -> Iterator[Cluster]:
    """A fresh deployment whose shuffle task uses secure-sum aggregation."""
    config = derived_config(e2e_config, TASK, tmp_path / "secure-sum.toml",
                            aggregation="secure-sum")
    with local_cluster(tmp_path / "data", config=config, log_dir=tmp_path / "logs",
                       timeout=patience(60)) as c:
        yield c


def test_crash_of_shuffler_and_analyzer_counts_every_secure_sum_report_once(
    secure_sum_cluster: Cluster,
) -> None:
    """kill -9 of the shuffler and the analyzer mid-run: the device's retries re-send the stored
    ciphertexts (duplicates are dropped by the shuffler), the shuffler re-fetches the analyzer's
    (persisted) Paillier key, and every accepted report ends up in exactly one counted sum or
    still pending: counted + pending == accepted == feedbacks."""
    users = 600
    runs, events = run_with_backend_crash(secure_sum_cluster, {TASK: 13}, users)
    driver, rec = runs[TASK]
    assert driver.feedbacks_sent == users
    assert rec["consistent"], (rec, events)
    assert rec["reports_accepted"] == users
    assert rec["reports_counted"] + rec["reports_pending"] == users
    assert rec["reports_counted"] == L * rec["batches"] and rec["reports_pending"] < L
    totals = analyzer_totals(secure_sum_cluster.data_dir, TASK)
    assert totals["per_batch"] == [L] * rec["batches"]
    assert totals["counted"] == sum(totals["per_batch"]) == rec["reports_counted"]
    assert totals["rejected"] == 0 and rec["reports_refused"] == 0
    assert totals["report_ids"] == totals["distinct_report_ids"] == rec["reports_counted"]


DDP_TASK = "small-ddp"


def test_ddp_demo_reconciles_exactly(tmp_path: Path, e2e_config: Path) -> None:
    """``privbandit demo --task small-ddp``: ddp-linucb over real HTTP between real processes.
    Devices add exact Skellam shares to their rounded statistics and encrypt the signed values,
    the shuffler multiplies l = 20 of them, the analyzer decrypts only each batch sum: the counts
    reconcile exactly as for sblb's secure sum, and the ledger is the distributed-DP one
    (central (1, 1e-6), no local ε)."""
    users = 250
    out_json, data = tmp_path / "demo.json", tmp_path / "data"
    code = cli([
        "demo", "--task", DDP_TASK, "--users", str(users), "--concurrency", "4",
        "--config", str(e2e_config), "--data-dir", str(data), "--no-progress", "--seed", "5",
        "--json", str(out_json),
    ])
    assert code == 0
    out = json.loads(out_json.read_text())
    assert out["task"] == DDP_TASK and out["algo"] == "ddp-linucb"
    assert out["aggregation"] == "secure-sum" and out["aggregation_overridden"] is False
    assert out["params"]["d"] == 3 and out["params"]["K"] == 5 and out["params"]["batch_size"] == L
    rec = out["reconciliation"]
    assert rec["consistent"], rec
    assert rec["feedbacks_sent"] == rec["reports_accepted"] == users
    assert (rec["reports_counted"], rec["reports_pending"], rec["batches"]) == (240, 10, 12)
    assert rec["model_versions"] >= 1 and rec["reports_refused"] == 0
    privacy = out["privacy"]
    assert privacy["aggregation"] == "secure-sum" and privacy["threat_model"] == "shuffle"
    assert privacy["ldp_epsilon"] is None
    assert privacy["central_delta"] == 1e-6 and 0.99 < privacy["central_epsilon"] <= 1.0
    assert privacy["honest_shares"] == L and "Skellam" in privacy["accounting"]
    assert 0 <= out["final_regret"] <= users and out["users_per_second"] > 0
    totals = analyzer_totals(data, DDP_TASK)
    assert totals["per_batch"] == [L] * 12 and totals["counted"] == 240
    assert totals["report_ids"] == totals["distinct_report_ids"] == 240
    assert totals["rejected"] == 0
    db = data / "shuffler" / "shuffler.sqlite3"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT COUNT(*) FROM batch_reports").fetchone()[0] == 0
