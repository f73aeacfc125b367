"""The scripts of examples/ run as their own processes, from outside the checkout, and say what
their docstrings promise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(script: str, cwd: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / script)], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_own_stream_learns_under_ldp(tmp_path: Path) -> None:
    out = run("own_stream.py", tmp_path)
    assert out["ldp_epsilon"] == 2.0
    assert out["second_half"] > out["first_half"]


def test_own_environment_beats_random(tmp_path: Path) -> None:
    out = run("own_environment.py", tmp_path)
    assert out["linucb"] < 0.5 * out["random"]
    assert out["ldp-linucb"] < out["random"]


# The OPE example (minutes) runs from the installed wheel in tests/privbandit/test_install.py,
# with its assertions (the replay intervals cover the online averages).
