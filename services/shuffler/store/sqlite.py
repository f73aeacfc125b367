"""The shuffler's SQLite store: one file in WAL mode with ``synchronous=FULL``.

Tables
- ``seen``: sha256(enc ‖ ct) of every ciphertext ever accepted, per task, and of every Paillier
  report's tag (domain-separated, ``base.tag_hash``): duplicate detection (``base.admit``), the
  only trace kept of a report once its batch is acknowledged.
- ``pending``: accepted reports waiting for their task's batch to fill (ciphertext bytes, and a
  Paillier report's tag).
- ``batches`` / ``batch_reports``: formed batches with their members in shuffled order. Members are
  deleted when the analyzer acknowledges the batch; the batch row (id, task, size) stays.
- ``batch_sums``: Paillier tasks only, the encrypted sum (product of the members' Paillier
  ciphertexts) of a formed batch, with its members' tags and ciphertext digests (``members``, the
  JSON of ``SumMember``s). Storing it deletes the members in the same transaction (the sum is all
  that is ever forwarded, so no single ciphertext stays at rest longer than needed); it is
  deleted when the analyzer acknowledges the batch.
- ``counters``: per-task totals (``refused_stale_key``: accepted Paillier reports dropped
  because the analyzer's Paillier key changed, see ``refuse_stale_key``; ``refused_oversized``:
  reports refused at intake, ``base.admit``) and ``next_batch``, the schedule index k of the
  task's next batch (``base``: batch schedules; each batch keeps its own in ``batches.idx``).

Secure-sum reports (``EncryptedCounts``) use the same ``pending`` / ``batch_reports`` rows as HPKE
reports, with an empty ``enc`` and their tag in ``tag`` (``base.tag_bytes``: key id ‖ enc ‖ ct).

``accept`` makes uploads durable and forms every batch that became full in the SAME transaction,
so a report is, at every instant on disk, in exactly one of: pending, an unacknowledged batch, or
an acknowledged batch (counted by the analyzer).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from privbandit.services.common.metrics import TxMetrics
from privbandit.services.common.migrations import script
from privbandit.services.common.sqlite import (
    Migration,
    WalSync,
    add_columns,
    migrate,
    open_db,
    transaction,
)
from privbandit.services.shuffler.store import base
from privbandit.shared.core.schedule import BatchSchedule

# Migration 1 is the schema of the first release (databases from before versioning are at it).
SCHEMA_V1 = script("privbandit.services.shuffler.store", "sqlite", 1)

# Secure-sum report tags: with each pending or batched report, and with each stored sum.
SCHEMA_V3 = add_columns(
    ("pending", "tag", "BLOB"),
    ("batch_reports", "tag", "BLOB"),
    ("batch_sums", "members", "TEXT"),
)

_SCHEDULE_COLUMNS = add_columns(
    ("batches", "idx", "INTEGER"),
    ("counters", "next_batch", "INTEGER NOT NULL DEFAULT 0"),
    ("counters", "refused_oversized", "INTEGER NOT NULL DEFAULT 0"),
)


def schema_v4(conn: sqlite3.Connection) -> None:
    """Batch schedules (issue 22): ``batches.idx``, a batch's index k in its task's schedule
    (NULL for batches formed before schedules, all of one fixed length); ``counters.next_batch``,
    the index of the task's next batch, counted from the batches formed so far (it is never
    decreased: a dissolved batch's index is not reused); ``counters.refused_oversized``
    (``base.admit``). Idempotent, like the column additions before it: a file from before
    versioning may hold the columns already."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(counters)")}
    _SCHEDULE_COLUMNS(conn)
    if "next_batch" not in have:
        conn.execute("UPDATE counters SET next_batch = "
                     "(SELECT count(*) FROM batches WHERE batches.task = counters.task)")


MIGRATIONS: list[Migration] = [
    SCHEMA_V1,
    add_columns(("counters", "refused_stale_key", "INTEGER NOT NULL DEFAULT 0")),
    SCHEMA_V3,
    schema_v4,
]


