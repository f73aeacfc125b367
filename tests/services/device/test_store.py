"""The device store on its own: numbered migrations (also of stores written before versioning),
and group commit where each operation is undone alone if it fails."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from services.common.sqlite import schema_version
from services.device.errors import DecisionUsed, UnknownDecision
from services.device.store import MIGRATIONS, SCHEMA_V1, DeviceStore

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
        assert schema_version(conn) == len(MIGRATIONS) == 3
        (transport,) = conn.execute("SELECT transport FROM dead_letters").fetchone()
        assert transport == "reports"


async def test_a_failing_operation_is_undone_alone_within_its_group(tmp_path: Path) -> None:
    store = DeviceStore(tmp_path / "device.sqlite3")
    store.start()
    try:
        x = np.array([0.1, 0.2, 0.3])
        await store.add_decision("a" * 32, "cen", x)

        def half_then_fail(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM decisions")
            raise RuntimeError("boom")

        # Submitted together: one group, one transaction; the failing op's delete is undone.
        results = await asyncio.gather(
            store.add_decision("b" * 32, "cen", x),
            store.run(half_then_fail),
            store.complete_feedback("a" * 32, "cen", "{}"),
            store.get_decision("c" * 32, "cen"),
            return_exceptions=True,
        )
        assert results[0] is None and isinstance(results[1], RuntimeError)
        assert results[2] == 1 and isinstance(results[3], UnknownDecision)
        np.testing.assert_array_equal(await store.get_decision("b" * 32, "cen"), x)
        with pytest.raises(DecisionUsed):
            await store.get_decision("a" * 32, "cen")
        assert (store.counters.feedbacks, store.counters.outbox_pending) == (1, 1)
    finally:
        await store.stop()
        store.close()


async def test_a_group_of_new_decisions_is_inserted_at_once_and_a_repeated_id_fails_alone(
    tmp_path: Path,
) -> None:
    """The group's new decisions go in with one statement; when that fails (an id already
    taken), each is retried alone, so only the repeated id is refused."""
    store = DeviceStore(tmp_path / "device.sqlite3")
    store.start()
    try:
        x = np.array([0.1, 0.2, 0.3])
        await store.add_decision("a" * 32, "cen", x)
        ids = ["b" * 32, "a" * 32, "c" * 32, "d" * 32]
        results = await asyncio.gather(
            *(store.add_decision(i, "cen", x + k) for k, i in enumerate(ids)),
            return_exceptions=True,
        )
        assert results[0] is None and results[2] is None and results[3] is None
        assert isinstance(results[1], sqlite3.IntegrityError)
        np.testing.assert_array_equal(await store.get_decision("a" * 32, "cen"), x)
        for k in (0, 2, 3):
            np.testing.assert_array_equal(await store.get_decision(ids[k], "cen"), x + k)
    finally:
        await store.stop()
        store.close()


def test_decision_ids_are_hex_ordered_by_second_and_random_below() -> None:
    from services.device.decisions import new_decision_id

    ids = [new_decision_id() for _ in range(1000)]
    assert all(len(i) == 32 and int(i, 16) >= 0 and i == i.lower() for i in ids)
    assert len(set(ids)) == 1000 and len({i[8:] for i in ids}) == 1000
    assert len({i[:8] for i in ids}) <= 2  # one second (or the turn of one)


async def test_a_decision_is_answered_only_after_the_wal_is_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store commits with ``synchronous=NORMAL`` (no fsync on the loop) and fsyncs the WAL
    itself before answering: ``add_decision`` returns only after an fsync of the WAL file's
    inode that began after the decision's commit. (A power cut cannot be staged here; the
    fsync is observed instead, on the real file.)"""
    import os

    path = tmp_path / "device.sqlite3"
    store = DeviceStore(path)
    assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    synced: list[tuple[int, int]] = []  # (inode, decisions committed when the fsync ran)
    real_fsync = os.fsync
    probe = sqlite3.connect(path, check_same_thread=False)

    def spy(fd: int) -> None:
        committed = probe.execute("SELECT COUNT(*) FROM decisions").fetchone()[0]
        synced.append((os.fstat(fd).st_ino, committed))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    store.start()
    try:
        await store.add_decision("a" * 32, "t", np.ones(3))
        wal = Path(f"{path}-wal")
        assert synced and synced[-1] == (wal.stat().st_ino, 1)
        await store.add_decision("b" * 32, "t", np.ones(3))
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
    from services.device.store import CHECKPOINT_EVERY

    path = tmp_path / "device.sqlite3"
    store = DeviceStore(path)
    assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0

    def in_main_file() -> int:
        main = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
        try:
            return main.execute("SELECT COUNT(*) FROM decisions").fetchone()[0]
        except sqlite3.OperationalError:  # not even the schema is in the main file yet
            return 0
        finally:
            main.close()

    store.start()
    try:
        for i in range(CHECKPOINT_EVERY - 1):
            await store.add_decision(f"{i:032x}", "t", np.ones(3))
        assert in_main_file() == 0  # all of it still only in the WAL
        await store.add_decision(f"{CHECKPOINT_EVERY:032x}", "t", np.ones(3))
        assert in_main_file() == CHECKPOINT_EVERY
    finally:
        await store.stop()
        store.close()
