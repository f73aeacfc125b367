"""The store parametrisation of the service tests: each test of a package whose conftest uses
``store`` runs once on SQLite and once on PostgreSQL (fresh schemas of its own for the analyzer
and the shuffler, dropped afterwards). A test marked ``sqlite_only`` (it opens the SQLite file
itself, or runs processes configured by a file, or its store calls are those of a test that runs
on both, which its reason names) is skipped on PostgreSQL; one marked
``postgres_only`` (e.g. replicas sharing one database) is skipped on SQLite. Either marker must
say why in ``reason=``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import tests.helpers as helpers


@pytest.fixture(params=["sqlite", "postgresql"], autouse=True)
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    only = "postgres_only" if request.param == "sqlite" else "sqlite_only"
    marker = request.node.get_closest_marker(only)
    if marker is not None:
        reason = marker.kwargs.get("reason")
        assert reason, f"{only} needs a reason=: why this test cannot run on {request.param}"
        pytest.skip(f"{only.replace('_', ' ')}: {reason}")
    if request.param == "sqlite":
        yield "sqlite"
        return
    with helpers.pg_schemas("analyzer", "shuffler") as urls:
        monkeypatch.setattr(helpers, "STORES", urls)
        yield "postgresql"
