"""PostgreSQL storage shared by the shuffler's and the analyzer's PostgreSQL stores (psycopg 3):
how a store connects (``connect``, ``open_pool``; a wrong URL or a server that is down is a
``StoreUnavailable`` at start, never a silent fallback to SQLite) and numbered schema migrations
(``migrate``, versions in ``<store>_schema_version``), the PostgreSQL twin of
``services.common.sqlite.migrate``.

A store's tables live in the connection's current schema (the first of its ``search_path``): a
URL with ``?options=-csearch_path%3Dname`` puts a deployment, or a test, in a schema of its own.
Advisory-lock keys include that schema name, so stores in two schemas of one database never
contend.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from services.common.datadir import StartupRefused
from services.common.sqlite import SchemaError

log = logging.getLogger(__name__)

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
