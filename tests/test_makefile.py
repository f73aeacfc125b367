"""The Makefile's two promises install what each needs (issue 26 item 8): ``make demo`` the
package's runtime dependencies only (a venv of its own stamp), ``make test`` those plus the test,
load and compiled-loop extras. Checked with ``make -n`` (prints the commands, runs none) against
a venv path that does not exist, so every install step is listed."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def planned(target: str, tmp_path: Path) -> list[str]:
    venv = tmp_path / "no-venv-yet"
    done = subprocess.run(["make", "-n", target, f"VENV={venv}"], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    return [line for line in done.stdout.splitlines() if "pip install" in line]


def test_make_demo_installs_the_runtime_only_and_make_test_the_extras(tmp_path: Path) -> None:
    demo = planned("demo", tmp_path)
    assert any(line.endswith("pip install --quiet -e .") for line in demo), demo
    assert not any("[test" in line or "locust" in line or "numba" in line for line in demo)
    for target in ("test", "bench", "load", "chaos"):
        steps = planned(target, tmp_path)
        assert any("-e '.[test,load,fast]'" in line for line in steps), (target, steps)
    assert planned("simulate", tmp_path) == demo
