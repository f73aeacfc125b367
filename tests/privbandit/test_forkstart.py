"""A service forked from the launcher's forkserver (``privbandit.forkstart``) is what
``python -m <module>`` would be: the same argv, exactly the given environment, its own session, an
empty stdin, its output appended to its log, the same working directory and the same exit status
(a code, an uncaught exception, a signal); the launcher's own script never runs again in it, and a
launcher that exits without stopping its services stops them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from privbandit import forkstart
from privbandit.forkstart import Child
from tests.helpers import deadline, patience

PROBE = "tests.privbandit.probe_main"
ROOT = Path(__file__).resolve().parents[2]


def start(method: str, argv: list[str], env: dict[str, str], log: Path) -> Child:
    if method == "forkserver":
        return forkstart.start(PROBE, argv, env, str(log))
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", PROBE, *argv], env=env,
                                stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def seen(path: Path, child: Child | None = None) -> dict[str, Any]:
    until = deadline(30)
    while not path.exists():
        assert child is None or child.poll() is None, f"the probe exited: {child.returncode}"
        assert time.monotonic() < until, "the probe wrote nothing"
        time.sleep(0.02)
    return dict(json.loads(path.read_text()))


def probe_env(tmp_path: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), "LC_ALL": "C.UTF-8",
            "PROBE_ONLY": "this", "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize("method", ["forkserver", "exec"])
def test_a_fork_sees_what_python_m_would(tmp_path: Path, method: str) -> None:
    env = probe_env(tmp_path)
    log = tmp_path / "probe.log"
    log.write_text("an earlier line\n")
    child = start(method, [str(tmp_path / "out"), "exit", "3"], env, log)
    assert child.wait(patience(30)) == 3 and child.returncode == 3
    probe = seen(tmp_path / "out")
    assert probe["argv"] == [str(tmp_path / "out"), "exit", "3"]
    assert probe["env"] == env  # nothing of the launcher's environment leaks in
    assert probe["sid"] == probe["pid"] == child.pid  # its own session
    assert probe["stdin"] == "" and probe["name"] == "__main__"
    assert probe["cwd"] == os.getcwd()
    assert log.read_text().splitlines() == [
        "an earlier line", "a line to stdout", "a line to stderr"]


@pytest.mark.parametrize("method", ["forkserver", "exec"])
def test_exit_statuses_are_those_of_popen(tmp_path: Path, method: str) -> None:
    env = probe_env(tmp_path)
    failing = start(method, [str(tmp_path / "a"), "raise"], env, tmp_path / "a.log")
    assert failing.wait(patience(30)) == 1
    assert "RuntimeError: the probe fails" in (tmp_path / "a.log").read_text()
    waiting = start(method, [str(tmp_path / "b"), "wait"], env, tmp_path / "b.log")
    seen(tmp_path / "b", waiting)
    assert waiting.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        waiting.wait(0.05)
    waiting.send_signal(15)
    assert waiting.wait(patience(30)) == -15
    killed = start(method, [str(tmp_path / "c"), "wait"], env, tmp_path / "c.log")
    seen(tmp_path / "c", killed)
    killed.kill()
    assert killed.wait(patience(30)) == -9
    killed.kill()  # a second kill of a reaped child signals nobody


def run_launcher(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    """Run ``body`` as an unguarded launcher script in a fresh interpreter."""
    script = tmp_path / "launcher_script.py"
    script.write_text(textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=patience(60),
                          env={**os.environ, "PYTHONPATH": str(ROOT),
                               "PRIVBANDIT_START_METHOD": "forkserver"})


def test_the_launchers_script_never_runs_again_in_a_service(tmp_path: Path) -> None:
    done = run_launcher(tmp_path, f"""
        import json, os
        from privbandit import forkstart
        with open("runs", "a") as f:
            f.write("ran\\n")
        env = {{"PYTHONPATH": {str(ROOT)!r}}}
        child = forkstart.start({PROBE!r}, ["out", "exit", "0"], env, "probe.log")
        print(child.wait({patience(30)}))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"]
    assert (tmp_path / "runs").read_text() == "ran\n"
    assert seen(tmp_path / "out")["argv"] == ["out", "exit", "0"]


def test_a_launcher_that_exits_stops_the_services_it_left_running(tmp_path: Path) -> None:
    done = run_launcher(tmp_path, f"""
        import time
        from pathlib import Path
        from privbandit import forkstart
        env = {{"PYTHONPATH": {str(ROOT)!r}}}
        child = forkstart.start({PROBE!r}, ["out", "wait"], env, "probe.log")
        while not Path("out").exists():
            time.sleep(0.02)
        print(child.pid)
    """)
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout)
    assert seen(tmp_path / "out")["pid"] == pid
    until = deadline(10)
    while Path(f"/proc/{pid}").exists() and "Z" not in state(pid):
        assert time.monotonic() < until, f"the probe {pid} outlived its launcher"
        time.sleep(0.05)


def state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return "Z"


def test_the_start_method_is_the_forkserver_unless_said_or_another_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(forkstart.START_METHOD_ENV, raising=False)
    assert forkstart.start_method(sys.executable) == "forkserver"
    assert forkstart.start_method("/usr/bin/false") == "exec"
    monkeypatch.setenv(forkstart.START_METHOD_ENV, "EXEC")
    assert forkstart.start_method(sys.executable) == "exec"
    monkeypatch.setenv(forkstart.START_METHOD_ENV, "spawn")
    with pytest.raises(ValueError, match="forkserver, exec"):
        forkstart.start_method(sys.executable)


def test_a_launcher_still_stops_its_service_when_the_forkserver_was_killed(
    tmp_path: Path,
) -> None:
    done = run_launcher(tmp_path, f"""
        import os, signal, time
        from multiprocessing import forkserver
        from pathlib import Path
        from privbandit import forkstart
        env = {{"PYTHONPATH": {str(ROOT)!r}}}
        child = forkstart.start({PROBE!r}, ["out", "wait"], env, "probe.log")
        while not Path("out").exists():
            time.sleep(0.02)
        server = forkserver._forkserver._forkserver_pid
        os.kill(server, signal.SIGKILL)
        os.waitpid(server, 0)
        print(child.poll())  # still running, though its status can no longer be reported
        child.send_signal(signal.SIGTERM)
        print(child.wait({patience(30)}), child.pid)
    """)
    assert done.returncode == 0, done.stderr
    running, status, pid = done.stdout.split()
    assert running == "None"
    assert status == "255"  # ended, with an unknown status (multiprocessing's convention)
    assert state(pid=int(pid)) == "Z"


def test_a_temporary_directory_too_deep_for_the_forkserver_socket_starts_by_exec(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The forkserver's Unix socket lives under the temporary directory; past Linux's 107
    characters it cannot bind, so the launcher starts services by ``python -m`` instead (seen
    in the wheel test, whose TMPDIR is a deep pytest path)."""
    import tempfile

    monkeypatch.delenv(forkstart.START_METHOD_ENV, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", "/tmp/" + "d" * 80)
    assert forkstart.start_method(sys.executable) == "exec"
    monkeypatch.setattr(tempfile, "tempdir", "/tmp")
    assert forkstart.start_method(sys.executable) == "forkserver"
