"""An analyzer store from before the time of a task's last batch was kept (issue 45 item 9:
SQLite schema 2, PostgreSQL schema 1) is migrated in place: its task rows are read as they
were, with no last batch yet, and the next commit records one. On both stores: the SQLite
file, and a fresh schema of the real PostgreSQL server."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg

import tests.helpers as helpers
from privbandit.services.analyzer.store import postgres as pg_store
from privbandit.services.analyzer.store import sqlite as sqlite_store
from privbandit.services.analyzer.store.base import BatchResult, Store
from privbandit.services.common import pg
from privbandit.services.common import sqlite as sq

OLD_ROW = ("shuf", '{"id":"shuf"}', '{"n":1}', 10, 1, 2, 3, 4)
INSERT = ("INSERT INTO {} (task, config, state, reports_counted, rejected, duplicates, batches, "
          "quarantined) VALUES ({})")


def _old_store(backend: str, tmp_path: Path) -> tuple[Any, Any]:
    """A store at the schema before ``last_batch_at`` holding one task row; returns what opens
    it now (the store class and its argument)."""
    if backend == "sqlite":
        path = tmp_path / "analyzer.sqlite3"
        conn = sq.open_db(path)
        try:
            assert sq.migrate(conn, sqlite_store.MIGRATIONS[:2], store="analyzer") == 2
            with sq.transaction(conn):
                conn.execute(INSERT.format("tasks", ", ".join("?" * 8)), OLD_ROW)
        finally:
            conn.close()
        return sqlite_store.AnalyzerStore, path
    url = helpers.STORES["analyzer"]
    with psycopg.connect(url, autocommit=True) as conn:
        assert pg.migrate(conn, pg_store.MIGRATIONS[:1], store="analyzer") == 1
        conn.execute(INSERT.format("analyzer_tasks", ", ".join(["%s"] * 8)), OLD_ROW)
    return pg_store.PgAnalyzerStore, url


def test_an_old_task_row_is_read_after_the_upgrade_and_then_keeps_its_last_batch(
    store: str, tmp_path: Path
) -> None:
    make, where = _old_store(store, tmp_path)
    opened: Store = make(where)
    try:
        record = opened.load_task("shuf")
        assert record is not None
        assert (record.config, record.state) == ({"id": "shuf"}, {"n": 1})
        assert record.counters == {"reports_counted": 10, "rejected": 1, "duplicates": 2,
                                   "batches": 3, "quarantined": 4}
        assert record.last_batch_at is None  # unknown: no batch since the column exists
        opened.commit_batches("shuf", [(BatchResult("b1", 5, 0, 0, 2), [b"r" * 16])],
                              {"n": 2}, 1_790_000_000.25)
    finally:
        opened.close()
    reopened: Store = make(where)
    try:
        record = reopened.load_task("shuf")
        assert record is not None and record.last_batch_at == 1_790_000_000.25
        assert record.counters["batches"] == 4 and record.state == {"n": 2}
    finally:
        reopened.close()
    if store == "sqlite":
        with sqlite3.connect(where) as conn:
            assert sq.schema_version(conn) == len(sqlite_store.MIGRATIONS) == 3
