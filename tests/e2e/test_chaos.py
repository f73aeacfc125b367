"""The short fault campaign (``load/chaos.py`` with 10 kills): users keep coming while the
shuffler, the analyzer and the device are killed with SIGKILL at random moments and restarted;
every report answered 202 is counted or refused exactly once (the campaign's own checks), on
every task (the services serve only the campaign's tasks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from load.chaos import TASKS, print_tally, run_campaign
from tests.helpers import SMALL_CONFIG, only_tasks, patience, time_scale

pytestmark = pytest.mark.slow


def test_ten_random_kills_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    tally = run_campaign(kills=10, seed=2, concurrency=4, time_limit=patience(300),
                         workdir=tmp_path, wait_scale=time_scale(),
                         config_text=only_tasks(SMALL_CONFIG, TASKS))
    print_tally(tally)
    assert sum(tally.kills.values()) == 10
    assert tally.restarts_failed == 0
    assert set(tally.tasks) == set(TASKS)
    for task, rec in tally.tasks.items():
        assert rec["users"] > 0, task
        assert rec["consistent"], (task, rec["problems"])
        assert rec["reports_accepted"] == rec["feedbacks_sent"]
        assert rec["distinct_report_ids"] == rec["reports_counted"]
