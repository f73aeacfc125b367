"""PostgreSQL storage shared by the shuffler's and the analyzer's PostgreSQL stores (psycopg 3):
how a store connects (``connect``, ``open_pool``; a wrong URL or a server that is down is a
``StoreUnavailable`` at start, never a silent fallback to SQLite) and numbered schema migrations
(``migrate``, versions in ``<store>_schema_version``), the PostgreSQL twin of
``services.common.sqlite.migrate``; and ``Database.run_tx``, the one way a store runs a
transaction: retried when PostgreSQL rolled it back for a serialisation failure or a deadlock, or
when its connection dropped (a new one is taken), and counted in ``TxMetrics``.

A store's tables live in the connection's current schema (the first of its ``search_path``): a
URL with ``?options=-csearch_path%3Dname`` puts a deployment, or a test, in a schema of its own.
Advisory-lock keys include that schema name, so stores in two schemas of one database never
contend.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TypeVar

import psycopg
import tenacity
from psycopg import sql
from psycopg_pool import ConnectionPool

from privbandit.services.common.datadir import StartupRefused
from privbandit.services.common.metrics import TxMetrics
from privbandit.services.common.sqlite import SchemaError

log = logging.getLogger(__name__)

T = TypeVar("T")

CONNECT_TIMEOUT = 5  # seconds: a server that is down is reported at start, not waited for


class StoreUnavailable(StartupRefused):
    """The PostgreSQL store named by the settings cannot be used (bad URL, server down, no
    schema): the service refuses to start with this message."""


def redact(url: str) -> str:
    """``url`` without its password (safe to log)."""
    return re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:***@", url)


def _refuse(service: str, url: str, exc: BaseException) -> StoreUnavailable:
    return StoreUnavailable(
        f"{service}: refusing to start: its PostgreSQL store {redact(url)} is unusable: "
        f"{str(exc).strip() or type(exc).__name__} (check the {service}.store setting, "
        f"PRIVBANDIT_{service.upper()}__STORE, and that the server is up)"
    )


def _check_schema(conn: psycopg.Connection, service: str, url: str) -> str:
    """The connection's current schema (where the store's tables go); refused if none."""
    row = conn.execute("SELECT current_schema()").fetchone()
    if row is None or row[0] is None:
        raise _refuse(service, url, RuntimeError(
            "no schema of its search_path exists (create it, or fix the search_path option)"))
    return str(row[0])


def connect(url: str, *, service: str) -> psycopg.Connection:
    """One autocommit connection (transactions are explicit: ``with conn.transaction()``);
    ``StoreUnavailable`` if it cannot be opened or has no schema to work in."""
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
    except (psycopg.Error, ValueError) as exc:  # ValueError: a malformed URL
        raise _refuse(service, url, exc) from exc
    try:
        _check_schema(conn, service, url)
    except BaseException:
        conn.close()
        raise
    return conn


def check(url: str, *, service: str) -> None:
    """Connect once and close: what ``create_app`` does so a bad store fails at once."""
    connect(url, service=service).close()


def open_pool(url: str, *, service: str, max_size: int = 4) -> ConnectionPool:
    """A pool of autocommit connections, checked (``check``) before it is opened."""
    check(url, service=service)
    pool = ConnectionPool(
        url,
        min_size=1,
        max_size=max_size,
        kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT},
        open=False,
        name=f"privbandit-{service}",
    )
    pool.open(wait=True, timeout=CONNECT_TIMEOUT * 2)
    return pool


def lock_key(conn: psycopg.Connection, name: str) -> tuple[int, int]:
    """A two-int advisory-lock key for ``name`` within the connection's schema: (hash of the
    schema, hash of the name). ``hashtext`` is 32 bits: a collision only makes two names share
    a lock (one waits), never lets two holders in."""
    row = conn.execute(
        "SELECT hashtext('privbandit/' || current_schema()), hashtext(%s)", (name,)
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def migrate(conn: psycopg.Connection, migrations: Sequence[str], *, store: str) -> int:
    """Bring the current schema to the newest version: migration i (1-based) is
    ``migrations[i - 1]``, applied once with its version row, all under a transaction-level
    advisory lock so replicas starting together migrate once. Returns the version reached;
    a schema at a newer version than this code knows is refused (``SchemaError``)."""
    with conn.transaction():
        key = lock_key(conn, f"migrate/{store}")
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", key)
        table = sql.Identifier(f"{store}_schema_version")
        conn.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (version INTEGER NOT NULL)").format(table))
        row = conn.execute(
            sql.SQL("SELECT coalesce(max(version), 0) FROM {}").format(table)).fetchone()
        current = int(row[0]) if row else 0
        if current > len(migrations):
            raise SchemaError(
                f"{store} database is at schema version {current}; this code knows versions "
                f"up to {len(migrations)} (downgrades are not supported)"
            )
        for version in range(current + 1, len(migrations) + 1):
            # No parameters: psycopg sends the script as one simple query (several statements).
            conn.execute(migrations[version - 1].encode())
            conn.execute(sql.SQL("INSERT INTO {} (version) VALUES (%s)").format(table),
                         (version,))
            log.debug("%s database migrated to schema version %d", store, version)
    return len(migrations)


def schema_version(conn: psycopg.Connection, store: str) -> int:
    """The highest migration of ``store`` applied in the connection's schema (0 if none)."""
    name = f"{store}_schema_version"
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
    if not row or not row[0]:
        return 0
    got = conn.execute(
        sql.SQL("SELECT coalesce(max(version), 0) FROM {}").format(sql.Identifier(name))
    ).fetchone()
    return int(got[0]) if got else 0


