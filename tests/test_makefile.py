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


def test_make_test_installs_builds_and_tests_the_web_library_first(tmp_path: Path) -> None:
    """``make test`` runs ``npm ci`` from the lockfile (stamped: once per lockfile change), the
    bundle's build, then the node tests, before pytest (whose interop tests drive the bundle).
    ``-B`` lists every step as if nothing were built yet."""
    venv = tmp_path / "no-venv-yet"
    done = subprocess.run(["make", "-n", "-B", "test", f"VENV={venv}"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()

    def first(fragment: str) -> int:
        return next(i for i, line in enumerate(lines) if fragment in line)

    assert "cd clients/web && npm ci" in lines[first("npm ci")]
    assert "touch clients/web/node_modules/.installed" in lines
    assert first("npm ci") < first("npm run --silent build") < first("node --test") \
        < first("pytest -q")
    assert "test/*.test.mjs" in lines[first("node --test")]
    stamp = subprocess.run(["make", "-n", "-p", "test", f"VENV={venv}"], cwd=ROOT,
                           capture_output=True, text=True).stdout
    assert "clients/web/node_modules/.installed: clients/web/package.json " \
           "clients/web/package-lock.json" in stamp
