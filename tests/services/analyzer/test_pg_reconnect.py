"""The analyzer's PostgreSQL store when the connection holding its task locks is terminated
(issue 26 item 1): it connects again and takes the locks again when nothing happened meanwhile,
and stops itself (SIGTERM, a standby takes over) when another analyzer holds or held its tasks.
Against the real server; the signal is recorded instead of sent."""

from __future__ import annotations

import os
import secrets
import signal
from collections.abc import Iterator

import psycopg
import pytest

from privbandit.services.analyzer.store import postgres as pg_store
from privbandit.services.analyzer.store.base import BatchResult
from privbandit.services.common import pg
from tests.helpers import PG_SERVER, pg_schemas


@pytest.fixture
def url() -> Iterator[str]:
    """A fresh schema; the store's connections named uniquely so the test can kill them."""
    with pg_schemas("an") as urls:
        yield f"{urls['an']}&application_name=privbandit-an-{secrets.token_hex(4)}"


@pytest.fixture
def signals(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The signals the store sends itself (recorded, not sent)."""
    sent: list[int] = []

    def kill(pid: int, sig: int) -> None:
        assert pid == os.getpid()
        sent.append(sig)

    monkeypatch.setattr(os, "kill", kill)  # the os module the store calls
    return sent


def terminate(url: str) -> int:
    app = url.rsplit("application_name=", 1)[1]
    with psycopg.connect(PG_SERVER, autocommit=True) as admin:
        rows = admin.execute("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                             "WHERE application_name = %s", (app,)).fetchall()
    return len(rows)


def lock_is_free(url: str, task: str) -> bool:
    """Whether another session can take ``task``'s lock (released again at once)."""
    with psycopg.connect(url.rsplit("&application_name", 1)[0], autocommit=True) as other:
        key = pg.lock_key(other, f"analyzer/{task}")
        row = other.execute("SELECT pg_try_advisory_lock(%s, %s)", key).fetchone()
        return bool(row and row[0])


def commit_one(store: pg_store.PgAnalyzerStore, task: str, batch: str) -> None:
    store.commit_batches(task, [(BatchResult(batch, 1, 0, 0, 0), [secrets.token_bytes(16)])],
                         {"n": batch}, 1000.0)


def opened(url: str, tasks: list[str]) -> pg_store.PgAnalyzerStore:
    store = pg_store.PgAnalyzerStore(url)
    for task in tasks:
        store.init_task(task, {}, {})
    assert store.try_claim(tasks) == []
    return store


def test_a_terminated_connection_is_replaced_and_the_locks_taken_again(
    url: str, signals: list[int]
) -> None:
    store = opened(url, ["a", "b"])
    try:
        commit_one(store, "a", "b1")
        assert terminate(url) == 1
        commit_one(store, "a", "b2")  # the interrupted transaction runs on a new connection
        assert store.load_task("a") is not None
        assert not lock_is_free(url, "a") and not lock_is_free(url, "b")
        assert terminate(url) == 1  # and again
        commit_one(store, "b", "b3")
    finally:
        store.close()
    assert signals == []
    assert lock_is_free(url, "a")


def test_it_stops_when_another_analyzer_took_a_task_meanwhile(
    url: str, signals: list[int]
) -> None:
    store = opened(url, ["a", "b"])
    other = None
    try:
        assert terminate(url) == 1
        other = pg_store.PgAnalyzerStore(url.replace("application_name=", "application_name=x"))
        assert other.try_claim(["b"]) == []  # the standby got "b" while the first was away
        with pytest.raises(psycopg.OperationalError):
            store.load_task("a")
    finally:
        store.close()
        if other is not None:
            other.close()
    assert signals == [signal.SIGTERM]


def test_it_stops_when_batches_were_committed_meanwhile(url: str, signals: list[int]) -> None:
    # A standby that took over, committed and died in between: the locks are free again, but
    # this analyzer's policy state is not the committed one any more.
    store = opened(url, ["a"])
    try:
        commit_one(store, "a", "b1")
        assert terminate(url) == 1
        other = pg_store.PgAnalyzerStore(url.replace("application_name=", "application_name=x"))
        try:
            assert other.try_claim(["a"]) == []
            commit_one(other, "a", "b2")
        finally:
            other.close()
        with pytest.raises(psycopg.OperationalError):
            commit_one(store, "a", "b3")
    finally:
        store.close()
    assert signals == [signal.SIGTERM]
