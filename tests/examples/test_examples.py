"""The scripts of examples/ run as their own processes, from outside the checkout: what they do
with bad arguments (their promises on good ones: ``tests/examples/promises.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def launch(script: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "examples" / script), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, check=False)


# Each example's promises (tests/examples/promises.py) are checked where it runs from the installed
# wheel, outside the checkout: tests/privbandit/test_install.py. Running them here again, from the
# checkout, would run the same seeded script on the same code (~15 s of CPU for nothing more).


def test_obd_example_never_downloads(tmp_path: Path) -> None:
    """A missing path is one line; without a path it reads obp's shipped sample where obp is
    installed, and otherwise says to give the files (it never fetches them)."""
    import importlib.util

    done = launch("obd_private_policies.py", tmp_path, str(tmp_path / "missing"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no such file" in done.stderr
    if importlib.util.find_spec("obp") is None:
        done = launch("obd_private_policies.py", tmp_path)
        assert done.returncode == 2 and "never downloads" in done.stderr
