"""The device's embedded storage: tombstones of used decisions and the durable report outbox.

One SQLite file in WAL mode (``<data_dir>/device/device.sqlite3``):

- ``used_decisions``: the identity (``services.device.decision_ids``: the nonce, ordered by issue
  time) of every decision whose feedback was recorded, written in the same transaction that
  appends the sealed report to the outbox, so a second feedback is told 409. An open decision is
  not stored at all: its state travels sealed inside its id, so ``decide`` writes nothing and no
  feature vector reaches this file. Tombstones are pruned by key range once older than
  ``used_decision_ttl`` (no id that old opens any more: ``unused_decision_ttl`` is shorter).
- ``outbox``: sealed reports not yet acknowledged by the shuffler, with their transport:
  ``reports`` (``EncryptedReport`` JSON, HPKE) or ``paillier`` (``EncryptedCounts`` JSON,
  Paillier, with its key id). A row is deleted only after the shuffler's 202, so a shuffler outage
  or a device crash loses nothing; the stored bytes are what every retry sends.
- ``counters``: monotone totals shown by ``GET /v1/status`` (feedbacks, uploaded, dropped,
  withheld).
- ``person_reports`` (issue 24): the reports queued per task, person and period, counted in the
  transaction that queues each one, so no report beyond a task's bound k is ever queued (a
  report not queued never leaves); a person is named by an HMAC of the task and her user key
  under ``secrets.person_key`` — the user key itself is not stored. Rows of past periods are
  pruned. Deleting the store forgets the counts (and the reports not yet sent) together: a
  database made anew records when (``secrets.created_ms``), and a decision issued before that is
  refused (its tombstone, if it was used, went with the old file); the per-person counts start
  again at 0, which is why ``--init`` alone does not replace a lost database of a device whose
  tasks bound persons (``services.common.datadir``: ``--forget-persons``).

Every operation (reads too: one connection, one writer) goes through a ``GroupCommitter`` that
commits whatever requests have queued up in a single transaction (group commit), and every
request is answered only once its group is on disk: under concurrency many feedbacks and
uploads share one fsync. Each request runs inside its own SAVEPOINT, so a failing request rolls
back alone and never changes state. The commit runs on the event loop's thread (``in_loop``) and
the fsync in a worker thread (``sync_wal``): the loop serves requests while the disk works, and
what they submit forms the next group. For that the connection runs ``synchronous=NORMAL`` (SQLite
then syncs the WAL only around checkpoints, and the database file after them) and the store
fsyncs the WAL itself after each commit, before answering: the same guarantee as ``FULL`` (an
acknowledged commit survives a power cut), without a blocking fsync on the loop's thread. The
same worker thread checkpoints the WAL every ``CHECKPOINT_EVERY`` groups; SQLite's automatic
checkpoint, which would run inside a COMMIT on the loop's thread, is off.

The schema is versioned (``services.common.sqlite.migrate``): migration 1 is the schema of the
release that introduced versioning; migration 2 adds the transport columns to a store written by
a device from before them (it finds them present in any other); migration 4 replaces the table
of stored decisions by ``used_decisions`` (decisions open at the upgrade are forgotten: their
feedback gets 404, as after ``unused_decision_ttl``); migration 5 adds ``person_reports`` and
the person key; migration 6 renames the Paillier transport's rows from ``secure-sum`` to
``paillier``.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from privbandit.services.common.group_commit import GroupCommitter, Outcome
from privbandit.services.common.sqlite import (
    Migration,
    WalSync,
    add_columns,
    migrate,
    open_db,
    savepoint,
    schema_version,
    transaction,
)
from privbandit.services.device.decision_ids import uid_floor
from privbandit.services.device.errors import DecisionUsed

log = logging.getLogger(__name__)

T = TypeVar("T")
Op = Callable[[sqlite3.Connection], Any]

SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS decisions (
    id TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    x BLOB,                      -- chosen arm's features (float64 LE); NULL once used
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    task TEXT NOT NULL,
    report TEXT NOT NULL,        -- EncryptedReport or EncryptedCounts JSON, sent as stored
    transport TEXT NOT NULL DEFAULT 'reports',  -- 'reports' | 'secure-sum'
    key_id INTEGER               -- secure-sum: the Paillier key id the counts are encrypted under
);
CREATE INDEX IF NOT EXISTS outbox_task ON outbox (task, seq);
CREATE TABLE IF NOT EXISTS dead_letters (
    seq INTEGER PRIMARY KEY,
    task TEXT NOT NULL,
    report TEXT NOT NULL,
    reason TEXT NOT NULL,
    created REAL NOT NULL,
    transport TEXT NOT NULL DEFAULT 'reports'
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""

MIGRATIONS: list[Migration] = [
    SCHEMA_V1,
    # Columns added with the Paillier transport; an unversioned store (version 1) from an older
    # device lacks them, and gets them with the defaults that describe its rows (HPKE reports).
    add_columns(
        ("outbox", "transport", "TEXT NOT NULL DEFAULT 'reports'"),
        ("outbox", "key_id", "INTEGER"),
        ("dead_letters", "transport", "TEXT NOT NULL DEFAULT 'reports'"),
    ),
    # Pruning finds expired decisions of each kind by age without scanning the others: open
    # decisions expire after minutes, tombstones after an hour.
    """
    CREATE INDEX IF NOT EXISTS decisions_open_age ON decisions (created) WHERE x IS NOT NULL;
    CREATE INDEX IF NOT EXISTS decisions_used_age ON decisions (created) WHERE x IS NULL;
    """,
    # Decisions travel sealed in their ids (``decision_ids``): only used ones are remembered.
    # The old table held plaintext feature vectors; dropping it erases them.
    """
    CREATE TABLE IF NOT EXISTS used_decisions (id BLOB PRIMARY KEY) WITHOUT ROWID;
    DROP TABLE IF EXISTS decisions;
    """,
    # Returning users (issue 24): reports queued per person, task and period, and the key that
    # names persons here (``services.device.persons``), created with the table it keys.
    lambda conn: _person_tables(conn),
    # The Paillier transport's name was 'secure-sum' (issue 45 item 4: 'secure-sum' names any
    # secure sum, prio3 too); rows queued or dead-lettered under it are still sent or listed.
    # (The comments of SCHEMA_V1 above keep the old name: a released migration never changes.)
    """
    UPDATE outbox SET transport = 'paillier' WHERE transport = 'secure-sum';
    UPDATE dead_letters SET transport = 'paillier' WHERE transport = 'secure-sum';
    """,
]


def _person_tables(conn: sqlite3.Connection) -> None:
    # One statement at a time: ``executescript`` would commit the migration's transaction.
    conn.execute("""
    CREATE TABLE IF NOT EXISTS person_reports (
        task TEXT NOT NULL,
        person BLOB NOT NULL,        -- HMAC-SHA256 of (task, user key) under person_key
        period INTEGER NOT NULL,     -- floor(unix time / period length); 0 for forever
        reports INTEGER NOT NULL,    -- reports of this person queued in this period
        PRIMARY KEY (task, person, period)
    ) WITHOUT ROWID""")
    conn.execute("CREATE TABLE IF NOT EXISTS secrets (name TEXT PRIMARY KEY, value BLOB NOT NULL)")
    conn.execute("INSERT OR IGNORE INTO secrets (name, value) VALUES ('person_key', ?)",
                 (os.urandom(32),))

# How many queued write requests one transaction may absorb (bounds commit latency).
GROUP_COMMIT_MAX = 512
# Tombstones forgotten per pruning step (one step per group commit, so a large backlog of old
# tombstones never holds up the feedback requests committed with it for long).
PRUNE_CHUNK = 2000
REPORTS = "reports"
PAILLIER = "paillier"


# Group commits between two checkpoints of the WAL (``WalSync.checkpoint``): at a busy device's
# ~100 groups/s, one every ~0.3 s, so the WAL stays a few MB.
CHECKPOINT_EVERY = 32

@dataclass(frozen=True)
class OutboxItem:
    seq: int
    task: str
    report: str
    transport: str = REPORTS
    key_id: int | None = None


@dataclass
class Counters:
    """In-memory mirror of committed totals (updated only after a commit succeeds)."""

    feedbacks: int = 0
    uploaded: int = 0
    outbox_pending: int = 0
    dead_letters: int = 0
    # Secure-sum reports discarded because they were encrypted under a Paillier key the analyzer
    # no longer has (see ``DeviceStore.drop_stale``).
    dropped: int = 0
    # Feedbacks answered whose report was withheld: their person had reached the task's bound.
    withheld: int = 0


@dataclass(frozen=True)
class PersonSlot:
    """Where a feedback's report counts against its person's bound (``services.device.
    persons``): the person's name on this device, the period and the bound k."""

    person: bytes
    period: int
    k: int


