"""The shared service primitives: ``transaction``/``migrate`` on real SQLite files, the retry
schedule (``Jittered``, ``until_true``) and ``GroupCommitter``."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from pathlib import Path

import pytest

from privbandit.services.common.group_commit import GroupCommitter, ShuttingDown
from privbandit.services.common.retry import Jittered, RetryAfterFloor, until_success, until_true
from privbandit.services.common.sqlite import (
    SchemaError,
    add_columns,
    migrate,
    open_db,
    schema_version,
    transaction,
)
from tests.helpers import patience

MIGRATIONS = [
    "CREATE TABLE a (x INTEGER NOT NULL)  -- one column; for now",
    "ALTER TABLE a ADD COLUMN y INTEGER NOT NULL DEFAULT 7; CREATE INDEX a_x ON a (x)",
]


def test_transaction_commits_or_rolls_back_as_a_whole(tmp_path: Path) -> None:
    conn = open_db(tmp_path / "t.sqlite3")
    conn.execute("CREATE TABLE t (v INTEGER)")
    with transaction(conn):
        conn.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(ZeroDivisionError), transaction(conn):
        conn.execute("INSERT INTO t VALUES (2)")
        1 / 0  # noqa: B018
    assert [r[0] for r in conn.execute("SELECT v FROM t")] == [1]
    assert not conn.in_transaction


def test_a_failing_commit_rolls_back_and_leaves_the_connection_usable(tmp_path: Path) -> None:
    conn = open_db(tmp_path / "c.sqlite3")
    conn.execute("CREATE TABLE p (id INTEGER PRIMARY KEY)")
    conn.execute("CREATE TABLE c (p INTEGER REFERENCES p (id) DEFERRABLE INITIALLY DEFERRED)")
    with pytest.raises(sqlite3.IntegrityError), transaction(conn):
        conn.execute("INSERT INTO c VALUES (1)")  # checked only at COMMIT
    assert not conn.in_transaction
    with transaction(conn):
        conn.execute("INSERT INTO p VALUES (1)")
    assert conn.execute("SELECT count(*) FROM c").fetchone() == (0,)


def test_migrations_apply_once_in_order_and_newer_databases_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite3"
    conn = open_db(path)
    assert migrate(conn, MIGRATIONS[:1], store="test") == 1
    conn.execute("INSERT INTO a (x) VALUES (1)")
    assert migrate(conn, MIGRATIONS, store="test") == 2
    assert conn.execute("SELECT x, y FROM a").fetchall() == [(1, 7)]
    assert migrate(conn, MIGRATIONS, store="test") == 2  # idempotent
    assert schema_version(conn) == 2
    conn.close()
    with pytest.raises(SchemaError, match="schema version 2"):
        migrate(open_db(path), MIGRATIONS[:1], store="test")


def test_a_failing_migration_leaves_the_previous_version_whole(tmp_path: Path) -> None:
    conn = open_db(tmp_path / "f.sqlite3")
    broken = [MIGRATIONS[0], "ALTER TABLE a ADD COLUMN z INTEGER; SELECT * FROM missing"]
    with pytest.raises(sqlite3.OperationalError):
        migrate(conn, broken, store="test")
    assert schema_version(conn) == 1
    assert [r[1] for r in conn.execute("PRAGMA table_info(a)")] == ["x"]


def test_a_database_from_before_versioning_is_at_version_1(tmp_path: Path) -> None:
    """Tables but no ``schema_version``: written by the code whose schema is migration 1, so
    migration 1 is not run again (it might not be idempotent) and later ones are."""
    path = tmp_path / "legacy.sqlite3"
    with sqlite3.connect(path) as old:
        old.execute("CREATE TABLE a (x INTEGER NOT NULL)")
        old.execute("INSERT INTO a (x) VALUES (5)")
    conn = open_db(path)
    assert schema_version(conn) == 1
    assert migrate(conn, MIGRATIONS, store="test") == 2
    assert conn.execute("SELECT x, y FROM a").fetchall() == [(5, 7)]
    # A new, empty database is at version 0 and gets every migration.
    assert schema_version(open_db(tmp_path / "new.sqlite3")) == 0


def test_a_migration_may_be_a_function_and_add_columns_adds_only_missing_ones(
    tmp_path: Path,
) -> None:
    columns = add_columns(("a", "y", "INTEGER NOT NULL DEFAULT 7"), ("a", "z", "TEXT"))
    for name, first in (("has-y", "CREATE TABLE a (x INTEGER, y INTEGER NOT NULL DEFAULT 1)"),
                        ("bare", "CREATE TABLE a (x INTEGER)")):
        conn = open_db(tmp_path / f"{name}.sqlite3")
        assert migrate(conn, [first, columns], store="test") == 2
        assert [r[1] for r in conn.execute("PRAGMA table_info(a)")] == ["x", "y", "z"]
        assert schema_version(conn) == 2


def test_the_schedule_doubles_to_its_cap_with_bounded_jitter() -> None:
    wait = Jittered(0.1, 0.8)
    delays = [wait.delay(n) for n in range(1, 7)]
    nominal = [0.1, 0.2, 0.4, 0.8, 0.8, 0.8]
    for d, n in zip(delays, nominal, strict=True):
        assert 0.5 * n <= d < 1.5 * n
    # A server's Retry-After is a lower bound, capped at the maximum.
    assert 0.4 <= wait.delay(1, at_least=0.4) and 0.8 <= wait.delay(1, at_least=60) < 1.2
    with pytest.raises(ValueError):
        Jittered(1.0, 0.5)


async def test_until_true_keeps_the_retry_after_floor_and_starts_anew_after_success() -> None:
    """The loops that report their own failures (the shuffler's deliveries and config fetches)
    under tenacity: each wait is the jittered schedule's or the server's Retry-After if that is
    longer (capped at the maximum), results other than False end the loop, errors propagate,
    and a new loop waits the first delay again."""
    wait = Jittered(0.01, 0.5)
    hints = [0.3, 0.0, 60.0, 0.0]  # Retry-After of each failed attempt's answer
    taken: list[float] = []
    slept: list[float] = []

    def hint() -> float:
        taken.append(hints[len(taken)])
        return taken[-1]

    async def record(delay: float) -> None:
        slept.append(delay)

    answers = iter([False, False, False, False, "acked"])

    async def attempt() -> object:
        return next(answers)

    retrying = until_true(RetryAfterFloor(wait, hint), sleep=record)
    assert await retrying(attempt) == "acked"
    assert len(slept) == 4 and taken == hints
    assert 0.3 <= slept[0] < 0.3 + 1.5 * 0.01  # the floor, not the 5-15 ms of attempt 1
    assert 0.5 * 0.02 <= slept[1] < 1.5 * 0.02  # no hint: the schedule (attempt 2)
    assert 0.5 <= slept[2] < 1.5 * 0.5 and slept[2] < 60  # a hint beyond the cap is capped
    assert 0.5 * 0.08 <= slept[3] < 1.5 * 0.08
    # None (e.g. a batch dissolved meanwhile) ends the loop too; an exception is not retried.
    assert await until_true(wait, sleep=record)(_answer, None) is None

    async def boom() -> bool:
        raise KeyError("a bug, not a failure")

    with pytest.raises(KeyError):
        await until_true(wait, sleep=record)(boom)
    # A new loop (as after a success) starts at the first delay again.
    slept.clear()
    answers = iter([False, True])
    assert await until_true(wait, sleep=record)(attempt) is True
    assert len(slept) == 1 and slept[0] < 1.5 * 0.01


async def _answer(value: object) -> object:
    return value


async def test_group_committer_groups_waiting_items_and_isolates_item_failures() -> None:
    gate = threading.Event()
    groups: list[list[int]] = []

    def commit(items: list[int]) -> list[int | BaseException]:
        gate.wait(patience(5))
        groups.append(items)
        return [ValueError(f"bad {i}") if i == 3 else i * 10 for i in items]

    seen: list[int] = []
    gc: GroupCommitter[int, int] = GroupCommitter(
        "test", commit, max_items=3, after=lambda items, _: seen.extend(items)
    )
    gc.start()
    first = asyncio.ensure_future(gc.submit(0))
    await asyncio.sleep(0.05)  # the worker now holds [0] and waits on the gate
    rest = [asyncio.ensure_future(gc.submit(i)) for i in range(1, 6)]
    await asyncio.sleep(0.05)
    gate.set()
    assert await first == 0
    results = await asyncio.gather(*rest, return_exceptions=True)
    assert results[:2] == [10, 20] and isinstance(results[2], ValueError)
    assert results[3:] == [40, 50]
    assert groups == [[0], [1, 2, 3], [4, 5]]
    assert seen == [0, 1, 2, 3, 4, 5]
    await gc.stop()
    with pytest.raises(ShuttingDown):
        await gc.submit(9)


async def test_group_committer_fails_the_whole_group_when_the_commit_raises() -> None:
    def commit(items: list[int]) -> list[int]:
        raise sqlite3.OperationalError("disk I/O error")

    gc: GroupCommitter[int, int] = GroupCommitter("test", commit)
    gc.start()
    results = await asyncio.gather(gc.submit(1), gc.submit(2), return_exceptions=True)
    assert all(isinstance(r, sqlite3.OperationalError) for r in results)
    await gc.stop()


async def test_an_in_loop_committer_commits_on_the_loop_thread_and_groups_what_queued_meanwhile(
) -> None:
    """``in_loop``: the commit runs on the event loop's thread; what was submitted while a
    group was committing is the next group, and item failures stay isolated."""
    threads: list[int] = []
    groups: list[list[int]] = []

    def commit(items: list[int]) -> list[int | BaseException]:
        threads.append(threading.get_ident())
        groups.append(items)
        return [ValueError("bad") if i == 2 else i for i in items]

    gc: GroupCommitter[int, int] = GroupCommitter("test", commit, in_loop=True)
    gc.start()
    results = await asyncio.gather(*(gc.submit(i) for i in range(4)), return_exceptions=True)
    assert results[:2] == [0, 1] and isinstance(results[2], ValueError) and results[3] == 3
    assert groups == [[0, 1, 2, 3]]
    assert set(threads) == {threading.get_ident()}
    await gc.stop()


async def test_an_in_loop_committers_sync_runs_off_the_loop_before_anyone_is_answered() -> None:
    """``sync`` (the fsync that makes an in-loop commit durable) runs in a worker thread after
    the commit and before any submitter of the group gets its answer; while it runs the loop
    stays free and what is submitted meanwhile becomes the next group; a failing sync fails its
    whole group (and only it)."""
    loop_thread = threading.get_ident()
    events: list[str] = []
    sync_threads: list[int] = []
    release = threading.Event()
    fail_next = False

    def commit(items: list[int]) -> list[int]:
        events.append(f"commit {items}")
        return items

    def sync() -> None:
        nonlocal fail_next
        sync_threads.append(threading.get_ident())
        release.wait(patience(5))
        events.append("sync")
        if fail_next:
            fail_next = False
            raise OSError("fsync failed")

    gc: GroupCommitter[int, int] = GroupCommitter("test", commit, in_loop=True, sync=sync)
    gc.start()
    first = asyncio.ensure_future(gc.submit(1))
    for _ in range(50):  # until the first group is committed and its sync is waiting
        await asyncio.sleep(0.01)
        if events:
            break
    assert events == ["commit [1]"] and not first.done()  # committed, not yet answered
    second = [asyncio.ensure_future(gc.submit(i)) for i in (2, 3)]  # the loop is free meanwhile
    await asyncio.sleep(0.05)
    assert not first.done() and events == ["commit [1]"]
    release.set()
    assert await first == 1
    assert await asyncio.gather(*second) == [2, 3]
    assert events == ["commit [1]", "sync", "commit [2, 3]", "sync"]
    assert sync_threads and loop_thread not in sync_threads

    fail_next = True
    failed = await asyncio.gather(gc.submit(4), gc.submit(5), return_exceptions=True)
    assert all(isinstance(r, OSError) for r in failed)
    assert await gc.submit(6) == 6  # the next group is unaffected
    await gc.stop()

    with pytest.raises(ValueError, match="in_loop"):
        GroupCommitter("test", commit, sync=sync)


@pytest.mark.parametrize("in_loop", [False, True])
async def test_a_submitter_that_goes_away_cancels_its_wait_not_the_commit(in_loop: bool) -> None:
    """A request cancelled while its item waits (the client went away) stops waiting, but the
    item is committed with its group all the same; an item that fails after its submitter left
    logs no "exception never retrieved"."""
    committed: list[int] = []
    gate = threading.Event()

    def commit(items: list[int]) -> list[int | BaseException]:
        if not in_loop:
            gate.wait(patience(5))
        committed.extend(items)
        return [ValueError("bad") if i == 2 else i for i in items]

    gc: GroupCommitter[int, int] = GroupCommitter("test", commit, in_loop=in_loop)
    gc.start()
    waits = [asyncio.ensure_future(gc.submit(i)) for i in (1, 2, 3)]
    await asyncio.sleep(0)
    waits[0].cancel()
    waits[1].cancel()
    gate.set()
    assert await waits[2] == 3
    assert sorted(committed) == [1, 2, 3]
    assert waits[0].cancelled() and waits[1].cancelled()
    await gc.stop()


async def test_until_success_retries_on_the_named_errors_with_the_jittered_schedule(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """tenacity runs the loop: each wait drawn from ``Jittered``'s schedule (the one every
    retry of the services takes), failures logged, other errors raised at once."""
    wait = Jittered(0.001, 0.004)
    assert [wait.nominal(n) for n in (1, 2, 3, 4, 500)] == [0.001, 0.002, 0.004, 0.004, 0.004]
    calls: list[int] = []
    log = logging.getLogger("tests.retry")

    async def flaky() -> str:
        calls.append(len(calls))
        if len(calls) < 4:
            raise ConnectionError("not yet")
        return "answer"

    slept: list[float] = []
    retrying = until_success(wait, (ConnectionError,), log, "probe not ready")
    retrying.before_sleep = (lambda inner: lambda state: (
        slept.append(state.upcoming_sleep), inner(state)))(retrying.before_sleep)
    async for attempt in retrying:
        with attempt:
            got = await flaky()
    assert got == "answer" and len(calls) == 4
    for n, s in enumerate(slept, start=1):
        assert 0.5 * wait.nominal(n) <= s < 1.5 * wait.nominal(n)
    with pytest.raises(KeyError):
        async for attempt in until_success(wait, (ConnectionError,), log, "probe"):
            with attempt:
                raise KeyError("not retried")
    # ``on_failure`` sees each failure and chooses its log level.
    seen: list[BaseException] = []
    calls.clear()
    with caplog.at_level(logging.INFO, logger="tests.retry"):
        async for attempt in until_success(wait, (ConnectionError,), log, "probe",
                                           on_failure=lambda e: seen.append(e) or logging.ERROR):
            with attempt:
                await flaky()
    assert len(seen) == 3 and all(isinstance(e, ConnectionError) for e in seen)
    assert [r.levelno for r in caplog.records if r.name == "tests.retry"][-3:] == [
        logging.ERROR] * 3
