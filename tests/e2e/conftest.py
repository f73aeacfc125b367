"""End-to-end fixtures: the three services as real uvicorn processes on free loopback ports,
talking real HTTP to each other, with real SQLite files under a temporary data directory.

The config is small so the suite stays fast: d = 3, K = 5, shuffle batches of l = 20.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.launcher import Cluster, local_cluster

E2E_CONFIG = """\
# privbandit end-to-end test deployment (ports and data dir come from the environment)
shuffler_token = "e2e-shuffler-token-0123456789"
retry_initial = 0.05
retry_max = 0.5
log_level = "warning"

[[tasks]]
id = "e2e-shuffle"
threat_model = "shuffle"
K = 5
[tasks.policy]
algo = "sblb"
d = 3
eps0 = 8.0
batch_size = 20
confidence_scale = 0.1
regularizer = "clip"

[[tasks]]
id = "e2e-ldp"
threat_model = "ldp"
K = 5
[tasks.policy]
algo = "ldp-linucb"
d = 3
epsilon = 1.0
update_every = 25
confidence_scale = 0.1
regularizer = "clip"

[[tasks]]
id = "e2e-central"
threat_model = "central"
K = 5
[tasks.policy]
algo = "adar-oful"
d = 3
alpha = 2.0
epsilon = 1.0
"""

TASKS = {"shuffle": "e2e-shuffle", "ldp": "e2e-ldp", "central": "e2e-central"}
BATCH = {"shuffle": 20, "ldp": 1, "central": 1}


def write_config(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "e2e.toml"
    path.write_text(E2E_CONFIG)
    return path


@pytest.fixture(scope="session")
def e2e_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("e2e-config"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, e2e_config: Path) -> Iterator[Cluster]:
    """One running deployment shared by the tests of a module."""
    root = tmp_path_factory.mktemp("e2e-cluster")
    with local_cluster(root / "data", config=e2e_config, log_dir=root / "logs") as c:
        yield c
