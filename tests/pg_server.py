"""The PostgreSQL server of the tests, and the upkeep its schema churn needs (imports nothing
heavy: ``tests/conftest.py`` uses it before any test module is loaded)."""

from __future__ import annotations

import os

# Trust authentication; also in CI.
PG_SERVER = os.environ.get("PRIVBANDIT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")

# The catalog tables that creating and dropping a schema of tables leaves dead rows in.
CHURNED_CATALOG = ("pg_attribute", "pg_class", "pg_depend", "pg_type", "pg_namespace",
                   "pg_constraint", "pg_index", "pg_attrdef", "pg_sequence")


def vacuum_catalog(url: str = PG_SERVER) -> str | None:
    """``VACUUM (ANALYZE)`` the test database's churned catalog tables; None, or why not.

    Every PostgreSQL test makes a fresh schema and drops it afterwards: one ``make test`` leaves
    ~100,000 dead rows in ``pg_attribute``. A server without autovacuum (this project's machines
    run one, ``autovacuum = off``: 322,838 dead rows after a day of runs) keeps them for good, so
    the catalog grows with every run. Sub-second on such a catalog. (It did not explain a
    slowdown of the suite seen on the same afternoon, docs/benchmarks/test-suite.md, session 16:
    that was the machine.) A server that is down is the PostgreSQL tests' to report, not this
    upkeep's."""
    try:
        import psycopg

        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            conn.execute("VACUUM (ANALYZE) " + ", ".join(f"pg_catalog.{t}"
                                                      for t in CHURNED_CATALOG))
    except Exception as exc:  # noqa: BLE001 - upkeep only: never fails the session
        return f"{type(exc).__name__}: {exc}"
    return None
