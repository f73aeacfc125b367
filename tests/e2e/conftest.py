"""End-to-end fixtures: the three services as real uvicorn processes on free loopback ports,
talking real HTTP to each other, with real SQLite files under a temporary data directory
(helpers in ``tests.helpers``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from privbandit.launcher import Cluster, local_cluster
from tests.helpers import (
    SBLB_SCHEDULED,
    TASKS,
    cluster_serving,
    only_tasks,
    patience,
    pg_schemas,
    with_policy,
    write_config,
)


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
def fresh_cluster(
    request: pytest.FixtureRequest, tmp_path: Path, e2e_config: Path
) -> Iterator[Cluster]:
    """A deployment of its own for one test (one whose counts must start from zero), serving
    only the tasks of the test module's ``DRIVEN_TASKS`` (``tests.helpers.cluster_serving``)."""
    with cluster_serving(tmp_path, tmp_path / "fresh.toml", e2e_config.read_text(),
                         request.module.DRIVEN_TASKS) as c:
        yield c


@pytest.fixture(params=["sqlite", "postgresql"])
def store_cluster(
    request: pytest.FixtureRequest, tmp_path: Path, e2e_config: Path
) -> Iterator[Cluster]:
    """A deployment of its own for one test, once with the embedded SQLite files and once with
    the analyzer and two shuffler replicas on the real PostgreSQL server (a fresh schema,
    dropped afterwards); ``cluster.store`` says which. Its ``small-shuffle`` task (sblb over
    HPKE reports) follows the crash tests' growing schedule, ε0 from a central target
    (``tests.helpers.CRASH_SCHEDULE``), so a crash falls in the middle of a schedule. It serves
    only the tasks of the test module's ``DRIVEN_TASKS`` (``tests.helpers.only_tasks``)."""
    config = with_policy(e2e_config, TASKS["shuffle"], tmp_path / "scheduled.toml",
                         **SBLB_SCHEDULED)
    config.write_text(only_tasks(config.read_text(), request.module.DRIVEN_TASKS))
    if request.param == "sqlite":
        with local_cluster(tmp_path / "data", config=config, log_dir=tmp_path / "logs",
                           store="sqlite", timeout=patience(60)) as c:
            yield c
        return
    with pg_schemas("app") as urls, local_cluster(
        tmp_path / "data", config=config, log_dir=tmp_path / "logs", store=urls["app"],
        timeout=patience(60), shufflers=2,
    ) as c:
        yield c
