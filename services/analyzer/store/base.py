"""What the analyzer's two stores share: the types, the ``Store`` protocol
(``sqlite.AnalyzerStore``; ``postgres.PgAnalyzerStore``, one active analyzer per task) and the
rules both apply: what a group of batches adds to its task's counters (``totals``,
``update_task``) and how a policy state is written (``dumps``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from privbandit.services.common.metrics import TxMetrics

# A task's counters: its ``tasks`` columns, and the ``TaskRuntime`` fields they load into.
TASK_COUNTERS = ("reports_counted", "rejected", "duplicates", "batches", "quarantined")


# A task's row as ``task_record`` reads it (the SELECT list of ``load_task`` in both stores).
TASK_COLUMNS = ", ".join(("config", "state", *TASK_COUNTERS, "last_batch_at"))


@dataclass
class TaskRecord:
    """What the store holds for one task: its configuration, policy state, counters (by their
    names in ``TASK_COUNTERS``) and when its last batch was committed (epoch seconds; None: no
    batch since the store recorded it, schema 3 in SQLite, 2 in PostgreSQL)."""

    config: dict[str, Any]
    state: dict[str, Any]
    counters: dict[str, int]
    last_batch_at: float | None = None


def task_record(row: Sequence[Any]) -> TaskRecord:
    """A task's record from its ``TASK_COLUMNS``: configuration and state JSON, counters, the
    time of its last batch."""
    n = len(TASK_COUNTERS)
    return TaskRecord(json.loads(row[0]), json.loads(row[1]),
                      {k: int(v) for k, v in zip(TASK_COUNTERS, row[2:2 + n], strict=True)},
                      None if row[2 + n] is None else float(row[2 + n]))


@dataclass(frozen=True)
class BatchResult:
    """The outcome of one processed batch, as committed: reports counted, rejected alone,
    dropped as duplicates, or refused with the whole batch (``quarantined``)."""

    batch_id: str
    counted: int
    rejected: int
    duplicates: int
    model_version: int
    quarantined: int = 0


# A group of processed batches committed together: each batch's result and its new report ids.
Group = Sequence[tuple[BatchResult, Sequence[bytes]]]


def totals(batches: Group) -> tuple[int, ...]:
    """What a group adds to its task's counters: reports counted, rejected, duplicates,
    batches, quarantined (the order of the ``UPDATE tasks`` of both stores)."""
    return (
        sum(r.counted for r, _ in batches),
        sum(r.rejected for r, _ in batches),
        sum(r.duplicates for r, _ in batches),
        len(batches),
        sum(r.quarantined for r, _ in batches),
    )


def update_task(
    conn: Any, mark: str, task: str, batches: Group,
    state_json: str, at: float, table: str = "tasks",
) -> None:
    """The task row after a group: its policy state and counters plus ``totals``, and ``at``
    (epoch seconds) as the time of its last batch, in the caller's transaction (``mark``: the
    driver's parameter mark, ``?`` or ``%s``; ``table``: the store's name of the tasks table,
    a constant)."""
    cur = conn.execute(
        f"UPDATE {table} SET state = ?, reports_counted = reports_counted + ?, "
        "rejected = rejected + ?, duplicates = duplicates + ?, batches = batches + ?, "
        "quarantined = quarantined + ?, last_batch_at = ? WHERE task = ?".replace("?", mark),
        (state_json, *totals(batches), at, task),
    )
    if cur.rowcount != 1:
        raise RuntimeError(f"task {task!r} is not in the store")


class Store(Protocol):
    """What the analyzer's runtime and ingest pipeline need of its durable state; implemented
    by ``AnalyzerStore`` (SQLite) and ``PgAnalyzerStore`` (PostgreSQL, with one active analyzer
    per task). Methods block: call them in a worker thread once serving. ``observe``: count the
    store's transactions in the app's metrics (PostgreSQL; SQLite has nothing to count)."""

    path: Any  # what messages name: the file, or the redacted URL

    def close(self) -> None: ...
    def observe(self, metrics: TxMetrics) -> None: ...
    def try_claim(self, tasks: Sequence[str]) -> list[str]: ...
    def load_task(self, task: str) -> TaskRecord | None: ...
    def init_task(self, task: str, config: dict[str, Any], state: dict[str, Any]) -> None: ...
    def processed_batches(self, task: str, batch_ids: Sequence[str]) -> set[str]: ...
    def known_report_ids(self, task: str, report_ids: Sequence[bytes]) -> set[bytes]: ...
    def commit_batches(self, task: str, batches: Group, state: dict[str, Any],
                       at: float) -> None: ...


def dumps(obj: Any) -> str:
    """A configuration or policy state as stored: compact JSON. ``allow_nan=False``: a
    non-finite number in the state is a bug; refuse to persist it."""
    return json.dumps(obj, allow_nan=False, separators=(",", ":"))