class ShufflerStore:
    """Thread-safe access to the shuffler's SQLite file (one connection behind a lock).

    Intake's group commits run on the event loop's thread (``accept_in_loop``): on a local disk
    one fsync takes a fraction of a millisecond, less than the two thread hand-offs a group
    would otherwise cost under load (docs/benchmarks/load.md, session 6). SQLite's automatic WAL
    checkpoint, which would run inside such a COMMIT and stall the loop, is off; ``checkpoint``
    runs a PASSIVE one on a connection of its own, in a worker thread, every
    ``CHECKPOINT_EVERY`` groups."""

    # One process forms and delivers every batch: delivery is woken, never polls.
    poll_interval: float | None = None
    accept_in_loop = True

    def __init__(self, path: Path, schedules: Mapping[str, int | BatchSchedule]) -> None:
        self.path = path
        self.schedules = {t: base.schedule_of(s) for t, s in schedules.items()}
        self._conn = open_db(path)
        # Checkpoints in a worker thread (``checkpoint``), not inside a COMMIT on the loop.
        self._conn.execute("PRAGMA wal_autocheckpoint=0")
        self._wal = WalSync(path)
        self._lock = threading.Lock()
        with self._lock:
            migrate(self._conn, MIGRATIONS, store="shuffler")
            with transaction(self._conn):
                self._conn.executemany(
                    "INSERT OR IGNORE INTO counters (task) VALUES (?)", [(t,) for t in schedules]
                )
            # Reports stored and not yet acknowledged, per task: kept in memory as committed
            # (``accept`` adds, ``acknowledge`` subtracts), read by intake's backpressure check.
            self._stored: dict[str, int] = {t: self._count_stored(t) for t in schedules}

    def close(self) -> None:
        with self._lock:
            self._conn.close()
        self._wal.close()

    def observe(self, metrics: TxMetrics) -> None:
        """Nothing to count: a SQLite transaction is never retried."""

    def checkpoint(self) -> None:
        """(Worker thread.) A PASSIVE checkpoint of the WAL (``WalSync.checkpoint``): copies
        what it can into the database file without waiting for, or blocking, the writer."""
        self._wal.checkpoint()

    def _count_stored(self, task: str) -> int:
        """Pending reports plus the members of unacknowledged batches (caller holds the lock)."""
        pending = self._conn.execute(
            "SELECT count(*) FROM pending WHERE task = ?", (task,)
        ).fetchone()[0]
        in_batches = self._conn.execute(
            "SELECT coalesce(sum(size), 0) FROM batches WHERE task = ? AND acked = 0", (task,)
        ).fetchone()[0]
        return int(pending) + int(in_batches)

    def stored(self, task: str) -> int:
        """Reports of ``task`` stored and not yet acknowledged by the analyzer (waiting for their
        batch to fill, or in a batch in flight), as committed. Cheap: no SQL."""
        return self._stored.get(task, 0)

    def accept(
        self, uploads: Sequence[base.Upload]
    ) -> tuple[list[base.AcceptResult], dict[str, int]]:
        """Make a group of uploads durable in one transaction (group commit) and form every batch
        that became full. Returns one result per upload and the batches formed per task."""
        results: list[base.AcceptResult] = []
        touched: set[str] = set()
        with self._lock, transaction(self._conn):
            for upload in uploads:
                done = self._admit(upload, self._next_size(upload.task))
                accepted = len(done.rows)
                self._conn.executemany(
                    "INSERT INTO pending (task, key_id, enc, ct, tag) VALUES (?, ?, ?, ?, ?)",
                    [(upload.task, *row) for row in done.rows],
                )
                self._conn.execute(
                    "UPDATE counters SET accepted = accepted + ?, duplicates = duplicates + ?, "
                    "refused_oversized = refused_oversized + ? WHERE task = ?",
                    (accepted, done.duplicates, done.refused, upload.task),
                )
                if accepted:
                    touched.add(upload.task)
                results.append(base.AcceptResult(accepted, done.duplicates, done.refused))
            formed = {task: self._form_batches(task) for task in sorted(touched)}
        # Committed (the transaction above raised otherwise).
        for upload, result in zip(uploads, results, strict=True):
            self._stored[upload.task] = self._stored.get(upload.task, 0) + result.accepted
        return results, {t: n for t, n in formed.items() if n}

    def _next_batch(self, task: str) -> int:
        """The schedule index k of ``task``'s next batch, as stored (caller holds the
        transaction)."""
        row = self._conn.execute(
            "SELECT next_batch FROM counters WHERE task = ?", (task,)).fetchone()
        return int(row[0]) if row else 0

    def _next_size(self, task: str) -> int:
        """l_k of ``task``'s next batch (caller holds the transaction)."""
        return self.schedules[task].size(self._next_batch(task))

    def _admit(self, upload: base.Upload, limit: int) -> base.Admission:
        """Apply the duplicate rule (``base.admit``) to one upload, in the caller's transaction:
        every ``seen`` entry it may add is inserted, those already present are ``known``, and
        the new ones the rule does not keep are deleted again. ``limit``: the next batch's
        length (an oversized share is refused)."""
        candidates = [base.Candidate.of(r) for r in upload.reports]
        entries = base.seen_entries(candidates)
        inserted = {
            h for h in entries
            if self._conn.execute(
                "INSERT OR IGNORE INTO seen (task, hash) VALUES (?, ?)", (upload.task, h)
            ).rowcount == 1
        }
        done = base.admit(candidates, set(entries) - inserted, limit)
        self._conn.executemany(
            "DELETE FROM seen WHERE task = ? AND hash = ?",
            [(upload.task, h) for h in inserted - done.recorded],
        )
        return done

    def _form_batches(self, task: str) -> int:
        """While ``task`` has ≥ l_k pending reports (k = the stored index of its next batch),
        move the oldest l_k into batch k in a uniformly random order and move k on. Never forms
        a batch below its l_k. Caller holds the transaction."""
        conn = self._conn
        k = self._next_batch(task)
        formed = 0
        while True:
            l = self.schedules[task].size(k)
            # Is there an l-th pending report? An index probe: reading up to l - 1 reports
            # (their ciphertexts) on every commit only to find the batch not full would cost
            # O(l) per group commit.
            if conn.execute(
                "SELECT 1 FROM pending WHERE task = ? ORDER BY seq LIMIT 1 OFFSET ?",
                (task, l - 1),
            ).fetchone() is None:
                return formed
            batch_id, rows = base.shuffled(conn.execute(
                "SELECT seq, key_id, enc, ct, tag FROM pending WHERE task = ? ORDER BY seq "
                "LIMIT ?",
                (task, l),
            ).fetchall())
            conn.execute(
                "INSERT INTO batches (batch_id, task, size, idx) VALUES (?, ?, ?, ?)",
                (batch_id, task, l, k),
            )
            conn.executemany(
                "INSERT INTO batch_reports (batch_id, position, key_id, enc, ct, tag) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(batch_id, pos, key_id, enc, ct, tag)
                 for pos, (_, key_id, enc, ct, tag) in enumerate(rows)],
            )
            # The selected rows are exactly the task's l oldest, so "seq ≤ the largest" is them.
            conn.execute(
                "DELETE FROM pending WHERE task = ? AND seq <= ?",
                (task, max(row[0] for row in rows)),
            )
            k += 1
            conn.execute(
                "UPDATE counters SET batches_formed = batches_formed + 1, next_batch = ? "
                "WHERE task = ?", (k, task),
            )
            formed += 1

    def unacked(self, task: str, limit: int, exclude: frozenset[str] = frozenset()) -> list[str]:
        """Ids of the oldest unacknowledged batches of ``task`` (formation order), skipping
        ``exclude`` (those already being delivered)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT batch_id FROM batches WHERE task = ? AND acked = 0 ORDER BY seq LIMIT ?",
                (task, limit + len(exclude)),
            ).fetchall()
        return [r[0] for r in rows if r[0] not in exclude][:limit]

    def _unacked_batch(self, batch_id: str) -> tuple[str, int] | None:
        """(task, size) of an unacknowledged batch, None if acknowledged. Caller holds the lock."""
        return self._conn.execute(
            "SELECT task, size FROM batches WHERE batch_id = ? AND acked = 0", (batch_id,)
        ).fetchone()

    def _members(self, batch_id: str, columns: str) -> list[tuple[Any, ...]]:
        """A batch's stored members in their stored (shuffled) order. Caller holds the lock."""
        return self._conn.execute(
            f"SELECT {columns} FROM batch_reports WHERE batch_id = ? ORDER BY position",
            (batch_id,),
        ).fetchall()

    def load_batch(self, batch_id: str) -> base.Batch | None:
        """A stored unacknowledged batch with its members in their stored (shuffled) order."""
        with self._lock:
            row = self._unacked_batch(batch_id)
            if row is None:
                return None
            members = self._members(batch_id, "key_id, enc, ct")
        return base.batch(batch_id, row[0], members)

    def load_secure_batch(self, batch_id: str) -> base.SecureBatch | None:
        """A stored unacknowledged Paillier batch: its sum if computed, else its members."""
        with self._lock:
            row = self._unacked_batch(batch_id)
            if row is None:
                return None
            stored = self._conn.execute(
                "SELECT key_id, ct, members FROM batch_sums WHERE batch_id = ?", (batch_id,)
            ).fetchone()
            members = [] if stored is not None else self._members(batch_id, "key_id, ct, tag")
        return base.secure_batch(batch_id, row, stored, members)

    def save_sum(self, batch_id: str, key_id: int, count: int, ct: bytes, members: str) -> bool:
        """Store the encrypted sum of an unacknowledged batch with its ``members`` (JSON) and
        delete its members' rows, in ONE durable transaction. The sum is a deterministic
        function of the members, so whichever of two racing computations lands first is the
        same value. False if the batch was acknowledged meanwhile (then nothing changes)."""
        with self._lock, transaction(self._conn) as conn:
            live = self._unacked_batch(batch_id) is not None
            if live:
                conn.execute(
                    "INSERT OR IGNORE INTO batch_sums (batch_id, key_id, count, ct, members) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (batch_id, key_id, count, ct, members),
                )
                conn.execute("DELETE FROM batch_reports WHERE batch_id = ?", (batch_id,))
        return live

    def refuse_stale_key(self, task: str, key_id: int) -> base.StaleKeyRefusal:
        """A Paillier task once the analyzer's Paillier key is ``key_id``: a report held under
        another key can never be counted (no analyzer holds that key any more) and must never
        share a batch with reports under ``key_id`` (their product decrypts to nothing). In ONE
        transaction: such pending reports are deleted; an unacknowledged batch holding any (or
        whose stored sum is under another key) is dissolved: its stale members deleted, the
        others returned to pending, the batch forgotten (never delivered, so it is uncounted
        from ``batches_formed``; its schedule index is not reused: ``next_batch`` stays, so its
        members re-enter a batch at least as long); then full batches are formed again. Deleted
        reports are counted in ``refused_stale_key``."""
        with self._lock, transaction(self._conn) as conn:
            refused = conn.execute(
                "DELETE FROM pending WHERE task = ? AND key_id != ?", (task, key_id)
            ).rowcount
            doomed = base.dissolutions(conn.execute(
                "SELECT b.batch_id, b.size, s.key_id, (SELECT count(*) FROM batch_reports r "
                "WHERE r.batch_id = b.batch_id AND r.key_id != ?) FROM batches b LEFT JOIN "
                "batch_sums s ON s.batch_id = b.batch_id WHERE b.task = ? AND b.acked = 0 "
                "ORDER BY b.seq",
                (key_id, task),
            ).fetchall(), key_id)
            for gone in doomed:
                if not gone.has_sum:  # its members under key_id go back to pending
                    conn.execute(
                        "INSERT INTO pending (task, key_id, enc, ct, tag) SELECT ?, key_id, enc, "
                        "ct, tag FROM batch_reports WHERE batch_id = ? AND key_id = ? "
                        "ORDER BY position",
                        (task, gone.batch_id, key_id),
                    )
                for table in ("batch_reports", "batch_sums", "batches"):
                    conn.execute(f"DELETE FROM {table} WHERE batch_id = ?", (gone.batch_id,))
            refused += sum(gone.refused for gone in doomed)
            conn.execute(
                "UPDATE counters SET refused_stale_key = refused_stale_key + ?, "
                "batches_formed = batches_formed - ? WHERE task = ?",
                (refused, len(doomed), task),
            )
            formed = self._form_batches(task) if doomed else 0
        return base.StaleKeyRefusal(refused, len(doomed), formed)

    def has_sum(self, batch_id: str) -> bool:
        """Whether the encrypted sum of a batch is stored (False once acknowledged)."""
        with self._lock:
            return self._conn.execute(
                "SELECT 1 FROM batch_sums WHERE batch_id = ?", (batch_id,)
            ).fetchone() is not None

    def next_unacked(self, task: str) -> base.Batch | None:
        """The oldest batch of ``task`` the analyzer has not acknowledged."""
        ids = self.unacked(task, 1)
        return self.load_batch(ids[0]) if ids else None

    def acknowledge(self, batch_id: str) -> bool:
        """Mark a batch acknowledged and delete its ciphertexts or encrypted sum (one
        transaction).

        This commit alone runs with synchronous=NORMAL (no fsync of its own): if a crash loses
        it, the batch is simply re-sent with the same id and the analyzer answers "replayed".
        Later FULL commits flush it with them (the WAL is sequential).
        """
        with self._lock:
            conn = self._conn
            conn.execute("PRAGMA synchronous=NORMAL")
            try:
                with transaction(conn):
                    cur = conn.execute(
                        "UPDATE batches SET acked = 1 WHERE batch_id = ? AND acked = 0",
                        (batch_id,),
                    )
                    done = cur.rowcount == 1
                    size, task = 0, ""
                    if done:
                        size, task = conn.execute(
                            "SELECT size, task FROM batches WHERE batch_id = ?", (batch_id,)
                        ).fetchone()
                        conn.execute("DELETE FROM batch_reports WHERE batch_id = ?", (batch_id,))
                        conn.execute("DELETE FROM batch_sums WHERE batch_id = ?", (batch_id,))
                        conn.execute(
                            "UPDATE counters SET batches_acknowledged = batches_acknowledged + 1 "
                            "WHERE task = (SELECT task FROM batches WHERE batch_id = ?)",
                            (batch_id,),
                        )
            finally:
                conn.execute("PRAGMA synchronous=FULL")
            if done:
                self._stored[task] = self._stored.get(task, 0) - int(size)
        return done

    def catch_up(self, task: str, length: int) -> int:
        """Move ``task``'s next batch index on to the first whose batch is at least ``length``
        long (``base.catch_up_index``: the analyzer announced ``length``); the index reached."""
        with self._lock, transaction(self._conn) as conn:
            k = self._next_batch(task)
            to = base.catch_up_index(self.schedules[task], k, length)
            if to != k:
                conn.execute("UPDATE counters SET next_batch = ? WHERE task = ?", (to, task))
        return to

    def counts(self, task: str) -> base.TaskCounts:
        with self._lock:
            pending = self._conn.execute(
                "SELECT count(*) FROM pending WHERE task = ?", (task,)
            ).fetchone()[0]
            row = self._conn.execute(
                "SELECT accepted, duplicates, batches_formed, batches_acknowledged, "
                "refused_stale_key, refused_oversized, next_batch FROM counters WHERE task = ?",
                (task,),
            ).fetchone()
        return base.TaskCounts(pending, *(row or (0, 0, 0, 0, 0, 0, 0)))

    def batch_members(self, batch_id: str) -> int:
        """How many ciphertexts of a batch are still stored (0 once acknowledged)."""
        with self._lock:
            return self._conn.execute(
                "SELECT count(*) FROM batch_reports WHERE batch_id = ?", (batch_id,)
            ).fetchone()[0]
