"""Embedded storage shared by the three services' SQLite stores: how a database is opened, the one
``transaction()`` every write goes through, and numbered schema migrations (``migrate``)."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)


class SchemaError(RuntimeError):
    """The database was written by a newer (or unknown) schema than this code knows."""


def open_db(path: Path, *, timeout: float = 30.0) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, synchronous=FULL.

    FULL: a commit that was acknowledged (a 202 from the shuffler or the device, an analyzer
    ack) survives a power cut, not only a process crash. ``check_same_thread=False``: the stores
    run their queries in worker threads and serialise access themselves (a lock or a single
    writer thread). ``timeout`` is how long a statement waits for another connection's lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=timeout)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, or ``ROLLBACK`` if the block raises (the exception goes
    on). IMMEDIATE takes the write lock up front, so a transaction never fails half-way for a
    lock another writer took after it started reading."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:  # the failure may already have ended the transaction
            log.debug("rollback after a failed transaction did not run", exc_info=True)
        raise
    conn.execute("COMMIT")


@contextmanager
def savepoint(conn: sqlite3.Connection, name: str = "op") -> Iterator[sqlite3.Connection]:
    """A nested unit inside ``transaction``: undone alone (``ROLLBACK TO``) if the block raises."""
    conn.execute(f"SAVEPOINT {name}")
    try:
        yield conn
    except BaseException:
        conn.execute(f"ROLLBACK TO {name}")
        conn.execute(f"RELEASE {name}")
        raise
    conn.execute(f"RELEASE {name}")


def schema_version(conn: sqlite3.Connection) -> int:
    """The highest migration applied to this database (0 for a new one)."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def migrate(conn: sqlite3.Connection, migrations: Sequence[str], *, store: str) -> int:
    """Bring the database to the newest schema: migration i (1-based) is ``migrations[i - 1]``, a
    SQL script applied once, in its own transaction together with its version row, so a crash
    leaves the database at a whole version. Returns the version reached.

    A database at a version above ``len(migrations)`` was written by newer code: refused, since
    this code cannot know what the newer columns mean."""
    current = schema_version(conn)
    if current > len(migrations):
        raise SchemaError(
            f"{store} database is at schema version {current}; this code knows versions up to "
            f"{len(migrations)} (downgrades are not supported)"
        )
    for version in range(current + 1, len(migrations) + 1):
        with transaction(conn):
            for statement in _statements(migrations[version - 1]):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
        log.debug("%s database migrated to schema version %d", store, version)
    return len(migrations)


def _statements(script: str) -> list[str]:
    """Split a migration script into statements (``executescript`` would COMMIT implicitly and
    break the one-transaction-per-version rule). Migrations hold no string literal with ';'."""
    return [s.strip() for s in script.split(";") if s.strip()]
