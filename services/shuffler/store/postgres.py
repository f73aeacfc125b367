"""The shuffler's state in PostgreSQL: the same tables and guarantees as the SQLite store
(``services.shuffler.store.sqlite``), shared by N shuffler replicas on one database.

Its tables are named ``shuffler_*`` (the analyzer's ``analyzer_*``), so both services can share
one database schema.

What changes with several writers:

- Batch lengths follow the task's schedule (``base``: batch schedules): a replica that forms
  batches first locks the task's row of ``schedule`` (``next_batch`` = k), so formation is
  serialised per task across replicas and batch k's length l_k is decided once, from the
  committed index, in the transaction that forms it and moves the index on.
- Batches are claimed, never computed from a private view: ``SELECT … FROM pending … ORDER BY
  seq LIMIT l_k FOR UPDATE SKIP LOCKED`` inside a transaction, and a batch is formed only when
  exactly l_k rows came back. The rows are deleted from ``pending`` in the transaction that
  inserts them into ``batch_reports``, so no report enters two batches (a second replica skips
  locked rows and, after the commit, no longer sees them). The order is a uniform permutation
  from the OS CSPRNG (``secrets.SystemRandom().shuffle``, Fisher–Yates), as in SQLite.
- Uploads to two replicas that together fill a batch commit concurrently, and neither sees the
  other's uncommitted rows: after each commit the replica probes again (``form_batches``), and
  a background sweep does it every ``poll`` seconds, so no full batch is left behind.
- Each replica registers in ``replicas`` and heartbeats every ``poll`` seconds. A formed batch
  is owned by the replica that formed it, and only its owner delivers it (``unacked``); a batch
  whose owner has not been seen for ``dead_after`` seconds is taken over (its id kept, so the
  analyzer answers ``replayed`` if the dead replica's delivery had already landed).
- Counters are sharded per replica (``counters`` keyed by task and replica id) so replicas do
  not serialise on one hot row; ``counts`` sums the shards.
- ``stored`` (backpressure) is refreshed from the shared counters after every commit and every
  sweep: accepted − acknowledged − refused, over all replicas.

Every transaction goes through ``services.common.pg.Database.run_tx``: a commit deadlock between
two replicas (the same reports uploaded to both) rolls one back and it is run again, as is one
whose connection dropped, so neither is visible to clients.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql

from privbandit.services.common import pg
from privbandit.services.common.metrics import TxMetrics
from privbandit.services.common.migrations import scripts
from privbandit.services.shuffler.store import base
from privbandit.shared.core.schedule import BatchSchedule

log = logging.getLogger(__name__)

# Append only: a released migration never changes (a new one is a new file).
MIGRATIONS = scripts("privbandit.services.shuffler.store", "postgres")


class PgShufflerStore:
    """The shuffler store on PostgreSQL (see the module docstring); one per replica process.

    ``poll``: seconds between heartbeats and formation sweeps; ``dead_after``: seconds without
    a heartbeat after which a replica's batches are taken over."""

    # A commit is round trips to the server: intake runs it in a worker thread.
    accept_in_loop = False

    def __init__(
        self,
        url: str,
        schedules: Mapping[str, int | BatchSchedule],
        *,
        poll: float = 1.0,
        dead_after: float = 5.0,
    ) -> None:
        self.url = url
        self.schedules = {t: base.schedule_of(s) for t, s in schedules.items()}
        self.poll_interval: float | None = poll
        self.dead_after = dead_after
        self.replica = secrets.token_hex(8)
        self.db = pg.PooledDatabase(url, service="shuffler", max_size=6)
        self._stored: dict[str, int] = {t: 0 for t in schedules}
        self._stop = threading.Event()
        try:
            self.db.run_tx("migrate", lambda conn: pg.migrate(conn, MIGRATIONS, store="shuffler"),
                           transaction=False)
            self.db.run_tx("register", self._register)
            self._refresh_stored()
        except BaseException:
            self.db.close()
            raise
        self._sweeper = threading.Thread(
            target=self._sweep_forever, name="shuffler-pg-sweep", daemon=True
        )
        self._sweeper.start()

    def _register(self, conn: psycopg.Connection) -> None:
        # Idempotent: run_tx runs it again if the connection dropped before the answer to its
        # COMMIT came back.
        conn.execute("INSERT INTO shuffler_replicas (id) VALUES (%s) ON CONFLICT DO NOTHING",
                     (self.replica,))
        conn.cursor().executemany(
            "INSERT INTO shuffler_counters (task, shard) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            [(t, self.replica) for t in self.schedules],
        )
        conn.cursor().executemany(
            "INSERT INTO shuffler_schedule (task) VALUES (%s) ON CONFLICT DO NOTHING",
            [(t,) for t in self.schedules],
        )

    def checkpoint(self) -> None:
        """Nothing to do: the server checkpoints its own log."""

    def observe(self, metrics: TxMetrics) -> None:
        self.db.metrics = metrics

    def close(self) -> None:
        """Stop the sweep and sign off: a replica that stops cleanly leaves its unacknowledged
        batches to the others (or to its own restart) at once, not after ``dead_after``."""
        self._stop.set()
        self._sweeper.join(timeout=10)
        try:
            self.db.run_tx("sign_off", lambda conn: conn.execute(
                "DELETE FROM shuffler_replicas WHERE id = %s", (self.replica,)),
                transaction=False, retry=False)
        except psycopg.Error:  # the database is away: the others wait out dead_after
            log.warning("shuffler store: could not sign off replica %s", self.replica)
        self.db.close()

    # -----------------------------------------------------------------------------------------
    # Plumbing

    def _bump(self, conn: psycopg.Connection, task: str, **by: int) -> None:
        """Add to this replica's counter shard of ``task``."""
        sets = sql.SQL(", ").join(
            sql.SQL("{c} = {c} + {v}").format(c=sql.Identifier(k), v=sql.Literal(int(v)))
            for k, v in by.items()
        )
        conn.execute(
            sql.SQL("UPDATE shuffler_counters SET {} WHERE task = %s AND shard = %s").format(sets),
            (task, self.replica),
        )

    def _refresh_stored(self) -> None:
        """Reports stored and not acknowledged, per task, over every replica's counters."""
        rows = self.db.run_tx("refresh_stored", lambda conn: conn.execute(
            "SELECT task, sum(accepted - reports_acknowledged - refused_stale_key) "
            "FROM shuffler_counters GROUP BY task"
        ).fetchall(), transaction=False)
        for task, n in rows:
            if task in self.schedules:
                self._stored[task] = int(n or 0)

    def _sweep_forever(self) -> None:
        """Heartbeat, form batches others' concurrent commits filled, refresh ``stored``."""
        while not self._stop.wait(self.poll_interval):
            try:
                self.heartbeat()
                for task in self.schedules:
                    self.form_batches(task)
                self._refresh_stored()
            except Exception:  # the database may be briefly away: try again next round
                log.warning("shuffler store: sweep failed", exc_info=True)

    def heartbeat(self) -> None:
        self.db.run_tx("heartbeat", lambda conn: conn.execute(
            "INSERT INTO shuffler_replicas (id) VALUES (%s) "
            "ON CONFLICT (id) DO UPDATE SET seen_at = now()",
            (self.replica,),
        ), transaction=False)

    # -----------------------------------------------------------------------------------------
    # Intake

    def stored(self, task: str) -> int:
        """Reports of ``task`` stored and not yet acknowledged, as of this replica's last commit
        or sweep (all replicas together). Cheap: no SQL."""
        return self._stored.get(task, 0)

    def accept(
        self, uploads: Sequence[base.Upload]
    ) -> tuple[list[base.AcceptResult], dict[str, int]]:
        """The uploads durable in one transaction, with every batch that became full formed
        in it; then one more formation pass per task (see the module docstring)."""

        def run(conn: psycopg.Connection) -> tuple[list[base.AcceptResult], dict[str, int]]:
            results = [self._accept_one(conn, upload) for upload in uploads]
            touched = sorted({u.task for u, r in zip(uploads, results, strict=True)
                              if r.accepted})
            # Skip a task whose formation another transaction holds: the pass below forms it.
            formed = {task: self._form(conn, task, wait=False) for task in touched}
            return results, formed

        results, formed = self.db.run_tx("accept", run)
        for task in sorted({u.task for u in uploads}):
            formed[task] = formed.get(task, 0) + self.form_batches(task)
        self._refresh_stored()
        return results, {t: n for t, n in formed.items() if n}

    def _accept_one(self, conn: psycopg.Connection, upload: base.Upload) -> base.AcceptResult:
        """One upload, in the caller's transaction: the duplicate rule (``base.admit``) on the
        ``seen`` entries inserted in one statement (those it returns were new; the new ones the
        rule does not keep are deleted again), then its accepted reports."""
        task = upload.task
        # A plain read: the index only grows, so this is a lower bound on the batch any of
        # these reports can enter (``base``: oversized shares).
        row = conn.execute("SELECT next_batch FROM shuffler_schedule WHERE task = %s",
                           (task,)).fetchone()
        limit = self.schedules[task].size(int(row[0]) if row else 0)
        candidates = [base.Candidate.of(r) for r in upload.reports]
        entries = base.seen_entries(candidates)
        inserted = {bytes(h) for (h,) in conn.execute(
            "INSERT INTO shuffler_seen (task, hash) SELECT %s, unnest(%s::bytea[]) "
            "ON CONFLICT DO NOTHING RETURNING hash", (task, entries)).fetchall()}
        done = base.admit(candidates, set(entries) - inserted, limit)
        if forget := list(inserted - done.recorded):
            conn.execute("DELETE FROM shuffler_seen WHERE task = %s AND hash = ANY(%s)",
                         (task, forget))
        if done.rows:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO shuffler_pending (task, key_id, enc, ct, tag) VALUES (%s, %s, "
                    "%s, %s, %s)",
                    [(task, *row) for row in done.rows],
                )
        self._bump(conn, task, accepted=len(done.rows), duplicates=done.duplicates,
                   refused_oversized=done.refused)
        return base.AcceptResult(len(done.rows), done.duplicates, done.refused)

    def form_batches(self, task: str) -> int:
        """Form every batch of ``task`` that is full, in a transaction of its own (a plain
        count first, against the next batch's length as committed: claiming locks rows, which
        costs a write)."""

        def count(conn: psycopg.Connection) -> tuple[int, int]:
            row = conn.execute("SELECT next_batch FROM shuffler_schedule WHERE task = %s",
                               (task,)).fetchone()
            l = self.schedules[task].size(int(row[0]) if row else 0)
            found = conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM shuffler_pending WHERE task = %s LIMIT %s) "
                "s", (task, l),
            ).fetchone()
            return (int(found[0]) if found else 0), l

        found, l = self.db.run_tx("count_pending", count, transaction=False)
        if found < l:
            return 0
        return self.db.run_tx("form_batches", lambda conn: self._form(conn, task, wait=True))

    def _form(self, conn: psycopg.Connection, task: str, *, wait: bool) -> int:
        """Lock the task's schedule row (``wait``: or skip, forming nothing, if another
        transaction holds it), then claim exactly l_k pending reports of ``task`` at a time
        (``FOR UPDATE SKIP LOCKED``: rows another transaction is batching are skipped, never
        shared) and turn each full claim into batch k in CSPRNG order, k moving on each time. A
        claim of fewer than l_k forms nothing (its locks go with the transaction). Caller holds
        the transaction."""
        row = conn.execute(
            "SELECT next_batch FROM shuffler_schedule WHERE task = %s FOR UPDATE"
            + ("" if wait else " SKIP LOCKED"), (task,)).fetchone()
        if row is None:  # held by another transaction (or no such task): it forms
            return 0
        k = first = int(row[0])
        formed = 0
        while True:
            l = self.schedules[task].size(k)
            claimed = conn.execute(
                "SELECT seq, key_id, enc, ct, tag FROM shuffler_pending WHERE task = %s ORDER BY "
                "seq "
                "LIMIT %s FOR UPDATE SKIP LOCKED",
                (task, l),
            ).fetchall()
            if len(claimed) < l:
                break
            batch_id, rows = base.shuffled(claimed)
            conn.execute(
                "INSERT INTO shuffler_batches (batch_id, task, size, owner, idx) VALUES (%s, %s, "
                "%s, %s, %s)",
                (batch_id, task, l, self.replica, k),
            )
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO shuffler_batch_reports (batch_id, position, key_id, enc, ct, tag) "
                    "VALUES (%s, %s, %s, %s, %s, %s)",
                    [(batch_id, pos, key_id, enc, ct, tag)
                     for pos, (_, key_id, enc, ct, tag) in enumerate(rows)],
                )
            deleted = conn.execute(
                "DELETE FROM shuffler_pending WHERE seq = ANY(%s)", ([r[0] for r in rows],)
            ).rowcount
            if deleted != l:  # cannot happen under the row locks; never form a short batch
                raise RuntimeError(f"batch of {task}: claimed {l} reports, deleted {deleted}")
            self._bump(conn, task, batches_formed=1)
            formed += 1
            k += 1
        if k != first:
            conn.execute("UPDATE shuffler_schedule SET next_batch = %s WHERE task = %s",
                         (k, task))
        return formed

    # -----------------------------------------------------------------------------------------
    # Delivery

    def unacked(self, task: str, limit: int, exclude: frozenset[str] = frozenset()) -> list[str]:
        """Ids of the oldest unacknowledged batches of ``task`` this replica delivers: its own,
        after taking over those of replicas silent for ``dead_after`` seconds."""

        def run(conn: psycopg.Connection) -> list[str]:
            taken = conn.execute(
                "UPDATE shuffler_batches SET owner = %(me)s WHERE task = %(task)s AND NOT acked "
                "AND owner IS DISTINCT FROM %(me)s AND (owner IS NULL OR owner NOT IN ("
                "  SELECT id FROM shuffler_replicas WHERE seen_at > now() - %(dead)s * interval "
                "'1 second'"
                ")) RETURNING batch_id",
                {"me": self.replica, "task": task, "dead": self.dead_after},
            ).fetchall()
            if taken:
                log.warning("task %s: took over %d batch(es) of a replica that stopped",
                            task, len(taken))
            rows = conn.execute(
                "SELECT batch_id FROM shuffler_batches WHERE task = %s AND NOT acked AND owner = "
                "%s "
                "ORDER BY seq LIMIT %s",
                (task, self.replica, limit + len(exclude)),
            ).fetchall()
            return [r[0] for r in rows]

        return [b for b in self.db.run_tx("unacked", run) if b not in exclude][:limit]

    def _unacked_batch(self, conn: psycopg.Connection, batch_id: str) -> tuple[str, int] | None:
        row = conn.execute(
            "SELECT task, size FROM shuffler_batches WHERE batch_id = %s AND NOT acked", (batch_id,)
        ).fetchone()
        return None if row is None else (row[0], row[1])

    @staticmethod
    def _members(conn: psycopg.Connection, batch_id: str, columns: str) -> list[tuple[Any, ...]]:
        return conn.execute(
            f"SELECT {columns} FROM shuffler_batch_reports WHERE batch_id = %s ORDER BY position",
            (batch_id,),
        ).fetchall()

    def load_batch(self, batch_id: str) -> base.Batch | None:
        def run(conn: psycopg.Connection) -> base.Batch | None:
            row = self._unacked_batch(conn, batch_id)
            if row is None:
                return None
            return base.batch(batch_id, row[0], self._members(conn, batch_id, "key_id, enc, ct"))

        return self.db.run_tx("load_batch", run)

    def load_secure_batch(self, batch_id: str) -> base.SecureBatch | None:
        def run(conn: psycopg.Connection) -> base.SecureBatch | None:
            row = self._unacked_batch(conn, batch_id)
            if row is None:
                return None
            stored = conn.execute(
                "SELECT key_id, ct, members FROM shuffler_batch_sums WHERE batch_id = "
                "%s", (batch_id,)
            ).fetchone()
            members = [] if stored is not None else self._members(conn, batch_id,
                                                                    "key_id, ct, tag")
            return base.secure_batch(batch_id, row, stored, members)

        return self.db.run_tx("load_secure_batch", run)

    def save_sum(self, batch_id: str, key_id: int, count: int, ct: bytes, members: str) -> bool:
        """As ``ShufflerStore.save_sum`` (the batch row locked: another replica that took the
        batch over computes the same deterministic sum, and the first one stored stays)."""

        def run(conn: psycopg.Connection) -> bool:
            # One round trip: lock the batch row if unacknowledged, and only then store the sum
            # (the first stored stays) and delete the members it replaces.
            row = conn.execute(
                "WITH live AS (SELECT batch_id FROM shuffler_batches WHERE batch_id = %(id)s "
                "AND NOT acked FOR UPDATE), "
                "saved AS (INSERT INTO shuffler_batch_sums (batch_id, key_id, count, ct, members) "
                "SELECT batch_id, %(key)s, %(count)s, %(ct)s, %(members)s FROM live "
                "ON CONFLICT DO NOTHING), "
                "replaced AS (DELETE FROM shuffler_batch_reports WHERE batch_id IN "
                "(SELECT batch_id FROM live)) "
                "SELECT count(*) FROM live",
                {"id": batch_id, "key": key_id, "count": count, "ct": ct, "members": members},
            ).fetchone()
            return row is not None and row[0] == 1

        return self.db.run_tx("save_sum", run)

    def refuse_stale_key(self, task: str, key_id: int) -> base.StaleKeyRefusal:
        """As ``ShufflerStore.refuse_stale_key``, with the task's schedule row and then its
        unacknowledged batches locked for the transaction (the schedule row first, as every
        former takes it: no replica forms a batch of the task meanwhile)."""

        def run(conn: psycopg.Connection) -> base.StaleKeyRefusal:
            conn.execute("SELECT 1 FROM shuffler_schedule WHERE task = %s FOR UPDATE", (task,))
            refused = conn.execute(
                "DELETE FROM shuffler_pending WHERE task = %s AND key_id <> %s", (task, key_id)
            ).rowcount
            # Lock first, then read the sums and members in a statement of its own: its snapshot
            # is taken after the locks, so it sees a sum another replica committed meanwhile.
            locked = [r[0] for r in conn.execute(
                "SELECT batch_id FROM shuffler_batches WHERE task = %s AND NOT acked ORDER BY seq "
                "FOR UPDATE", (task,)).fetchall()]
            doomed = base.dissolutions(conn.execute(
                "SELECT b.batch_id, b.size, s.key_id, (SELECT count(*) FROM "
                "shuffler_batch_reports r WHERE r.batch_id = b.batch_id AND r.key_id <> %s) "
                "FROM shuffler_batches b LEFT JOIN shuffler_batch_sums s USING (batch_id) "
                "WHERE b.batch_id = ANY(%s) ORDER BY b.seq",
                (key_id, locked),
            ).fetchall(), key_id)
            ids = [gone.batch_id for gone in doomed]
            # Members under key_id back to pending, batch by batch in formation order.
            conn.execute(
                "INSERT INTO shuffler_pending (task, key_id, enc, ct, tag) "
                "SELECT %s, r.key_id, r.enc, r.ct, r.tag FROM shuffler_batch_reports r "
                "JOIN shuffler_batches b USING (batch_id) WHERE r.batch_id = ANY(%s) "
                "AND r.key_id = %s ORDER BY b.seq, r.position",
                (task, [gone.batch_id for gone in doomed if not gone.has_sum], key_id),
            )
            for table in ("shuffler_batch_reports", "shuffler_batch_sums", "shuffler_batches"):
                conn.execute(sql.SQL("DELETE FROM {} WHERE batch_id = ANY(%s)").format(
                    sql.Identifier(table)), (ids,))
            refused += sum(gone.refused for gone in doomed)
            self._bump(conn, task, refused_stale_key=refused, batches_formed=-len(doomed))
            formed = self._form(conn, task, wait=True) if doomed else 0
            return base.StaleKeyRefusal(refused, len(doomed), formed)

        done = self.db.run_tx("refuse_stale_key", run)
        self._refresh_stored()
        return done

    def has_sum(self, batch_id: str) -> bool:
        return self.db.run_tx("has_sum", lambda conn: conn.execute(
            "SELECT 1 FROM shuffler_batch_sums WHERE batch_id = %s", (batch_id,)
        ).fetchone(), transaction=False) is not None

    def next_unacked(self, task: str) -> base.Batch | None:
        ids = self.unacked(task, 1)
        return self.load_batch(ids[0]) if ids else None

    def acknowledge(self, batch_id: str) -> bool:
        """Mark a batch acknowledged and delete its ciphertexts or sum. ``synchronous_commit =
        off`` for this transaction alone, like SQLite's NORMAL: a lost acknowledgment only
        re-sends the batch, which the analyzer answers ``replayed``."""

        def run(conn: psycopg.Connection) -> tuple[str, int] | None:
            conn.execute("SET LOCAL synchronous_commit = off")
            row = conn.execute(
                "UPDATE shuffler_batches SET acked = true WHERE batch_id = %s AND NOT acked "
                "RETURNING task, size",
                (batch_id,),
            ).fetchone()
            if row is None:
                return None
            conn.execute("DELETE FROM shuffler_batch_reports WHERE batch_id = %s", (batch_id,))
            conn.execute("DELETE FROM shuffler_batch_sums WHERE batch_id = %s", (batch_id,))
            self._bump(conn, row[0], batches_acknowledged=1, reports_acknowledged=row[1])
            return row[0], int(row[1])

        done = self.db.run_tx("acknowledge", run)
        if done is not None:
            self._stored[done[0]] = self._stored.get(done[0], 0) - done[1]
        return done is not None

    def catch_up(self, task: str, length: int) -> int:
        """As ``ShufflerStore.catch_up``, under the task's schedule row lock."""

        def run(conn: psycopg.Connection) -> int:
            row = conn.execute("SELECT next_batch FROM shuffler_schedule WHERE task = %s "
                               "FOR UPDATE", (task,)).fetchone()
            k = int(row[0]) if row else 0
            to = base.catch_up_index(self.schedules[task], k, length)
            if to != k:
                conn.execute("UPDATE shuffler_schedule SET next_batch = %s WHERE task = %s",
                             (to, task))
            return to

        return self.db.run_tx("catch_up", run)

    def counts(self, task: str) -> base.TaskCounts:
        def run(conn: psycopg.Connection) -> base.TaskCounts:
            pending = conn.execute(
                "SELECT count(*) FROM shuffler_pending WHERE task = %s", (task,)
            ).fetchone()
            row = conn.execute(
                "SELECT coalesce(sum(accepted), 0), coalesce(sum(duplicates), 0), "
                "coalesce(sum(batches_formed), 0), coalesce(sum(batches_acknowledged), 0), "
                "coalesce(sum(refused_stale_key), 0), coalesce(sum(refused_oversized), 0) "
                "FROM shuffler_counters WHERE task = %s",
                (task,),
            ).fetchone()
            v = [int(x) for x in (row or (0, 0, 0, 0, 0, 0))]
            k = conn.execute("SELECT next_batch FROM shuffler_schedule WHERE task = %s",
                             (task,)).fetchone()
            return base.TaskCounts(
                pending=int(pending[0]) if pending else 0, accepted=v[0], duplicates=v[1],
                batches_formed=v[2], batches_acknowledged=v[3], refused_stale_key=v[4],
                refused_oversized=v[5], next_batch=int(k[0]) if k else 0)

        return self.db.run_tx("counts", run)

    def batch_members(self, batch_id: str) -> int:
        row = self.db.run_tx("batch_members", lambda conn: conn.execute(
            "SELECT count(*) FROM shuffler_batch_reports WHERE batch_id = %s", (batch_id,)
        ).fetchone(), transaction=False)
        return int(row[0]) if row else 0
