"""End-to-end fixtures: the three services as real uvicorn processes on free loopback ports,
talking real HTTP to each other, with real SQLite files under a temporary data directory
(helpers in ``tests.helpers``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from privbandit.launcher import Cluster, local_cluster
from tests.helpers import patience, pg_schemas, write_config


@pytest.fixture(scope="session")
def e2e_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("e2e-config"))


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory, e2e_config: Path) -> Iterator[Cluster]:
    """One running deployment shared by every e2e test (of every module) that only needs tasks
    of its own: each drives tasks no other user of this fixture drives, and checks its counts
    per task (one start instead of one per module; stopped after the e2e package). Under
    pytest-xdist their modules go to one worker together, which starts it once: a module that
    uses it is listed in ``tests/conftest.py``'s ``SHARED_CLUSTER_MODULES``."""
    root = tmp_path_factory.mktemp("e2e-cluster")
    with local_cluster(root / "data", config=e2e_config, log_dir=root / "logs",
                       timeout=patience(60)) as c:
        yield c


@pytest.fixture
def fresh_cluster(tmp_path: Path, e2e_config: Path) -> Iterator[Cluster]:
    """A deployment of its own for one test (tests that crash services)."""
    with local_cluster(tmp_path / "data", config=e2e_config, log_dir=tmp_path / "logs",
                       timeout=patience(60)) as c:
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
                           store="sqlite", timeout=patience(60)) as c:
            yield c
        return
    with pg_schemas("app") as urls, local_cluster(
        tmp_path / "data", config=e2e_config, log_dir=tmp_path / "logs", store=urls["app"],
        timeout=patience(60),
    ) as c:
        yield c
