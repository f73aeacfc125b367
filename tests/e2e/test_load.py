"""The Locust scenarios run for real (``load/run.py`` for 3 seconds per run, two scenarios):
fresh services and the bare floor come up, Locust drives both, every request succeeds, and
nothing the shuffler answered 202 is lost. No assertion on speed: the figures go to
docs/benchmarks/load.md, measured by ``make load``."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import patience

# Not imported here: importing locust monkey-patches this process with gevent.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("locust") is None,
                                reason="needs the load extra (locust)")

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ("shuffler-intake", "decide")


def test_locust_scenarios_run_and_the_shuffler_loses_nothing(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "load" / "run.py"), "--time", "3",
         "--only", ",".join(SCENARIOS), "--json", str(summary)],
        cwd=tmp_path, capture_output=True, text=True, timeout=patience(240), check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(summary.read_text())
    assert set(results) == set(SCENARIOS)
    for name, row in results.items():
        for side in ("service", "floor"):
            run = row[side]
            assert run["requests"] > 0, (name, side)
            assert run["failures"] == 0, (name, side, run)
    rec = results["shuffler-intake"]["no_loss"]
    assert rec["consistent"], rec
    # Every report answered 202 was accepted by the shuffler, and is counted or pending.
    assert rec["shuffler_accepted"] >= rec["accepted_202"] > 0
    assert rec["counted_or_refused"] + rec["pending"] == rec["shuffler_accepted"]