class DeviceStore:
    """SQLite storage behind a group committer; use from one asyncio event loop, between
    ``start()`` and ``stop()``."""

    def __init__(self, path: Path, on_group: Callable[[int], None] | None = None) -> None:
        """``on_group(n)``: called on the event loop after each group commit of ``n`` operations
        (the device's ``commit_group_ops`` metric)."""
        self.path = path
        # One connection, used by the committer on the event loop's thread (and at start-up): a
        # short lock timeout.
        self._conn = open_db(path, timeout=5.0)
        # Durability comes from ``sync_wal`` after each commit (module docstring).
        self._conn.execute("PRAGMA synchronous=NORMAL")
        # Checkpoints in the sync's worker thread, not inside a COMMIT on the loop (``WalSync``).
        self._conn.execute("PRAGMA wal_autocheckpoint=0")
        self._wal_sync = WalSync(path, checkpoint_every=CHECKPOINT_EVERY)
        fresh = schema_version(self._conn) == 0
        migrate(self._conn, MIGRATIONS, store="device")
        if fresh:
            with transaction(self._conn):
                self._conn.execute("INSERT OR IGNORE INTO secrets (name, value) "
                                   "VALUES ('created_ms', ?)", (int(time.time() * 1000),))
        self.counters = self._load_counters()
        self.person_key = self._load_person_key()
        self.created = self._load_created()
        # Outbox room claimed by feedbacks in progress (``reserve_outbox``); event loop only.
        self._outbox_claims = 0
        self._committer: GroupCommitter[Op, Any] = GroupCommitter(
            "device store", self._commit_group, max_items=GROUP_COMMIT_MAX, in_loop=True,
            sync=self.sync_wal,
            after=None if on_group is None else (lambda items, _: on_group(len(items))),
        )

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
            dropped=int(rows.get("dropped", 0)),
            withheld=int(rows.get("withheld", 0)),
        )

    def _load_person_key(self) -> bytes:
        """The key naming persons in ``person_reports`` (created by migration 5, kept in this
        file: it lives and dies with the counters it keys)."""
        row = self._conn.execute("SELECT value FROM secrets WHERE name = 'person_key'").fetchone()
        return bytes(row[0])

    def _load_created(self) -> float:
        """When this database was made (seconds since the epoch, to the millisecond); 0 for
        one made before this was recorded. A decision issued before it cannot be checked
        against this store's tombstones: it was issued when another database (lost, then
        replaced with ``--init``) held them, so its feedback is refused
        (``decisions.open_decision``) rather than counted a second time."""
        row = self._conn.execute("SELECT value FROM secrets WHERE name = 'created_ms'").fetchone()
        return 0.0 if row is None else int(row[0]) / 1000

    def start(self) -> None:
        self._committer.start()

    async def stop(self) -> None:
        """Finish queued writes; later ones are refused (503)."""
        await self._committer.stop()

    def close(self) -> None:
        self._conn.close()
        self._wal_sync.close()

    def sync_wal(self) -> None:
        """fsync the write-ahead log (``WalSync``): every transaction committed so far is then
        on disk. The committer runs it in a worker thread after each group."""
        self._wal_sync()

    def _commit_group(self, ops: list[Op]) -> list[Outcome[Any]]:
        """(On the event loop's thread: the committer is ``in_loop``; ``sync_wal`` follows in a
        worker thread.) One transaction for the group, each op in its own savepoint: an op that
        raises is undone alone and gets its exception; if the commit itself fails, every op of
        the group does (``GroupCommitter``)."""
        outcomes: list[Outcome[Any]] = [None] * len(ops)
        with transaction(self._conn) as conn:
            for i, op in enumerate(ops):
                try:
                    with savepoint(conn):
                        outcomes[i] = op(conn)
                except Exception as exc:  # the request's own error: undo it alone
                    outcomes[i] = exc
        return outcomes

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` inside the next group's transaction; its value once committed."""
        return await self._committer.submit(fn)

    # -- backpressure --------------------------------------------------------------------------

    def reserve_outbox(self, limit: int) -> bool:
        """Claim room for one report in the outbox, unless the reports in it plus the claims of
        feedbacks in progress already reach ``limit`` (then False). Event loop only; every True
        must be followed by one ``release_outbox`` once that feedback is stored or refused."""
        if self.counters.outbox_pending + self._outbox_claims >= limit:
            return False
        self._outbox_claims += 1
        return True

    def release_outbox(self) -> None:
        self._outbox_claims -= 1

    # -- operations ----------------------------------------------------------------------------

    async def decision_used(self, uid: bytes) -> bool:
        """Whether the decision ``uid`` has a tombstone (its feedback was recorded)."""
        return await self.run(lambda conn: conn.execute(
            "SELECT 1 FROM used_decisions WHERE id = ?", (uid,)).fetchone() is not None)

    async def complete_feedback(
        self,
        uid: bytes,
        task: str,
        report_json: str,
        transport: str = REPORTS,
        key_id: int | None = None,
        slot: PersonSlot | None = None,
    ) -> int | None:
        """Atomically record the decision ``uid`` as used and queue its sealed report; returns
        the outbox seq. ``DecisionUsed`` (nothing queued) if it was used before.

        ``transport`` says where the uploader sends it (``reports``, ``paillier`` or ``prio3``);
        ``key_id`` is the Paillier key id of a Paillier report. Of two concurrent feedbacks
        for one decision exactly one inserts the tombstone; the other gets ``DecisionUsed``.

        ``slot``: the feedback's person, period and bound k. If the person already has k
        reports queued in the period, the report is withheld: the decision is recorded as used,
        ``withheld`` counted, nothing queued, and None returned. The count, the tombstone and
        the outbox row commit in one transaction (ops run one at a time on the store's one
        connection), so neither concurrent feedbacks of one person nor a crash at any point
        can queue a report beyond the bound.
        """

        def op(conn: sqlite3.Connection) -> int | None:
            try:
                conn.execute("INSERT INTO used_decisions (id) VALUES (?)", (uid,))
            except sqlite3.IntegrityError:
                raise DecisionUsed("feedback for this decision was already given") from None
            if slot is not None:
                row = conn.execute(
                    "SELECT reports FROM person_reports WHERE task = ? AND person = ? AND "
                    "period = ?", (task, slot.person, slot.period)).fetchone()
                if row is not None and int(row[0]) >= slot.k:
                    _bump(conn, "withheld", 1)
                    return None
                conn.execute(
                    "INSERT INTO person_reports (task, person, period, reports) "
                    "VALUES (?, ?, ?, 1) ON CONFLICT (task, person, period) "
                    "DO UPDATE SET reports = reports + 1", (task, slot.person, slot.period))
            seq = conn.execute(
                "INSERT INTO outbox (task, report, transport, key_id) VALUES (?, ?, ?, ?)",
                (task, report_json, transport, key_id),
            ).lastrowid
            assert seq is not None  # an INSERT always sets lastrowid
            _bump(conn, "feedbacks", 1)
            return seq

        seq = await self.run(op)
        if seq is None:
            self.counters.withheld += 1
            return None
        self.counters.feedbacks += 1
        self.counters.outbox_pending += 1
        return seq

    async def person_reports(self, task: str, person: bytes, period: int) -> int:
        """Reports of ``person`` queued for ``task`` in ``period`` (0 if none)."""
        row = await self.run(lambda conn: conn.execute(
            "SELECT reports FROM person_reports WHERE task = ? AND person = ? AND period = ?",
            (task, person, period)).fetchone())
        return 0 if row is None else int(row[0])

    async def prune_periods(self, current: dict[str, int]) -> int:
        """Forget the counts of periods before each task's ``current`` one (no report of theirs
        can be queued any more); returns how many rows."""

        def op(conn: sqlite3.Connection) -> int:
            return sum(conn.execute(
                "DELETE FROM person_reports WHERE task = ? AND period < ?", (task, period)
            ).rowcount for task, period in current.items())

        return await self.run(op)

    async def outbox_head(
        self, limit: int, exclude: set[tuple[str, str]] | None = None
    ) -> list[OutboxItem]:
        """The oldest outbox items of one (task, transport) group (one group per upload: the
        transports go to different endpoints): the group of the oldest item not in ``exclude``
        (groups in backoff), so one group's trouble does not block another."""
        skip = sorted(exclude or ())

        def op(conn: sqlite3.Connection) -> list[OutboxItem]:
            where = " AND ".join("NOT (task = ? AND transport = ?)" for _ in skip)
            params = [v for group in skip for v in group]
            first = conn.execute(
                f"SELECT task, transport FROM outbox {'WHERE ' + where if skip else ''} "
                "ORDER BY seq LIMIT 1",
                params,
            ).fetchone()
            if first is None:
                return []
            rows = conn.execute(
                "SELECT seq, task, report, transport, key_id FROM outbox "
                "WHERE task = ? AND transport = ? ORDER BY seq LIMIT ?",
                (first[0], first[1], limit),
            ).fetchall()
            return [
                OutboxItem(int(s), str(t), str(r), str(tr), None if k is None else int(k))
                for s, t, r, tr, k in rows
            ]

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
                        "INSERT INTO dead_letters (seq, task, report, reason, created, transport)"
                        " VALUES (?, ?, ?, ?, ?, ?)",
                        (it.seq, it.task, it.report, reason[:1000], now, it.transport),
                    )
                    moved += 1
            return moved

        moved = await self.run(op)
        self.counters.outbox_pending -= moved
        self.counters.dead_letters += moved

    async def drop_stale(
        self, task: str, current_key_id: int, transport: str = PAILLIER
    ) -> int:
        """Delete the task's outbox items of ``transport`` (Paillier) encrypted under any key
        (Paillier) other than ``current_key_id``; returns how many (counted in ``dropped``).

        Only for keys the analyzer no longer holds: such an item can never be counted, and it
        cannot be re-encrypted either, since the device keeps no plaintext (the randomized
        counts exist only inside the ciphertext; the decision's state was sealed in its id,
        which the device does not keep). Re-randomizing instead would make a second, different
        report for one feedback. So it is dropped, loudly (log, ``/v1/status``, metrics)."""

        def op(conn: sqlite3.Connection) -> int:
            n = conn.execute(
                "DELETE FROM outbox WHERE task = ? AND transport = ? "
                "AND (key_id IS NULL OR key_id != ?)",
                (task, transport, current_key_id),
            ).rowcount
            if n:
                _bump(conn, "dropped", n)
            return n

        n = await self.run(op)
        self.counters.outbox_pending -= n
        self.counters.dropped += n
        return n

    async def prune_decisions(self, used_ttl: float, chunk: int = PRUNE_CHUNK) -> int:
        """Forget tombstones of decisions issued more than ``used_ttl`` seconds ago, so the
        table does not grow without bound; returns how many. Ids are ordered by issue time, so
        this is a key range. At most ``chunk`` per transaction (a transaction the requests of
        the moment share), as many transactions as it takes."""
        floor = uid_floor(int((time.time() - used_ttl) * 1000))

        def op(conn: sqlite3.Connection) -> int:
            return conn.execute(
                "DELETE FROM used_decisions WHERE id IN (SELECT id FROM used_decisions "
                "WHERE id < ? ORDER BY id LIMIT ?)",
                (floor, chunk),
            ).rowcount

        total = 0
        while True:
            n = await self.run(op)
            total += n
            if n == 0:
                return total


def _bump(conn: sqlite3.Connection, name: str, by: int) -> None:
    conn.execute(
        "INSERT INTO counters (name, value) VALUES (?, ?) "
        "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
        (name, by),
    )
