"""``services.common.pg.Database.run_tx`` against the real PostgreSQL server: what is retried
(serialisation failures, a dropped connection), what is raised at once, and what the metrics
count."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator

import psycopg
import pytest

from privbandit.services.common import pg
from privbandit.services.common.metrics import ServiceMetrics, TxMetrics
from tests.helpers import PG_SERVER, pg_schemas

SERVICE = "pgtest"


@pytest.fixture
def url() -> Iterator[str]:
    """A fresh schema with one counter row, t(id = 1, n = 0); connections named uniquely so
    that a test can terminate exactly them."""
    with pg_schemas("pg") as urls:
        app = f"privbandit-test-{secrets.token_hex(4)}"
        schema_url = f"{urls['pg']}&application_name={app}"
        with psycopg.connect(schema_url, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
            conn.execute("INSERT INTO t VALUES (1, 0)")
        yield schema_url


@pytest.fixture
def metrics() -> ServiceMetrics:
    return ServiceMetrics(SERVICE)


def observed(metrics: ServiceMetrics, db: pg.Database) -> pg.Database:
    db.metrics = TxMetrics(metrics)
    return db


def count(metrics: ServiceMetrics, name: str, outcome: str) -> float:
    value = metrics.registry.get_sample_value(
        f"privbandit_{SERVICE}_db_transactions_total", {"name": name, "outcome": outcome})
    return value or 0.0


def timed(metrics: ServiceMetrics, name: str) -> float:
    value = metrics.registry.get_sample_value(
        f"privbandit_{SERVICE}_db_transaction_seconds_count", {"name": name})
    return value or 0.0


def conflicting_bump(
    url: str, attempts: list[int], conflicts: int
) -> Callable[[psycopg.Connection], int]:
    """A transaction fn adding 1 to t.n under REPEATABLE READ; on its first ``conflicts``
    attempts another connection commits an update of the same row after the snapshot was
    taken, so PostgreSQL refuses the update with a serialisation failure (SQLSTATE 40001)."""

    def bump(conn: psycopg.Connection) -> int:
        attempts.append(1)
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        row = conn.execute("SELECT n FROM t WHERE id = 1").fetchone()
        assert row is not None
        if len(attempts) <= conflicts:
            with psycopg.connect(url, autocommit=True) as other:
                other.execute("UPDATE t SET n = n + 100 WHERE id = 1")
        conn.execute("UPDATE t SET n = n + 1 WHERE id = 1")
        return int(row[0])

    return bump


def value(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT n FROM t WHERE id = 1").fetchone()
    assert row is not None
    return int(row[0])


def terminate(app: str) -> int:
    """Terminate every backend of connections named ``app`` (waiting until each is gone)."""
    with psycopg.connect(PG_SERVER, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
            "WHERE application_name = %s", (app,)).fetchall()
    assert all(r[0] for r in rows)
    return len(rows)


def app_name(url: str) -> str:
    return url.rsplit("application_name=", 1)[1]


def test_a_serialisation_failure_is_retried_and_counted(
    url: str, metrics: ServiceMetrics
) -> None:
    db = observed(metrics, pg.PooledDatabase(url, service=SERVICE))
    try:
        attempts: list[int] = []
        seen = db.run_tx("bump", conflicting_bump(url, attempts, conflicts=1))
    finally:
        db.close()
    # The first attempt lost to the concurrent update and rolled back; the second saw it.
    assert len(attempts) == 2 and seen == 100
    assert value(url) == 101
    assert count(metrics, "bump", "retried") == 1
    assert count(metrics, "bump", "ok") == 1
    assert count(metrics, "bump", "failed") == 0
    assert timed(metrics, "bump") == 1


def test_retries_stop_after_the_last_attempt(url: str, metrics: ServiceMetrics) -> None:
    db = observed(metrics, pg.PooledDatabase(url, service=SERVICE))
    attempts: list[int] = []
    try:
        with pytest.raises(psycopg.errors.SerializationFailure):
            db.run_tx("bump", conflicting_bump(url, attempts, conflicts=pg.Database.ATTEMPTS))
    finally:
        db.close()
    assert len(attempts) == pg.Database.ATTEMPTS
    assert value(url) == 100 * pg.Database.ATTEMPTS  # none of the attempts committed
    assert count(metrics, "bump", "retried") == pg.Database.ATTEMPTS - 1
    assert count(metrics, "bump", "failed") == 1
    assert count(metrics, "bump", "ok") == 0


def test_a_non_retryable_error_is_raised_at_once(url: str, metrics: ServiceMetrics) -> None:
    db = observed(metrics, pg.PooledDatabase(url, service=SERVICE))
    attempts: list[int] = []

    def broken(conn: psycopg.Connection) -> None:
        attempts.append(1)
        conn.execute("UPDATE t SET n = n + 1 WHERE id = 1")
        conn.execute("SELECT 1 / 0")

    try:
        with pytest.raises(psycopg.errors.DivisionByZero):
            db.run_tx("broken", broken)
    finally:
        db.close()
    assert attempts == [1]
    assert value(url) == 0  # rolled back
    assert count(metrics, "broken", "failed") == 1
    assert count(metrics, "broken", "retried") == 0
    assert timed(metrics, "broken") == 1


def backend_pid(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


def test_a_pool_survives_its_connections_being_terminated(
    url: str, metrics: ServiceMetrics
) -> None:
    db = observed(metrics, pg.PooledDatabase(url, service=SERVICE))
    try:
        before = db.run_tx("pid", backend_pid)
        assert terminate(app_name(url)) >= 1
        after = db.run_tx("pid", backend_pid)
        db.run_tx("bump", lambda conn: conn.execute("UPDATE t SET n = n + 1 WHERE id = 1"))
    finally:
        db.close()
    assert after != before
    assert value(url) == 1
    assert count(metrics, "pid", "retried") == 1  # the attempt on the terminated connection
    assert count(metrics, "pid", "ok") == 2
    assert count(metrics, "bump", "ok") == 1 and count(metrics, "bump", "retried") == 0


@pytest.mark.parametrize("held", [False, True], ids=["holding-nothing", "holding-locks"])
def test_a_dropped_session_is_replaced_only_if_it_held_nothing(
    url: str, metrics: ServiceMetrics, held: bool
) -> None:
    """A ``SessionDatabase`` asks ``lost()`` once its connection dropped. Holding nothing, it
    reconnects and the call succeeds; holding session state (the analyzer's task locks), a new
    connection would hold none, so the error is raised (and the store stops the analyzer)."""
    lost: list[int] = []

    def on_lost() -> bool:
        lost.append(1)
        return not held

    db = observed(metrics, pg.SessionDatabase(url, service=SERVICE, lost=on_lost))
    try:
        before = db.run_tx("pid", backend_pid, transaction=False)
        assert terminate(app_name(url)) == 1
        if held:
            with pytest.raises(psycopg.OperationalError):
                db.run_tx("pid", backend_pid)
        else:
            assert db.run_tx("pid", backend_pid) != before
    finally:
        db.close()
    assert lost == [1]
    assert count(metrics, "pid", "retried") == (0 if held else 1)
    assert count(metrics, "pid", "failed") == (1 if held else 0)
    assert count(metrics, "pid", "ok") == (1 if held else 2)
