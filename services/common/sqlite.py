"""Embedded storage shared by the three services' SQLite stores: how a database is opened, the one
``transaction()`` every write goes through, numbered schema migrations (``migrate``),
``WalSync``, the fsync that makes a commit durable when the commit itself did not wait for one,
and ``quick_check``, the start-up check of a database's pages."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)


class SchemaError(RuntimeError):
    """The database was written by a newer (or unknown) schema than this code knows."""


# A database and the files SQLite keeps beside it (which it creates with the database's mode).
DB_SIBLINGS = ("", "-wal", "-shm", "-journal")


def _private(path: Path) -> None:
    """Make ``path`` and its SQLite siblings readable by the owner only: create the database
    with mode 0600 (SQLite gives its -wal/-shm the database's mode), and tighten existing files
    that are readable by others, with a warning (outboxes, reports and counts are no one
    else's)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)
    for suffix in DB_SIBLINGS:
        file = path.with_name(path.name + suffix)
        try:
            mode = stat.S_IMODE(file.stat().st_mode)
        except FileNotFoundError:
            continue
        if mode & 0o077:
            log.warning("database file %s had mode %o; setting 0600", file, mode)
            os.chmod(file, 0o600)


# Virtual-machine instructions between two looks at ``quick_check``'s deadline: ~1 ms of work.
_PROGRESS_STEP = 10_000


def quick_check(path: Path, seconds: float) -> str | None:
    """Why the database ``path`` is damaged, by SQLite's ``PRAGMA quick_check`` (every page of
    every table and index read and checked for well-formedness; unlike ``integrity_check`` it
    does not match each index with its table, ~5× faster: 0.5 s for a 190 MB file from the page
    cache on this project's machine); None if it found nothing.

    Bounded in time: a progress handler interrupts the check once ``seconds`` have passed, and a
    check cut short is logged and counts as passed (a database larger than the budget covers
    starts with its first pages checked, rather than not at all or after minutes). The database
    is opened read-only, so a damaged file is left as it is, and nothing is checkpointed."""
    deadline = time.monotonic() + seconds
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=seconds)
    except sqlite3.Error as exc:
        return f"unreadable by SQLite ({exc})"
    try:
        conn.set_progress_handler(lambda: time.monotonic() > deadline, _PROGRESS_STEP)
        # The first problems suffice to refuse, and listing more takes longer.
        rows = conn.execute("PRAGMA quick_check(3)").fetchall()
    except sqlite3.OperationalError as exc:
        if time.monotonic() > deadline and "interrupt" in str(exc):
            log.warning("PRAGMA quick_check of %s did not finish within %g s: started after a "
                        "partial check", path, seconds)
            return None
        if "locked" in str(exc) or "busy" in str(exc):
            # Another process holds it (WAL readers are rarely blocked): not a damage.
            log.warning("PRAGMA quick_check of %s could not read it (%s): started unchecked",
                        path, exc)
            return None
        return f"damaged (PRAGMA quick_check: {' '.join(str(exc).split())})"
    except sqlite3.DatabaseError as exc:  # "file is not a database", "malformed", ...
        return f"damaged (PRAGMA quick_check: {' '.join(str(exc).split())})"
    finally:
        conn.close()
    # A problem may span lines ("*** in database main ***\nOn tree page 2 ..."): one line each.
    problems = [" ".join(str(row[0]).split()) for row in rows]
    if problems == ["ok"]:
        return None
    return f"damaged (PRAGMA quick_check: {'; '.join(problems)})"


def open_db(path: Path, *, timeout: float = 30.0) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, synchronous=FULL.

    FULL: a commit that was acknowledged (a 202 from the shuffler or the device, an analyzer
    ack) survives a power cut, not only a process crash. ``check_same_thread=False``: the stores
    run their queries in worker threads and serialise access themselves (a lock or a single
    writer thread). ``timeout`` is how long a statement waits for another connection's lock.
    The files are the owner's only (mode 0600, see ``_private``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _private(path)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=timeout)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


class WalSync:
    """The fsync of a WAL-mode database's write-ahead log, for commits made on an event loop's
    thread with ``synchronous=NORMAL`` (no fsync at commit) and answered only after this has
    run in a worker thread (``GroupCommitter(in_loop=True, sync=...)``).

    Together that is ``FULL``'s guarantee, an acknowledged commit survives a power cut: the
    commit's frames, with their commit marker, are in the WAL once ``COMMIT`` returns, and this
    puts them on disk. In WAL mode ``NORMAL`` still syncs the WAL before each checkpoint and the
    database file after it, so a checkpoint never needs this. The descriptor is reopened if the
    file was replaced (SQLite recreates the WAL only when no connection is open, but a stale
    descriptor would sync the wrong file); no WAL yet means nothing was written."""

    def __init__(self, db: Path, checkpoint_every: int | None = None) -> None:
        self.db = db
        self.wal = Path(f"{db}-wal")
        self._fd: int | None = None
        self.checkpoint_every = checkpoint_every
        self._syncs = 0
        self._checkpointer: sqlite3.Connection | None = None

    def __call__(self) -> None:
        try:
            st = os.stat(self.wal)
        except FileNotFoundError:
            return
        fd = self._fd
        if fd is None or os.fstat(fd).st_ino != st.st_ino:
            if fd is not None:
                os.close(fd)
            fd = self._fd = os.open(self.wal, os.O_RDONLY)
        os.fsync(fd)
        self._syncs += 1
        if self.checkpoint_every is not None and self._syncs % self.checkpoint_every == 0:
            self.checkpoint()

    def checkpoint(self) -> None:
        """A ``PASSIVE`` checkpoint on a connection of its own (it copies what it can without
        waiting for the writer, which goes on meanwhile). With ``checkpoint_every``, the
        writer's connection runs ``wal_autocheckpoint=0`` and this, in the worker thread, every
        that many syncs: SQLite's automatic checkpoint would otherwise run inside a COMMIT on
        the event loop's thread and stall it (tens to hundreds of ms, two fsyncs and the copy
        of a thousand pages)."""
        if self._checkpointer is None:
            self._checkpointer = sqlite3.connect(self.db, isolation_level=None,
                                                 check_same_thread=False, timeout=5.0)
        self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._checkpointer is not None:
            self._checkpointer.close()
            self._checkpointer = None


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, or ``ROLLBACK`` if the block raises (the exception goes
    on). IMMEDIATE takes the write lock up front, so a transaction never fails half-way for a
    lock another writer took after it started reading."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")  # a COMMIT that fails (e.g. a deferred constraint) rolls back too
    except BaseException:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:  # the failure may already have ended the transaction
            log.debug("rollback after a failed transaction did not run", exc_info=True)
        raise


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


