"""The store parametrisation of the service tests: each test of a package whose conftest uses
``store`` runs once on SQLite and once on PostgreSQL (fresh schemas of its own for the analyzer
and the shuffler, dropped afterwards). A test marked ``sqlite_only`` (it opens the SQLite file
itself, or runs processes configured by a file) is skipped on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import tests.helpers as helpers


@pytest.fixture(params=["sqlite", "postgresql"], autouse=True)
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "sqlite":
        yield "sqlite"
        return
    marker = request.node.get_closest_marker("sqlite_only")
    if marker is not None:
        reason = marker.kwargs.get("reason")
        assert reason, "sqlite_only needs a reason=: why this test cannot run on PostgreSQL"
        pytest.skip(f"SQLite only: {reason}")
    with helpers.pg_schemas("analyzer", "shuffler") as urls:
        monkeypatch.setattr(helpers, "STORES", urls)
        yield "postgresql"
