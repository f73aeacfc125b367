"""End-to-end fixtures: the three services as real uvicorn processes on free loopback ports,
talking real HTTP to each other, with real SQLite files under a temporary data directory
(helpers in ``tests.helpers``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from privbandit.launcher import Cluster, local_cluster
from tests.helpers import pg_schemas, write_config


@pytest.fixture(scope="session")
def e2e_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("e2e-config"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, e2e_config: Path) -> Iterator[Cluster]:
    """One running deployment shared by the tests of a module."""
    root = tmp_path_factory.mktemp("e2e-cluster")
    with local_cluster(root / "data", config=e2e_config, log_dir=root / "logs") as c:
        yield c


@pytest.fixture
def fresh_cluster(tmp_path: Path, e2e_config: Path) -> Iterator[Cluster]:
    """A deployment of its own for one test (tests that crash services)."""
    with local_cluster(tmp_path / "data", config=e2e_config, log_dir=tmp_path / "logs") as c:
        yield c


@pytest.fixture(params=["sqlite", "postgresql"])
def store_cluster(
    request: pytest.FixtureRequest, tmp_path: Path, e2e_config: Path
) -> Iterator[Cluster]:
    """A deployment of its own for one test, once with the embedded SQLite files and once with
    the analyzer and the shuffler on the real PostgreSQL server (a fresh schema, dropped
    afterwards); ``cluster.store`` says which."""
    if request.param == "sqlite":
        with local_cluster(tmp_path / "data", config=e2e_config, log_dir=tmp_path / "logs",
                           store="sqlite") as c:
            yield c
        return
    with pg_schemas("app") as urls, local_cluster(
        tmp_path / "data", config=e2e_config, log_dir=tmp_path / "logs", store=urls["app"]
    ) as c:
        yield c
