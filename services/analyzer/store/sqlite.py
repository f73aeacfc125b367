"""The analyzer's SQLite store: one file in WAL mode with ``synchronous=FULL``.

Per task it keeps the policy state (``Policy.get_state()``, JSON), the counters, every processed
batch id (quarantined batches included) and every counted report id (HPKE reports and the
members of counted Paillier batches). ``commit_batches`` writes all of them for a group of batches
in ONE transaction, which is what makes ingestion exactly-once: either a batch id, its report ids
and the aggregate that includes them are all on disk, or none is, and the shuffler re-sends.

The schema is versioned (``services.common.sqlite.migrate``): migration i is ``MIGRATIONS[i - 1]``.
Migration 1 is the original schema; its ``IF NOT EXISTS`` makes it harmless on a database created
before versioning (it only records version 1).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from privbandit.services.analyzer.store import base
from privbandit.services.common.metrics import TxMetrics
from privbandit.services.common.migrations import script
from privbandit.services.common.sqlite import Migration, add_columns, migrate, open_db, transaction

SCHEMA_V1 = script("privbandit.services.analyzer.store", "sqlite", 1)

# Secure-sum batches refused as a whole: their reports, per task and per batch.
SCHEMA_V2 = add_columns(
    ("tasks", "quarantined", "INTEGER NOT NULL DEFAULT 0"),
    ("batches", "quarantined", "INTEGER NOT NULL DEFAULT 0"),
)

# When the task's last batch was committed (issue 45: the status page's "last batch" survives a
# restart); NULL until the first batch after the upgrade.
SCHEMA_V3 = add_columns(("tasks", "last_batch_at", "REAL"))

# Append only: a released migration never changes.
MIGRATIONS: list[Migration] = [SCHEMA_V1, SCHEMA_V2, SCHEMA_V3]

# SQLite's default limit on host parameters is 32766 since 3.32; stay far below it.
_CHUNK = 500


class AnalyzerStore:
    """Thread-safe access to the analyzer's SQLite file (one connection behind a lock)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn = open_db(path)
        self._lock = threading.Lock()
        try:
            with self._lock:
                migrate(self._conn, MIGRATIONS, store="analyzer")
        except BaseException:
            self._conn.close()
            raise

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def observe(self, metrics: TxMetrics) -> None:
        """Nothing to count: a SQLite transaction is never retried."""

    def try_claim(self, tasks: Sequence[str]) -> list[str]:
        """One process per SQLite file: every task is this analyzer's."""
        return []

    def load_task(self, task: str) -> base.TaskRecord | None:
        with self._lock:
            row = self._conn.execute(
                f"SELECT {base.TASK_COLUMNS} FROM tasks WHERE task = ?", (task,)
            ).fetchone()
        return None if row is None else base.task_record(row)

    def init_task(self, task: str, config: dict[str, Any], state: dict[str, Any]) -> None:
        """Record a new task with its initial policy state (no-op if it exists)."""
        with self._lock, transaction(self._conn) as conn:
            conn.execute(
                "INSERT OR IGNORE INTO tasks (task, config, state) VALUES (?, ?, ?)",
                (task, base.dumps(config), base.dumps(state)),
            )

    def processed_batches(self, task: str, batch_ids: Sequence[str]) -> set[str]:
        """The subset of ``batch_ids`` already committed for ``task``."""
        return {str(v) for v in self._present("batches", "batch_id", task, batch_ids)}

    def known_report_ids(self, task: str, report_ids: Sequence[bytes]) -> set[bytes]:
        """The subset of ``report_ids`` already counted for ``task``."""
        return {bytes(v) for v in self._present("report_ids", "report_id", task, report_ids)}

    def _present(self, table: str, column: str, task: str, values: Sequence[Any]) -> list[Any]:
        """The ``values`` found in ``table.column`` for ``task``, queried in chunks of at most
        ``_CHUNK`` host parameters. ``table`` and ``column`` are constants of this module."""
        found: list[Any] = []
        with self._lock:
            for start in range(0, len(values), _CHUNK):
                chunk = values[start : start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = self._conn.execute(
                    f"SELECT {column} FROM {table} WHERE task = ? AND {column} IN ({marks})",
                    (task, *chunk),
                )
                found.extend(r[0] for r in rows)
        return found

    def commit_batches(self, task: str, batches: base.Group, state: dict[str, Any],
                       at: float) -> None:
        """Batch ids, their new report ids, the counters and the policy state after them, and
        ``at`` as the time of the task's last batch, in ONE transaction (with synchronous=FULL,
        durable when this returns)."""
        state_json = base.dumps(state)
        with self._lock, transaction(self._conn) as conn:
            for result, report_ids in batches:
                conn.execute(
                    "INSERT INTO batches (task, batch_id, counted, rejected, duplicates, "
                    "model_version, quarantined) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (task, result.batch_id, result.counted, result.rejected,
                     result.duplicates, result.model_version, result.quarantined),
                )
                conn.executemany(
                    "INSERT INTO report_ids (task, report_id) VALUES (?, ?)",
                    ((task, rid) for rid in report_ids),
                )
            base.update_task(conn, "?", task, batches, state_json, at)

