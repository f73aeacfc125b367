"""The test database's catalog upkeep (``tests.pg_server``), on the real server."""

from __future__ import annotations

import psycopg

from tests.pg_server import CHURNED_CATALOG, PG_SERVER, vacuum_catalog


def test_the_catalog_is_vacuumed_and_a_server_that_is_down_is_only_reported() -> None:
    assert vacuum_catalog() is None
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT relname, last_vacuum IS NOT NULL, now() - last_vacuum < interval '1 hour' "
            "FROM pg_stat_sys_tables WHERE schemaname = 'pg_catalog' AND relname = ANY(%s)",
            (list(CHURNED_CATALOG),)).fetchall()
    assert {r[0] for r in rows} == set(CHURNED_CATALOG)
    assert all(r[1] and r[2] for r in rows), rows
    why = vacuum_catalog("postgresql://postgres@127.0.0.1:1/test")  # nothing listens on port 1
    assert why is not None and "127.0.0.1" in why
