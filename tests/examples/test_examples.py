"""The scripts of examples/ run as their own processes, from outside the checkout, and say what
their docstrings promise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(script: str, cwd: Path, *args: str) -> dict:
    done = launch(script, cwd, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def launch(script: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "examples" / script), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, check=False)


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


def test_obd_example_tells_a_policy_that_beats_the_random_log(tmp_path: Path) -> None:
    """On an OBD-format log the test writes (6 items; the highest-priced one clicked 90% of
    the time, the others 10%), linucb on the example's features learns the price signal: its
    exact IPS interval lies above the logged random policy's; every verdict agrees with the
    printed intervals."""
    from tests.shared.core.obd_format import write_obd

    write_obd(tmp_path / "obd", n=2400, K=6, seed=3, ctr=0.1, best_price=0.9)
    done = launch("obd_private_policies.py", tmp_path, str(tmp_path / "obd"), "--epsilons",
                  "8", "--repeats", "1", "--json", str(tmp_path / "out.json"))
    assert done.returncode == 0, done.stderr
    out = json.loads((tmp_path / "out.json").read_text())
    assert "| policy | ε |" in done.stdout and "logged random policy" in done.stdout
    r = out["random"]
    assert r["low"] <= r["value"] <= r["high"] and r["rounds"] == 1200
    verdicts = {}
    for run in out["policies"]:
        x = run["frozen"]["estimates"]["ips-exact"]
        assert x["low"] <= x["value"] <= x["high"]
        expected = ("beats" if x["low"] > r["high"] else
                    "worse" if x["high"] < r["low"] else "not distinguishable")
        assert run["verdict"] == expected
        verdicts[(run["algo"], run["epsilon"])] = run["verdict"]
    assert verdicts[("linucb", None)] == "beats", out["policies"][0]
    assert len(verdicts) == 1 + 4  # linucb and four private policies at ε = 8


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