# A migration: a SQL script (statements separated by ';'), or a function of the connection for a
# step SQL alone cannot say (e.g. "add this column unless an older release already did").
Migration = str | Callable[[sqlite3.Connection], None]


def schema_version(conn: sqlite3.Connection) -> int:
    """The highest migration applied to this database (0 for a new one).

    A database written before stores were versioned has its tables but no ``schema_version``:
    it is at version 1, since every store's migration 1 is the schema it had then."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if exists is None:
        legacy = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' "
            "AND name != 'schema_version' AND name NOT LIKE 'sqlite_%' LIMIT 1"
        ).fetchone()
        with transaction(conn):
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            if legacy is not None:
                conn.execute("INSERT INTO schema_version (version) VALUES (1)")
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def migrate(conn: sqlite3.Connection, migrations: Sequence[Migration], *, store: str) -> int:
    """Bring the database to the newest schema: migration i (1-based) is ``migrations[i - 1]``,
    applied once, in its own transaction together with its version row, so a crash leaves the
    database at a whole version. Returns the version reached.

    A database at a version above ``len(migrations)`` was written by newer code: refused, since
    this code cannot know what the newer columns mean."""
    current = schema_version(conn)
    if current > len(migrations):
        raise SchemaError(
            f"{store} database is at schema version {current}; this code knows versions up to "
            f"{len(migrations)} (downgrades are not supported)"
        )
    for version in range(current + 1, len(migrations) + 1):
        step = migrations[version - 1]
        with transaction(conn):
            if callable(step):
                step(conn)
            else:
                for statement in _statements(step):
                    conn.execute(statement)
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
        log.debug("%s database migrated to schema version %d", store, version)
    return len(migrations)


def add_columns(*columns: tuple[str, str, str]) -> Callable[[sqlite3.Connection], None]:
    """A migration adding (table, column, definition) columns that are not there yet: for
    columns an unversioned database (version 1 by the rule above) may or may not have."""

    def step(conn: sqlite3.Connection) -> None:
        for table, column, definition in columns:
            have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")

    return step


def _statements(script: str) -> list[str]:
    """Split a migration script into statements (``executescript`` would COMMIT implicitly and
    break the one-transaction-per-version rule); a ';' inside a comment or a string literal does
    not end a statement."""
    out, pending = [], ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n\t;"):
                out.append(pending.strip())
            pending = ""
    if pending.strip(" \n\t;"):
        out.append(pending.strip())  # incomplete: executing it reports the error
    return out
