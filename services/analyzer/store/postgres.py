"""The analyzer's state in PostgreSQL: the same tables and the same one-transaction rule as the
SQLite store (``services.analyzer.store.sqlite``), plus one active analyzer per task. Its tables are
named ``analyzer_*`` (the shuffler's ``shuffler_*``), so both services can share one schema.

``commit_batches`` writes a group's batch ids, their report ids (``COPY``), the counters and the
policy state after them in ONE transaction: either all of it is committed or none, and the
shuffler re-sends.

Active and standby: an analyzer holds, for every task it serves, a session-level advisory lock
(``pg_try_advisory_lock``, keyed by schema and task) on the one connection it commits through.
A second analyzer on the same database waits for the locks
(``services.analyzer.runtime.claim_tasks``) before it loads any policy state, and so before it
listens; when the first dies (even by SIGKILL) its connection closes, PostgreSQL releases the
locks, and the standby loads the committed state and starts within a poll (0.2 s) plus its
start-up. The commits go through the connection that holds the locks. When it breaks (server
restarted, backend terminated, network cut) the analyzer connects again and takes its locks
again — if no other analyzer holds them and no batch was committed for its tasks meanwhile (the
count of each task's batches is what this analyzer committed on top of what it found when it
claimed the task), its policy state is still the committed one and it carries on by itself (the
interrupted transaction is run again). Otherwise another analyzer has or had the tasks: this one
stops itself (SIGTERM) so that the standby can take its port. Every statement runs through
``services.common.pg.Database.run_tx`` on that one connection (``SessionDatabase``).
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Sequence
from typing import Any

import psycopg

from privbandit.services.analyzer.store import base
from privbandit.services.common import pg
from privbandit.services.common.metrics import TxMetrics
from privbandit.services.common.migrations import scripts

log = logging.getLogger(__name__)

# Append only: a released migration never changes (a new one is a new file).
MIGRATIONS = scripts("privbandit.services.analyzer.store", "postgres")


class PgAnalyzerStore:
    """The analyzer store on PostgreSQL: one connection behind a lock (it also holds the task
    locks, see the module docstring)."""

    def __init__(self, url: str) -> None:
        self.path = pg.redact(url)  # what error messages name
        self.claimed: set[str] = set()
        # batches committed for each claimed task, as this analyzer knows them
        self._batches: dict[str, int] = {}
        self.db = pg.SessionDatabase(url, service="analyzer", lost=self._lost,
                                     regained=self._regained)
        try:
            self.db.run_tx("migrate", lambda conn: pg.migrate(conn, MIGRATIONS, store="analyzer"),
                           transaction=False)
        except BaseException:
            self.db.close()
            raise

    def close(self) -> None:
        self.db.close()

    def observe(self, metrics: TxMetrics) -> None:
        self.db.metrics = metrics

    def _lost(self) -> bool:
        """The connection dropped: a new one may be made (``_regained`` decides whether this
        analyzer can go on)."""
        if self.claimed:
            log.warning("analyzer store: the connection holding the task locks broke; "
                        "connecting again")
        return True

    def _regained(self, conn: psycopg.Connection) -> bool:
        """On the new connection: take every claimed task's lock again, and check that no batch
        was committed for it meanwhile (module docstring). If not, stop (SIGTERM): False."""
        for task in sorted(self.claimed):
            row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)",
                               pg.lock_key(conn, f"analyzer/{task}")).fetchone()
            if row is None or not row[0]:
                return self._give_up(f"another analyzer holds task {task}")
            if self._count_batches(conn, task) != self._batches[task]:
                return self._give_up(f"batches of task {task} were committed by another "
                                     f"analyzer meanwhile")
        if self.claimed:
            log.warning("analyzer store: connected again, holding the locks of %d task(s)",
                        len(self.claimed))
        return True

    def _give_up(self, why: str) -> bool:
        log.critical("analyzer store: the connection holding the task locks broke and %s; "
                     "stopping so that a standby can take over", why)
        os.kill(os.getpid(), signal.SIGTERM)
        return False

    @staticmethod
    def _count_batches(conn: psycopg.Connection, task: str) -> int:
        row = conn.execute("SELECT count(*) FROM analyzer_batches WHERE task = %s",
                           (task,)).fetchone()
        return int(row[0]) if row else 0

    # -----------------------------------------------------------------------------------------
    # One active analyzer per task

    def try_claim(self, tasks: Sequence[str]) -> list[str]:
        """Take the lock of every task not yet held; returns the tasks still held by another
        analyzer (empty: this one is active for all of ``tasks``)."""

        def run(conn: psycopg.Connection) -> list[str]:
            waiting = []
            for task in tasks:
                if task in self.claimed:
                    continue
                key = pg.lock_key(conn, f"analyzer/{task}")
                row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", key).fetchone()
                if row is not None and row[0]:
                    self.claimed.add(task)
                    self._batches[task] = self._count_batches(conn, task)
                else:
                    waiting.append(task)
            return waiting

        return self.db.run_tx("try_claim", run, transaction=False)

    # -----------------------------------------------------------------------------------------
    # As ``AnalyzerStore``

    def load_task(self, task: str) -> base.TaskRecord | None:
        row = self.db.run_tx("load_task", lambda conn: conn.execute(
            f"SELECT {base.TASK_COLUMNS} FROM analyzer_tasks WHERE task = %s", (task,)
        ).fetchone(), transaction=False)
        return None if row is None else base.task_record(row)

    def init_task(self, task: str, config: dict[str, Any], state: dict[str, Any]) -> None:
        self.db.run_tx("init_task", lambda conn: conn.execute(
            "INSERT INTO analyzer_tasks (task, config, state) VALUES (%s, %s, %s) ON CONFLICT DO "
            "NOTHING",
            (task, base.dumps(config), base.dumps(state)),
        ))

    def processed_batches(self, task: str, batch_ids: Sequence[str]) -> set[str]:
        found = self._present("analyzer_batches", "batch_id", task, list(batch_ids))
        return {str(v) for v in found}

    def known_report_ids(self, task: str, report_ids: Sequence[bytes]) -> set[bytes]:
        return {bytes(v) for v in self._present("analyzer_report_ids", "report_id", task,
                                                 list(report_ids))}

    def _present(self, table: str, column: str, task: str, values: list[Any]) -> list[Any]:
        """The ``values`` found in ``table.column`` for ``task`` (one ``= ANY`` query; the
        table and column are constants of this module)."""
        if not values:
            return []
        return self.db.run_tx(f"present_{column}", lambda conn: [r[0] for r in conn.execute(
            f"SELECT {column} FROM {table} WHERE task = %s AND {column} = ANY(%s)",
            (task, values),
        )], transaction=False)

    def commit_batches(self, task: str, batches: base.Group, state: dict[str, Any],
                       at: float) -> None:
        """Batch ids, their new report ids, the counters, the policy state and ``at`` (the time
        of the task's last batch), in ONE transaction (durable when this returns:
        ``synchronous_commit`` is on)."""
        state_json = base.dumps(state)

        def run(conn: psycopg.Connection) -> None:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO analyzer_batches (task, batch_id, counted, rejected, duplicates, "
                    "model_version, quarantined) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    [(task, r.batch_id, r.counted, r.rejected, r.duplicates, r.model_version,
                      r.quarantined) for r, _ in batches],
                )
                with cur.copy("COPY analyzer_report_ids (task, report_id) FROM STDIN") as copy:
                    for _, report_ids in batches:
                        for rid in report_ids:
                            copy.write_row((task, rid))
            base.update_task(conn, "%s", task, batches, state_json, at, "analyzer_tasks")

        self.db.run_tx("commit_batches", run)
        # Counted once committed. A reconnection between that commit and this line (another
        # thread's transaction dropped) would see one group more than counted and stop this
        # analyzer: the safe side, never a wrong count.
        if task in self._batches:
            self._batches[task] += len(batches)
