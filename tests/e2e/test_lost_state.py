"""The services as real processes (``privbandit up``'s launcher) with the packaged small config,
which sets no shuffler token: the launcher generates one for the data directory and the
shuffler's batches are accepted with it, also after a restart; a database lost between two
starts stops the next start with the file named, and ``--init`` starts afresh.

One deployment's life serves both stories (each cluster start costs seconds of CPU): the token's
across two starts, then the lost database across the next two."""

from __future__ import annotations

import asyncio
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from privbandit.demo import DemoOptions, run_demo_against
from privbandit.launcher import (
    SERVICES,
    TOKEN_ENV,
    TOKEN_FILE,
    Cluster,
    LaunchError,
    free_ports,
)
from tests.helpers import SMALL_CONFIG, TASKS, only_tasks, patience

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """Three services on free ports with the small config's task the tests drive, not started
    yet."""
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    ports = dict(zip(SERVICES, free_ports(3), strict=True))
    config = tmp_path / "small.toml"
    config.write_text(only_tasks(SMALL_CONFIG, [TASKS["ldp"]]))
    with Cluster(tmp_path / "data", ports, config=config, log_dir=tmp_path / "logs") as c:
        yield c


def run_users(cluster: Cluster, users: int, seed: int) -> dict:
    opts = DemoOptions("ldp", users=users, seed=seed, settle_timeout=patience(60), progress=False)
    return asyncio.run(run_demo_against(cluster.urls, TASKS["ldp"], opts))["reconciliation"]


def test_generated_token_survives_restarts_and_a_lost_database_stops_the_start(
    cluster: Cluster,
) -> None:
    """The generated token authenticates the shuffler and survives a restart; then a database
    lost between two starts stops the start naming it, and ``--init`` recovers."""
    cluster.start(timeout=patience(60))
    token_file = cluster.data_dir / TOKEN_FILE
    token = token_file.read_text()
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    rec = run_users(cluster, 10, seed=1)
    # Delivered and counted: the analyzer accepted the shuffler's generated token.
    assert rec["consistent"] and rec["reports_counted"] == 10, rec
    cluster.stop()
    cluster.start(timeout=patience(60))
    assert token_file.read_text() == token
    rec = run_users(cluster, 10, seed=2)
    assert rec["consistent"] and rec["reports_counted"] == 10, rec

    # The analyzer's database lost between two starts.
    cluster.stop()
    lost = cluster.data_dir / "analyzer" / "analyzer.sqlite3"
    lost.unlink()
    with pytest.raises(LaunchError) as refused:
        cluster.start(timeout=patience(60))
    message = str(refused.value)
    assert "analyzer exited with status 2" in message
    assert f"privbandit analyzer: refusing to start: {lost}" in message
    assert "--init" in message
    assert not lost.exists()
    cluster.start(timeout=patience(60), init=True)
    assert lost.stat().st_size > 0
    rec = run_users(cluster, 5, seed=3)
    assert rec["consistent"] and rec["reports_counted"] == 5, rec
