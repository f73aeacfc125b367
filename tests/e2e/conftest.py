"""End-to-end fixtures: the three services as real uvicorn processes on free loopback ports,
talking real HTTP to each other, with real SQLite files under a temporary data directory.

The config is small so the suite stays fast: d = 3, K = 5, shuffle batches of l = 20.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.cli_services import add_demo_parser, add_up_parser
from shared.demo import Driver, fetch_task, reconcile, snapshot, wait_quiescent
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


@pytest.fixture
def fresh_cluster(tmp_path: Path, e2e_config: Path) -> Iterator[Cluster]:
    """A deployment of its own for one test (tests that crash services)."""
    with local_cluster(tmp_path / "data", config=e2e_config, log_dir=tmp_path / "logs") as c:
        yield c


def cli(argv: list[str]) -> int:
    """``privbandit up`` / ``privbandit demo`` as the CLI runs them."""
    parser = argparse.ArgumentParser(prog="privbandit")
    sub = parser.add_subparsers(dest="command", required=True)
    add_up_parser(sub)
    add_demo_parser(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


async def wait_done(driver: Driver, n: int, timeout: float = 60.0) -> None:
    """Until the driver has finished ``n`` users."""
    deadline = time.monotonic() + timeout
    while driver.done < n:
        assert time.monotonic() < deadline, f"driver stuck at {driver.done} users"
        await asyncio.sleep(0.01)


def run_with_backend_crash(
    cluster: Cluster, task_id: str, users: int, seed: int
) -> tuple[Driver, dict[str, Any], list[str]]:
    """Drive ``users`` users through ``task_id`` while the shuffler and the analyzer are killed
    with SIGKILL a fifth of the way in, users keep coming while both are down (decide is local,
    feedback goes to the device's durable outbox), the shuffler restarts first (and cannot
    deliver), then the analyzer, on their old stores, keys and ports. Returns the driver, the
    reconciliation once the system is quiescent, and what happened when."""
    urls = cluster.urls
    events: list[str] = []

    async def chaos(driver: Driver) -> None:
        await wait_done(driver, users // 5)
        await asyncio.to_thread(cluster.kill, "shuffler")
        await asyncio.to_thread(cluster.kill, "analyzer")
        events.append(f"killed at {driver.done}")
        mark = driver.done
        await wait_done(driver, mark + users // 5)
        async with httpx.AsyncClient() as c:
            st = (await c.get(f"{urls['device']}/v1/status")).json()
        assert st["outbox_pending"] > 0, st
        events.append(f"outbox {st['outbox_pending']} at {driver.done}")
        await asyncio.to_thread(cluster.restart, "shuffler")
        await wait_done(driver, driver.done + users // 10)
        await asyncio.to_thread(cluster.restart, "analyzer")
        events.append(f"restarted at {driver.done}")

    async def run() -> tuple[Driver, dict[str, Any]]:
        task = await fetch_task(urls["analyzer"], task_id)
        async with httpx.AsyncClient(timeout=10) as c:
            before = await snapshot(urls, task_id, c)
        driver = Driver(urls["device"], task, users, concurrency=4, seed=seed)
        result, _ = await asyncio.gather(driver.run(), chaos(driver))
        after = await wait_quiescent(urls, task_id, task.batch_size, timeout=90)
        return driver, reconcile(result.feedbacks_sent, before, after)

    driver, rec = asyncio.run(run())
    assert len(events) == 3, events
    return driver, rec, events


def analyzer_totals(data_dir: Path, task_id: str) -> dict[str, Any]:
    """What the analyzer's durable store says about a task (read-only)."""
    db = Path(data_dir) / "analyzer" / "analyzer.sqlite3"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        ids, distinct = conn.execute(
            "SELECT COUNT(*), COUNT(DISTINCT report_id) FROM report_ids WHERE task = ?",
            (task_id,),
        ).fetchone()
        counted, rejected, batches = conn.execute(
            "SELECT reports_counted, rejected, batches FROM tasks WHERE task = ?", (task_id,)
        ).fetchone()
        per_batch = [n for (n,) in conn.execute(
            "SELECT counted FROM batches WHERE task = ?", (task_id,)
        )]
    return {"report_ids": ids, "distinct_report_ids": distinct, "counted": counted,
            "rejected": rejected, "batches": batches, "per_batch": per_batch}
