"""The device's embedded storage: decisions awaiting feedback and the durable report outbox.

One SQLite file in WAL mode (``<data_dir>/device/device.sqlite3``):

- ``decisions``: the chosen arm's feature vector of each decision, kept *only* here until the
  feedback arrives. Feedback replaces the vector by NULL (a tombstone, so that a second feedback is
  told 409 rather than 404) in the same transaction that appends the sealed report to the outbox.
- ``outbox``: sealed reports (``EncryptedReport`` JSON) not yet acknowledged by the shuffler. A row
  is deleted only after the shuffler's 202, so a shuffler outage or a device crash loses nothing.
- ``counters``: monotone totals shown by ``GET /v1/status``.

All writes go through one writer thread that commits whatever requests have queued up in a single
transaction (group commit): with ``synchronous=FULL`` every acknowledged feedback is on disk, and
under concurrency many feedbacks share one fsync. Each request runs inside its own SAVEPOINT, so a
failing request rolls back alone and never changes state.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

log = logging.getLogger(__name__)

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
    id TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    x BLOB,                      -- chosen arm's features (float64 LE); NULL once used
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    task TEXT NOT NULL,
    report TEXT NOT NULL         -- EncryptedReport JSON
);
CREATE INDEX IF NOT EXISTS outbox_task ON outbox (task, seq);
CREATE TABLE IF NOT EXISTS dead_letters (
    seq INTEGER PRIMARY KEY,
    task TEXT NOT NULL,
    report TEXT NOT NULL,
    reason TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""

# How many queued write requests one transaction may absorb (bounds commit latency).
GROUP_COMMIT_MAX = 512


class DecisionNotFound(LookupError):
    """No decision with this id for this task (never issued, or pruned)."""


class DecisionUsed(RuntimeError):
    """Feedback for this decision was already recorded."""


@dataclass(frozen=True)
class OutboxItem:
    seq: int
    task: str
    report: str


@dataclass
class Counters:
    """In-memory mirror of committed totals (updated only after a commit succeeds)."""

    feedbacks: int = 0
    uploaded: int = 0
    outbox_pending: int = 0
    dead_letters: int = 0


class Store:
    """SQLite storage with a group-committing writer thread; use from one asyncio event loop."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        # FULL: a feedback answered 202 survives a power cut, not only a process crash.
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA busy_timeout=5000")
        self._conn.executescript(SCHEMA)
        self.counters = self._load_counters()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._writer, name="device-store", daemon=True)
        self._closed = False
        self._thread.start()

    # -- lifecycle ---------------------------------------------------------------------------

    def _load_counters(self) -> Counters:
        rows = dict(self._conn.execute("SELECT name, value FROM counters").fetchall())
        pending = self._conn.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]
        dead = self._conn.execute("SELECT COUNT(*) FROM dead_letters").fetchone()[0]
        return Counters(
            feedbacks=int(rows.get("feedbacks", 0)),
            uploaded=int(rows.get("uploaded", 0)),
            outbox_pending=int(pending),
            dead_letters=int(dead),
        )

    def close(self) -> None:
        """Finish queued writes, then close the connection."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join(timeout=10)
        self._conn.close()

    # -- the writer thread ---------------------------------------------------------------------

    def _writer(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            items = [item]
            stop = False
            while len(items) < GROUP_COMMIT_MAX:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                items.append(nxt)
            self._commit_group(items)
            if stop:
                return

    def _commit_group(self, items: list[tuple[Callable[[sqlite3.Connection], Any], Any, Any]]):
        results: list[tuple[Any, Any, BaseException | None]] = []
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            for fn, loop, fut in items:
                conn.execute("SAVEPOINT op")
                try:
                    value = fn(conn)
                except Exception as exc:  # the request's own error: undo it alone
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                    results.append(((loop, fut), None, exc))
                else:
                    conn.execute("RELEASE op")
                    results.append(((loop, fut), value, None))
            conn.execute("COMMIT")
        except Exception as exc:  # the commit itself failed: nothing of this group happened
            log.exception("device store: group commit failed")
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            results = [((loop, fut), None, exc) for _, loop, fut in items]
        for (loop, fut), value, exc in results:
            loop.call_soon_threadsafe(_resolve, fut, value, exc)

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in the writer thread inside a transaction; its value once committed."""
        if self._closed:
            raise RuntimeError("store is closed")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        # Retrieve the outcome even if the caller went away, so no "never retrieved" warnings.
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._queue.put((fn, loop, fut))
        # shield: a cancelled request must not leave the future unresolved for the writer.
        return await asyncio.shield(fut)

    # -- operations ----------------------------------------------------------------------------

    async def add_decision(self, decision_id: str, task: str, x: np.ndarray) -> None:
        blob = np.asarray(x, dtype="<f8").tobytes()

        def op(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO decisions (id, task, x, created) VALUES (?, ?, ?, ?)",
                (decision_id, task, blob, time.time()),
            )

        await self.run(op)

    async def get_decision(self, decision_id: str, task: str) -> np.ndarray:
        """The stored feature vector; raises DecisionNotFound / DecisionUsed."""

        def op(conn: sqlite3.Connection) -> bytes:
            row = conn.execute(
                "SELECT x FROM decisions WHERE id = ? AND task = ?", (decision_id, task)
            ).fetchone()
            if row is None:
                raise DecisionNotFound(decision_id)
            if row[0] is None:
                raise DecisionUsed(decision_id)
            return bytes(row[0])

        return np.frombuffer(await self.run(op), dtype="<f8").astype(float)

    async def complete_feedback(self, decision_id: str, task: str, report_json: str) -> int:
        """Atomically tombstone the decision and queue its sealed report; returns the outbox seq.

        The decision is re-checked inside the transaction, so of two concurrent feedbacks for one
        decision exactly one succeeds and the other gets DecisionUsed.
        """

        def op(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                "UPDATE decisions SET x = NULL WHERE id = ? AND task = ? AND x IS NOT NULL",
                (decision_id, task),
            )
            if cur.rowcount != 1:
                exists = conn.execute(
                    "SELECT 1 FROM decisions WHERE id = ? AND task = ?", (decision_id, task)
                ).fetchone()
                raise DecisionUsed(decision_id) if exists else DecisionNotFound(decision_id)
            seq = conn.execute(
                "INSERT INTO outbox (task, report) VALUES (?, ?)", (task, report_json)
            ).lastrowid
            _bump(conn, "feedbacks", 1)
            return int(seq)

        seq = await self.run(op)
        self.counters.feedbacks += 1
        self.counters.outbox_pending += 1
        return seq

    async def outbox_head(self, limit: int, exclude: set[str] | None = None) -> list[OutboxItem]:
        """The oldest outbox items of one task (one task per upload): the task of the oldest item
        not in ``exclude`` (tasks in backoff), so one task's trouble does not block another."""
        skip = sorted(exclude or ())

        def op(conn: sqlite3.Connection) -> list[OutboxItem]:
            marks = ",".join("?" * len(skip))
            where = f"WHERE task NOT IN ({marks})" if skip else ""
            first = conn.execute(
                f"SELECT task FROM outbox {where} ORDER BY seq LIMIT 1", skip
            ).fetchone()
            if first is None:
                return []
            rows = conn.execute(
                "SELECT seq, task, report FROM outbox WHERE task = ? ORDER BY seq LIMIT ?",
                (first[0], limit),
            ).fetchall()
            return [OutboxItem(int(s), str(t), str(r)) for s, t, r in rows]

        return await self.run(op)

    async def mark_uploaded(self, seqs: list[int]) -> int:
        """Delete items the shuffler acknowledged; returns how many were removed."""

        def op(conn: sqlite3.Connection) -> int:
            removed = 0
            for seq in seqs:
                removed += conn.execute("DELETE FROM outbox WHERE seq = ?", (seq,)).rowcount
            _bump(conn, "uploaded", removed)
            return removed

        removed = await self.run(op)
        self.counters.uploaded += removed
        self.counters.outbox_pending -= removed
        return removed

    async def dead_letter(self, items: list[OutboxItem], reason: str) -> None:
        """Move items the shuffler permanently refused out of the queue (kept for inspection)."""

        def op(conn: sqlite3.Connection) -> int:
            moved = 0
            now = time.time()
            for it in items:
                if conn.execute("DELETE FROM outbox WHERE seq = ?", (it.seq,)).rowcount:
                    conn.execute(
                        "INSERT INTO dead_letters (seq, task, report, reason, created) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (it.seq, it.task, it.report, reason[:1000], now),
                    )
                    moved += 1
            return moved

        moved = await self.run(op)
        self.counters.outbox_pending -= moved
        self.counters.dead_letters += moved

    async def prune_decisions(self, used_ttl: float, unused_ttl: float) -> int:
        """Forget tombstones older than ``used_ttl`` and unanswered decisions older than
        ``unused_ttl`` seconds, so the table does not grow without bound."""
        now = time.time()

        def op(conn: sqlite3.Connection) -> int:
            a = conn.execute(
                "DELETE FROM decisions WHERE x IS NULL AND created < ?", (now - used_ttl,)
            ).rowcount
            b = conn.execute(
                "DELETE FROM decisions WHERE x IS NOT NULL AND created < ?", (now - unused_ttl,)
            ).rowcount
            return a + b

        return await self.run(op)


def _bump(conn: sqlite3.Connection, name: str, by: int) -> None:
    conn.execute(
        "INSERT INTO counters (name, value) VALUES (?, ?) "
        "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
        (name, by),
    )


def _resolve(fut: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)
