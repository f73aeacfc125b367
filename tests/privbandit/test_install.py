"""A non-editable install works on its own: build a wheel of this tree, install it into a fresh
virtual environment, and run ``privbandit demo --users 500`` from an empty directory elsewhere.

The dependencies are not downloaded again: a ``.pth`` file in the new environment lists this
environment's site-packages. A path line in a ``.pth`` file only adds the directory to
``sys.path``; that directory's own ``.pth`` files (among them the editable install's finder,
which maps ``privbandit`` to the checkout) are not processed, so the package can only come from
the wheel. The wheel holds one top-level name, ``privbandit`` (issue 25): ``shared`` and
``services`` are inside it. The services the demo starts are child processes of
the new environment's interpreter, so they prove the install too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.examples.promises import assert_obd_example, assert_own_environment, assert_own_stream
from tests.helpers import patience

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
# Everything a build needs; what a checkout accumulates besides is left behind.
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", "*.egg-info", "build", "dist", "out", "data", ".*_cache"
)


def run(cmd: list[str], timeout: float = 300, **kw: object) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def can_build_without_isolation() -> bool:
    """Whether this environment's setuptools builds wheels by itself (>= 70.1 has bdist_wheel;
    older ones need the ``wheel`` package): then the build needs no package index at all."""
    try:
        import setuptools
    except ImportError:
        return False
    major, minor = (int(x) for x in setuptools.__version__.split(".")[:2])
    if (major, minor) >= (70, 1):
        return True
    try:
        import wheel  # noqa: F401
    except ImportError:
        return False
    return True


def build_wheel(tmp: Path) -> Path:
    """A wheel of this tree as it is now, built from a copy (the checkout stays untouched)."""
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=NOT_SOURCE)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist")]
    if can_build_without_isolation():
        cmd.append("--no-build-isolation")  # else pip fetches setuptools for the build only
    run([*cmd, str(src)])
    (wheel,) = (tmp / "dist").glob("privbandit-*.whl")
    return wheel


def fresh_env() -> dict[str, str]:
    """This environment without anything that points into the checkout or its settings."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
            and not k.startswith("PRIVBANDIT_")}


def test_wheel_install_runs_the_demo_from_an_empty_directory(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        tops = {name.split("/")[0] for name in z.namelist()}
    assert tops == {"privbandit", "privbandit-0.1.0.dist-info"}, tops
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "-q", str(wheel)])
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(run([str(python), "-c", purelib], env=fresh_env()).stdout.strip())
    (site / "privbandit-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    empty = tmp_path / "elsewhere"
    empty.mkdir()
    (tmp_path / "tmp").mkdir()
    env = {**fresh_env(), "TMPDIR": str(tmp_path / "tmp")}  # what the demo keeps if it fails

    # The three packages, the packaged default config and the launcher all resolve inside the
    # new environment; children get no PYTHONPATH into the checkout.
    probe = (
        "import importlib.util, json, sys, privbandit, privbandit.shared, privbandit.services\n"
        "from privbandit.launcher import Cluster, SERVICES, import_root\n"
        "from privbandit.shared.settings import DEFAULT_CONFIG\n"
        "c = Cluster('d', {s: 1 + i for i, s in enumerate(SERVICES)})\n"
        "print(json.dumps({'files': [privbandit.__file__, privbandit.shared.__file__,\n"
        "    privbandit.services.__file__,\n"
        "    str(DEFAULT_CONFIG)], 'config_exists': DEFAULT_CONFIG.exists(),\n"
        "    'import_root': str(import_root()), 'pythonpath': c.env().get('PYTHONPATH'),\n"
        "    'path': sys.path, 'bare': [importlib.util.find_spec(n) is not None\n"
        "    for n in ('shared', 'services')]}))\n"
    )
    seen = json.loads(run([str(python), "-c", probe], cwd=empty, env=env).stdout)
    for file in seen["files"]:
        assert Path(file).resolve().is_relative_to(venv.resolve()), seen
    assert seen["config_exists"], seen
    assert seen["bare"] == [False, False], seen  # no top-level `shared` or `services` installed
    assert seen["import_root"] == "None" and seen["pythonpath"] is None, seen
    assert not any(p and Path(p).resolve() == REPO for p in seen["path"]), seen["path"]

    # As the README's command runs it: services of its own on a fresh data directory under
    # TMPDIR, serving only the demo's task, removed after a successful run.
    out = empty / "out.json"
    proc = run([str(venv / "bin" / "privbandit"), "demo", "--users", "500", "--fresh",
                "--json", str(out), "--no-progress"],
               timeout=patience(180), cwd=empty, env=env)
    result = json.loads(out.read_text())
    assert isinstance(result["final_regret"], float) and 0 <= result["final_regret"] <= 500
    rec = result["reconciliation"]
    assert rec["consistent"], (rec, proc.stdout)
    assert rec["feedbacks_sent"] == rec["reports_accepted"] == 500
    assert rec["reports_accepted"] == (
        rec["reports_counted"] + rec.get("reports_refused", 0) + rec["reports_pending"]
    )
    privacy = result["privacy"]
    assert privacy["threat_model"] == result["threat_model"]
    for key in ("ldp_epsilon", "ldp_delta", "central_epsilon", "central_delta", "accounting"):
        assert key in privacy, key
    assert sorted(p.name for p in empty.iterdir()) == ["out.json"]  # nothing else written here

    # The examples, as a user who installed the wheel runs them: from outside the checkout, with
    # nothing of it on the path (issue 25), each saying what its docstring promises
    # (tests/examples/promises.py; this is the one run of each).
    outs = {}
    for script in ("own_stream.py", "own_environment.py", "ope_on_logs.py"):
        done = run([str(python), str(REPO / "examples" / script)], timeout=patience(900),
                   cwd=empty, env=env)
        outs[script] = json.loads(done.stdout)
    assert_own_stream(outs["own_stream.py"])
    assert_own_environment(outs["own_environment.py"])
    # Li et al.'s replay on a uniform digits log: each interval (95%, with the between-path
    # variance of 4 replays) covers the policy's online average reward over as many users.
    ope = outs["ope_on_logs.py"]
    for algo in ("linucb", "ddp-linucb"):
        assert ope[algo]["covered"], ope[algo]
    assert ope["linucb"]["replay"] > ope["ddp-linucb"]["replay"]

    # The OBD worked example (issue 42) on an OBD-format log the test writes (the real sample
    # is never fetched): it runs from the empty directory on the installed wheel, tells the
    # policy that learned the price signal from the logged random policy, and writes only where
    # it is told.
    from tests.shared.core.obd_format import write_obd

    write_obd(tmp_path / "obd", n=1200, K=6, seed=3, ctr=0.1, best_price=0.9)
    before = sorted(p.name for p in empty.iterdir())
    done = run([str(python), str(REPO / "examples" / "obd_private_policies.py"),
                str(tmp_path / "obd"), "--epsilons", "8", "--repeats", "1", "--json",
                str(tmp_path / "obd.json")], timeout=patience(900), cwd=empty, env=env)
    obd = json.loads((tmp_path / "obd.json").read_text())
    assert_obd_example(obd, done.stdout, rounds=600)  # the second half of 1,200
    assert sorted(p.name for p in empty.iterdir()) == before