# ---------------------------------------------------------------------------------------------
# Transactions


def rolled_back(exc: BaseException) -> bool:
    """Whether PostgreSQL rolled the transaction back because of another one (serialisation
    failure, SQLSTATE 40001; deadlock, 40P01): nothing of it committed, and running it again
    may succeed."""
    return isinstance(exc, (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected))


def dropped(exc: BaseException, conn: psycopg.Connection | None) -> bool:
    """Whether ``exc`` is the loss of ``conn`` (server restarted, backend terminated, network
    cut): psycopg marks such a connection ``broken``. A pool that cannot hand out a connection
    (``PoolTimeout``) is not this: it already waited its timeout."""
    return isinstance(exc, psycopg.OperationalError) and conn is not None and conn.broken


class Database:
    """Where a store's transactions run: ``run_tx(name, fn)`` is the only runner (as janus's
    ``Datastore::run_tx``). Subclasses say where a connection comes from (``connection``) and
    what a dropped one means (``reconnect``).

    Retries (``tenacity``): at most ``ATTEMPTS`` attempts, the k-th retry (k = 1, 2, …) after a
    uniformly random wait in [0, min(``WAIT_MAX``, ``WAIT_BASE``·2ᵏ⁻¹)] seconds, so that two
    replicas that deadlocked do not meet again in lockstep. A dropped connection may have lost
    the answer to a ``COMMIT`` that took effect; the stores' transactions are written so that
    running one again is what a client's retry would be (an upload again counts as duplicates,
    an acknowledgment again finds the batch acknowledged)."""

    ATTEMPTS = 5
    WAIT_BASE = 0.002
    WAIT_MAX = 0.1

    def __init__(self, url: str, *, service: str) -> None:
        self.url = url
        self.service = service
        # The app's metrics once it has them (``observe``); a store also runs before (start-up).
        self.metrics: TxMetrics | None = None

    def connection(self) -> AbstractContextManager[psycopg.Connection]:
        """A connection for one attempt (autocommit: transactions are explicit)."""
        raise NotImplementedError

    def reconnect(self) -> bool:
        """After a dropped connection: make the next attempt use a working one. False if that
        must not happen (the error is then raised)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def run_tx(
        self,
        name: str,
        fn: Callable[[psycopg.Connection], T],
        *,
        transaction: bool = True,
        retry: bool = True,
    ) -> T:
        """``fn(conn)`` in one transaction, retried (see the class docstring) unless ``retry``
        is False; counted as ``name`` in ``metrics``: one ``ok`` or ``failed`` per call, one
        ``retried`` per attempt run again, and the call's seconds.

        ``transaction=False`` runs ``fn`` in autocommit mode: for one statement, which is its
        own transaction (a ``BEGIN`` and a ``COMMIT`` would be two more round trips), and for
        what must outlive a transaction (session-level advisory locks, ``migrate``)."""
        used: list[psycopg.Connection] = []

        def again(exc: BaseException) -> bool:
            conn = used[-1] if used else None
            return rolled_back(exc) or (dropped(exc, conn) and self.reconnect())

        def count_retry(state: tenacity.RetryCallState) -> None:
            outcome = state.outcome
            exc = outcome.exception() if outcome is not None else None
            log.info("%s store: transaction %s retried after %s",
                     self.service, name, type(exc).__name__)
            if self.metrics is not None:
                self.metrics.transactions.labels(name, "retried").inc()

        start = time.perf_counter()
        outcome = "failed"
        try:
            for attempt in tenacity.Retrying(
                stop=tenacity.stop_after_attempt(self.ATTEMPTS if retry else 1),
                wait=tenacity.wait_random_exponential(self.WAIT_BASE, max=self.WAIT_MAX),
                retry=tenacity.retry_if_exception(again),
                before_sleep=count_retry,
                reraise=True,
            ):
                with attempt:
                    used.clear()  # a failure to get a connection is not a dropped one
                    with self.connection() as conn:
                        used.append(conn)
                        if transaction:
                            with conn.transaction():
                                result = fn(conn)
                        else:
                            result = fn(conn)
            outcome = "ok"
            return result
        finally:
            if self.metrics is not None:
                self.metrics.transactions.labels(name, outcome).inc()
                self.metrics.seconds.labels(name).observe(time.perf_counter() - start)


class PooledDatabase(Database):
    """Transactions on a pool of connections (``open_pool``); a dropped connection is replaced
    through the pool (``ConnectionPool.check`` tests every idle one and replaces the dead: a
    server restart kills them all at once)."""

    def __init__(self, url: str, *, service: str, max_size: int = 4) -> None:
        super().__init__(url, service=service)
        self.pool = open_pool(url, service=service, max_size=max_size)

    def connection(self) -> AbstractContextManager[psycopg.Connection]:
        return self.pool.connection()

    def reconnect(self) -> bool:
        self.pool.check()
        return True

    def close(self) -> None:
        self.pool.close()


class SessionDatabase(Database):
    """Transactions on ONE connection behind a lock, for a store that keeps state in the
    session (the analyzer's task locks). ``lost()`` is called when that connection dropped:
    True if a new connection may be made, False if the session's state is gone for good (the
    error is raised). ``regained(conn)``, if given, then runs on the new connection before any
    transaction does, to restore the session's state (take the locks again): False if it
    could not (the new connection is closed and the error raised)."""

    def __init__(self, url: str, *, service: str, lost: Callable[[], bool],
                 regained: Callable[[psycopg.Connection], bool] | None = None) -> None:
        super().__init__(url, service=service)
        self._lost = lost
        self._regained = regained
        self._lock = threading.Lock()
        self._conn = connect(url, service=service)

    @contextmanager
    def _locked(self) -> Iterator[psycopg.Connection]:
        with self._lock:
            yield self._conn

    def connection(self) -> AbstractContextManager[psycopg.Connection]:
        return self._locked()

    def reconnect(self) -> bool:
        if not self._lost():
            return False
        with self._lock:
            self._conn.close()
            self._conn = connect(self.url, service=self.service)
            if self._regained is not None and not self._regained(self._conn):
                self._conn.close()
                return False
        return True

    def close(self) -> None:
        with self._lock:
            self._conn.close()
