"""End-to-end: the per-person bound (issue 24) holds across kill -9 of the device.

Real processes, real HTTP, the device's real SQLite file. P persons return V times each, C
visits in flight at once (so one person's feedbacks run concurrently), against a task that
bounds each person to k reports; the device is killed with SIGKILL twice around the moment the
persons reach their bound, and restarted on the same data directory. Then exactly P·k reports
left the device — none beyond the bound, none lost — every other feedback was withheld, and

    feedbacks_sent == reports_accepted + feedbacks_withheld
    reports_counted + reports_refused + reports_pending == reports_accepted

with the device's durable per-person counts at exactly k each.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from privbandit.launcher import Cluster
from tests.helpers import E2E_CONFIG, cluster_serving, run_with_device_crashes

pytestmark = pytest.mark.slow

TASK = "small-persons"
PERSONS, VISITS, K = 5, 60, 25
USERS = PERSONS * VISITS  # 300 visits; the bound is reached around visit P·k = 125
CONFIG = E2E_CONFIG + f"""

# Returning users (tests/e2e/test_persons.py): each person at most {K} reports, forever.
[[tasks]]
id = "{TASK}"
threat_model = "ldp"
K = 5
contributions = {{ k = {K} }}
[tasks.policy]
algo = "ldp-linucb"
d = 3
epsilon = 1.0
update_every = 25
"""


@pytest.fixture
def persons_cluster(tmp_path: Path) -> Iterator[Cluster]:
    with cluster_serving(tmp_path, tmp_path / "persons.toml", CONFIG, [TASK]) as c:
        yield c


def test_kill_9_of_the_device_never_lets_a_report_beyond_the_bound_leave(
    persons_cluster: Cluster,
) -> None:
    """The task's contributions are public (``TaskInfo``), the counts reconcile with the
    withheld feedbacks, and exactly P·k reports left the device."""
    cluster = persons_cluster
    # Two crashes around the visit (~42 %) where the persons reach k.
    _, rec, after = run_with_device_crashes(cluster, TASK, USERS, (0.35, 0.45), concurrency=8,
                                            seed=21, persons=PERSONS)
    assert after.per_person is not None and after.per_person["k"] == K
    assert rec["reports_accepted"] == PERSONS * K, rec  # none beyond the bound, none lost
    assert rec["feedbacks_withheld"] == USERS - PERSONS * K
    assert rec["reports_counted"] == PERSONS * K and rec["reports_refused"] == 0
    # The device's durable counts: k for each person, nothing else.
    db = cluster.data_dir / "device" / "device.sqlite3"
    with sqlite3.connect(db) as conn:
        counts = [int(n) for (n,) in conn.execute(
            "SELECT reports FROM person_reports WHERE task = ?", (TASK,))]
    assert counts == [K] * PERSONS


def test_demo_with_returning_users_reconciles_withheld_feedbacks(tmp_path: Path) -> None:
    """``privbandit demo --returning P --contributions K`` on the shuffle task (l = 20): fresh
    services with the bound, P persons of 10 visits each; exactly P·K reports, the rest
    withheld, and the reconciliation holds (sent = accepted + withheld; counted + refused +
    pending = accepted); the JSON states the per-person guarantee beside the per-report one."""
    import json

    from tests.helpers import cli, write_config

    out = tmp_path / "demo.json"
    code = cli(["demo", "--threat-model", "shuffle", "--users", "300", "--returning", "30",
                "--contributions", "4", "--concurrency", "4", "--seed", "5",
                "--config", str(write_config(tmp_path)), "--no-progress", "--json", str(out)])
    data = json.loads(out.read_text())
    rec = data["reconciliation"]
    assert code == 0 and rec["consistent"], rec
    assert rec["feedbacks_sent"] == 300 and rec["feedbacks_withheld"] == 300 - 30 * 4
    assert rec["reports_accepted"] == 30 * 4
    assert rec["reports_counted"] + rec["reports_refused"] + rec["reports_pending"] == 120
    assert data["persons"] == 30 and data["contributions"] == {"k": 4, "period_seconds": None}
    person = data["per_person"]
    assert person["k"] == 4 and person["central_epsilon"] is not None
    assert person["ldp_epsilon"] == pytest.approx(4 * data["privacy"]["ldp_epsilon"], rel=1e-3)
