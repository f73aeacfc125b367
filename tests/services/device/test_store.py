"""The device store on its own: numbered migrations (also of stores written before versioning),
and group commit where each operation is undone alone if it fails."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from privbandit.services.common.sqlite import migrate, open_db, schema_version, transaction
from privbandit.services.device.errors import DecisionUsed
from privbandit.services.device.store import MIGRATIONS, SCHEMA_V1, DeviceStore
from privbandit.services.device.transports import TRANSPORTS as DEVICE_TRANSPORTS

# The device's schema before secure-sum (no transport / key id columns), without versioning.
BEFORE_SECURE_SUM = """
CREATE TABLE decisions (id TEXT PRIMARY KEY, task TEXT NOT NULL, x BLOB, created REAL NOT NULL);
CREATE TABLE outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, task TEXT NOT NULL,
                     report TEXT NOT NULL);
CREATE INDEX outbox_task ON outbox (task, seq);
CREATE TABLE dead_letters (seq INTEGER PRIMARY KEY, task TEXT NOT NULL, report TEXT NOT NULL,
                           reason TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO outbox (task, report) VALUES ('cen', '{"old": 1}'), ('cen', '{"old": 2}');
INSERT INTO counters VALUES ('feedbacks', 2);
"""


@pytest.mark.parametrize("schema", [BEFORE_SECURE_SUM, SCHEMA_V1], ids=["old", "current"])
async def test_an_unversioned_store_is_migrated_and_keeps_its_outbox(
    tmp_path: Path, schema: str
) -> None:
    path = tmp_path / "device.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.executescript(schema)
        if schema is SCHEMA_V1:
            conn.execute("INSERT INTO outbox (task, report) VALUES ('cen', '{}'), ('cen', '{}')")
            conn.execute("INSERT INTO counters VALUES ('feedbacks', 2)")
    store = DeviceStore(path)
    store.start()
    try:
        assert (store.counters.feedbacks, store.counters.outbox_pending) == (2, 2)
        items = await store.outbox_head(10)
        assert {(it.task, it.transport, it.key_id) for it in items} == {("cen", "reports", None)}
        assert len(items) == 2
        await store.dead_letter(items[:1], "refused")
        assert (store.counters.outbox_pending, store.counters.dead_letters) == (1, 1)
    finally:
        await store.stop()
        store.close()
    with sqlite3.connect(path) as conn:
        assert schema_version(conn) == len(MIGRATIONS) == 6
        (transport,) = conn.execute("SELECT transport FROM dead_letters").fetchone()
        assert transport == "reports"


async def test_paillier_rows_queued_as_secure_sum_are_sent_as_paillier_after_the_upgrade(
    tmp_path: Path,
) -> None:
    """A device upgraded with reports still queued under the Paillier transport's old name
    (``secure-sum``, schema version 5) sends them through the ``paillier`` transport and drops
    the stale ones by that name: no row is stranded under a name no transport answers to."""
    path = tmp_path / "device.sqlite3"
    conn = open_db(path)
    try:
        assert migrate(conn, MIGRATIONS[:5], store="device") == 5
        with transaction(conn):
            conn.executemany(
                "INSERT INTO outbox (task, report, transport, key_id) VALUES (?, ?, ?, ?)",
                [("sum", '{"a": 1}', "secure-sum", 7), ("sum", '{"a": 2}', "secure-sum", 8),
                 ("cen", '{"b": 1}', "reports", None)])
            conn.execute("INSERT INTO dead_letters (seq, task, report, reason, created, transport)"
                         " VALUES (99, 'sum', '{}', 'refused', 0, 'secure-sum')")
            conn.execute("INSERT INTO counters VALUES ('outbox_pending', 3)")
    finally:
        conn.close()
    store = DeviceStore(path)
    store.start()
    try:
        # The oldest group first (one task and transport per upload), then the other.
        items = await store.outbox_head(10)
        assert [(it.report, it.transport, it.key_id) for it in items] == [
            ('{"a": 1}', "paillier", 7), ('{"a": 2}', "paillier", 8)]
        assert items[0].transport in DEVICE_TRANSPORTS
        rest = await store.outbox_head(10, exclude={("sum", "paillier")})
        assert [(it.report, it.transport) for it in rest] == [('{"b": 1}', "reports")]
        # The key-rotation drop finds the old rows under the new name (default: ``paillier``).
        assert await store.drop_stale("sum", 8) == 1
        left = await store.outbox_head(10)
        assert [it.report for it in left] == ['{"a": 2}']
    finally:
        await store.stop()
        store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT transport FROM dead_letters").fetchall() == [("paillier",)]
        assert conn.execute("SELECT count(*) FROM outbox WHERE transport = 'secure-sum'"
                            ).fetchone() == (0,)


async def test_a_failing_operation_is_undone_alone_within_its_group(tmp_path: Path) -> None:
    store = DeviceStore(tmp_path / "device.sqlite3")
    store.start()
    try:
        await store.complete_feedback(b"a" * 12, "cen", "{}")

        def half_then_fail(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM used_decisions")
            raise RuntimeError("boom")

        # Submitted together: one group, one transaction; the failing op's delete is undone,
        # and so is the repeated feedback's outbox row.
        results = await asyncio.gather(
            store.complete_feedback(b"b" * 12, "cen", "{}"),
            store.run(half_then_fail),
            store.complete_feedback(b"a" * 12, "cen", "{}"),
            store.decision_used(b"c" * 12),
            return_exceptions=True,
        )
        assert results[0] == 2 and isinstance(results[1], RuntimeError)
        assert isinstance(results[2], DecisionUsed) and results[3] is False
        assert await store.decision_used(b"a" * 12) and await store.decision_used(b"b" * 12)
        assert (store.counters.feedbacks, store.counters.outbox_pending) == (2, 2)
        assert [it.seq for it in await store.outbox_head(10)] == [1, 2]
    finally:
        await store.stop()
        store.close()


async def test_an_upgraded_store_forgets_its_plaintext_decisions(tmp_path: Path) -> None:
    """A store from before sealed decision ids (schema 3) held open decisions' feature vectors
    in plaintext: migration 4 drops them (their feedback is then 404, as after expiry)."""
    path = tmp_path / "device.sqlite3"
    store = DeviceStore(path)
    store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM schema_version WHERE version >= 4")
        conn.execute("DROP TABLE used_decisions")
        conn.executescript(MIGRATIONS[0])  # type: ignore[arg-type]
        conn.execute("INSERT INTO decisions VALUES ('a', 'cen', x'0000803f', 1.0)")
    DeviceStore(path).close()
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert "decisions" not in tables and "used_decisions" in tables
        assert schema_version(conn) == len(MIGRATIONS)


async def test_a_feedback_is_answered_only_after_the_wal_is_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store commits with ``synchronous=NORMAL`` (no fsync on the loop) and fsyncs the WAL
    itself before answering: ``complete_feedback`` returns only after an fsync of the WAL
    file's inode that began after the feedback's commit. (A power cut cannot be staged here; the
    fsync is observed instead, on the real file.)"""
    import os

    path = tmp_path / "device.sqlite3"
    store = DeviceStore(path)
    assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    synced: list[tuple[int, int]] = []  # (inode, feedbacks committed when the fsync ran)
    real_fsync = os.fsync
    probe = sqlite3.connect(path, check_same_thread=False)

    def spy(fd: int) -> None:
        committed = probe.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]
        synced.append((os.fstat(fd).st_ino, committed))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    store.start()
    try:
        await store.complete_feedback(b"a" * 12, "t", "{}")
        wal = Path(f"{path}-wal")
        assert synced and synced[-1] == (wal.stat().st_ino, 1)
        await store.complete_feedback(b"b" * 12, "t", "{}")
        assert synced[-1] == (wal.stat().st_ino, 2)
    finally:
        await store.stop()
        store.close()
        probe.close()


async def test_the_wal_is_checkpointed_by_the_sync_thread_not_inside_a_commit(
    tmp_path: Path,
) -> None:
    """SQLite's automatic checkpoint (inside a COMMIT, on the event loop's thread) is off; the
    sync's worker thread checkpoints every ``CHECKPOINT_EVERY`` groups instead, so the rows
    reach the database file itself (read here without the WAL: ``immutable=1``)."""
    from privbandit.services.device.store import CHECKPOINT_EVERY

    path = tmp_path / "device.sqlite3"
    store = DeviceStore(path)
    assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0

    def in_main_file() -> int:
        main = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
        try:
            return main.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]
        except sqlite3.OperationalError:  # not even the schema is in the main file yet
            return 0
        finally:
            main.close()

    store.start()
    try:
        for i in range(CHECKPOINT_EVERY - 1):
            await store.complete_feedback(i.to_bytes(12, "big"), "t", "{}")
        assert in_main_file() == 0  # all of it still only in the WAL
        await store.complete_feedback(CHECKPOINT_EVERY.to_bytes(12, "big"), "t", "{}")
        assert in_main_file() == CHECKPOINT_EVERY
    finally:
        await store.stop()
        store.close()
