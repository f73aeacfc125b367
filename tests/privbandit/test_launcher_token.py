"""``privbandit up`` / ``demo`` (the launcher): the shuffler's token is generated once per data
directory (mode 0600) and handed to the services as that file, unless the config or the
environment sets one; a token in the launcher's environment reaches them as a file of mode 0600
in a private temporary directory, removed when they stop: no child's environment holds the
token, checked on a real service process too. ``--init`` reaches the services' command line."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from privbandit import launcher, services_cmd
from privbandit.launcher import (
    TOKEN_ENV,
    TOKEN_FILE,
    TOKEN_FILE_ENV,
    Cluster,
    LaunchError,
    data_dir_token,
    free_ports,
)
from privbandit.shared.credentials import shuffler_token_problem
from tests.helpers import E2E_CONFIG, cli, patience, write_config

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "shared" / "defaults" / "small.toml"  # sets no token
PORTS = {"analyzer": 1, "shuffler": 2, "device": 3}


@pytest.fixture(autouse=True)
def no_token_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def handed(env: dict[str, str]) -> str:
    """The token a child with environment ``env`` reads (from the file it is named), after
    checking that no variable of ``env`` holds it."""
    assert not any(k.upper() == TOKEN_ENV for k in env)
    token = Path(env[TOKEN_FILE_ENV]).read_text()
    assert token and not any(token in v for k, v in env.items() if k != TOKEN_FILE_ENV)
    return token


def test_up_generates_an_owner_only_token_file_and_reuses_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = Cluster(data, PORTS, config=SMALL)._child_env()
    token = handed(env)
    path = data / TOKEN_FILE
    assert env[TOKEN_FILE_ENV] == str(path.resolve()) and mode(path) == 0o600
    assert len(token) >= 43 and shuffler_token_problem(token) is None  # token_urlsafe(32)
    # The next start (another launcher, same data directory) hands out the same token.
    assert handed(Cluster(data, PORTS, config=SMALL)._child_env()) == token
    assert data_dir_token(data) == token
    # Another data directory, another token.
    assert handed(Cluster(tmp_path / "other", PORTS, config=SMALL)._child_env()) != token


def test_a_token_set_by_the_config_or_the_environment_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    configured = write_config(tmp_path / "cfg")  # E2E_CONFIG sets shuffler_token
    assert "shuffler_token" in E2E_CONFIG
    env = Cluster(data, PORTS, config=configured)._child_env()
    assert TOKEN_ENV not in env and TOKEN_FILE_ENV not in env
    mine = "t" * 40
    cluster = Cluster(data, PORTS, config=SMALL, extra_env={TOKEN_ENV: mine})
    env = cluster._child_env()
    assert handed(env) == mine
    secret = Path(env[TOKEN_FILE_ENV])
    assert mode(secret) == 0o600 and mode(secret.parent) == 0o700  # a private directory
    cluster.stop()  # no service runs; the token's file and folder go with the services
    assert not secret.parent.exists()
    assert handed(cluster._child_env()) == mine  # a start after a stop makes them again
    cluster.stop()
    monkeypatch.setenv(TOKEN_ENV.lower(), mine)  # pydantic-settings ignores the case
    assert handed(Cluster(data, PORTS, config=SMALL)._child_env()) == mine
    # A file named by the environment is left as it is.
    monkeypatch.delenv(TOKEN_ENV.lower())
    env = Cluster(data, PORTS, config=SMALL,
                  extra_env={TOKEN_FILE_ENV: "/run/secrets/t"})._child_env()
    assert env[TOKEN_FILE_ENV] == "/run/secrets/t"
    assert not (data / TOKEN_FILE).exists()


def test_env_alone_writes_no_token_file(tmp_path: Path) -> None:
    """``Cluster.env()`` describes the children's environment; only a start creates the file."""
    Cluster(tmp_path / "data", PORTS, config=SMALL).env()
    assert not (tmp_path / "data").exists()


def test_an_unusable_token_file_is_refused_naming_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / TOKEN_FILE).write_text("change-me-shuffler-token\n")
    with pytest.raises(LaunchError, match=f"{data / TOKEN_FILE}: .*placeholder"):
        Cluster(data, PORTS, config=SMALL)._child_env()


def test_a_token_file_readable_by_others_is_tightened(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token = data_dir_token(data)
    (data / TOKEN_FILE).chmod(0o644)
    assert data_dir_token(data) == token and mode(data / TOKEN_FILE) == 0o600


@pytest.mark.parametrize("method", ["forkserver", "exec"])
def test_up_init_starts_the_services_with_init(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    commands: list[list[str]] = []

    class Started(Exception):
        pass

    def popen(cmd: list[str], **kwargs: Any) -> Any:
        commands.append(cmd)
        raise Started  # stop right there: no process is started

    def fork(module: str, argv: list[str], env: dict[str, str], log: str | None) -> Any:
        return popen(["python", "-m", module, *argv])

    monkeypatch.setenv("PRIVBANDIT_START_METHOD", method)
    monkeypatch.setattr(launcher.subprocess, "Popen", popen)
    monkeypatch.setattr(launcher.forkstart, "start", fork)
    monkeypatch.setattr(launcher, "healthy", lambda url, timeout=1.0: False)
    monkeypatch.setattr(services_cmd, "healthy", lambda url, timeout=1.0: False)
    # `up` installs SIGINT/SIGTERM handlers: not in the test process.
    monkeypatch.setattr(services_cmd.signal, "signal", lambda *args: None)
    config = tmp_path / "up.toml"
    config.write_text(SMALL.read_text() + "\n[analyzer]\nport = 1\n[shuffler]\nport = 2\n"
                      "[device]\nport = 3\n")
    for flags, init in (([], False), (["--init"], True)):
        commands.clear()
        with pytest.raises(Started):
            cli(["up", "--config", str(config), "--data-dir", str(tmp_path / "data"), *flags])
        assert commands and commands[0][2] == "privbandit.services.analyzer"
        assert ("--init" in commands[0]) is init


def test_a_changed_token_file_is_refused_naming_it(tmp_path: Path) -> None:
    """The token file is fingerprinted when made (``shared.crypto.key_files``): another token
    in its place, however well-formed, is refused; deleting both makes a new one."""
    data = tmp_path / "data"
    token = data_dir_token(data)
    (data / TOKEN_FILE).write_text(("x" if token[0] != "x" else "y") + token[1:])
    with pytest.raises(LaunchError, match=f"{data / TOKEN_FILE} is not the key that was made"):
        data_dir_token(data)
    for name in (TOKEN_FILE, f"{TOKEN_FILE}.sha256"):
        (data / name).unlink()
    assert data_dir_token(data) != token


@pytest.mark.parametrize("forget", [False, True])
def test_forget_persons_reaches_only_the_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forget: bool
) -> None:
    commands: list[list[str]] = []

    def popen(cmd: list[str], **kwargs: Any) -> Any:
        commands.append(cmd)
        return None

    monkeypatch.setenv("PRIVBANDIT_START_METHOD", "exec")
    monkeypatch.setattr(launcher.subprocess, "Popen", popen)
    for name, port in PORTS.items():
        launcher.ServiceProcess(name, port).start({}, init=True, forget_persons=forget)
    flagged = {cmd[2].rsplit(".", 1)[1] for cmd in commands if "--forget-persons" in cmd}
    assert flagged == ({"device"} if forget else set())
    assert all("--init" in cmd for cmd in commands)


def test_a_started_service_reads_the_token_from_its_file_not_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real analyzer process (started as ``python -m``, so that ``/proc/<pid>/environ`` is
    the environment it was given), with the token given to the launcher in its environment:
    the service starts (it refuses to without the token), its environment holds the file's
    name and not the token, and the file goes when the cluster stops."""
    monkeypatch.setenv("PRIVBANDIT_START_METHOD", "exec")
    mine = "s" * 43
    ports = dict(zip(("analyzer", "shuffler", "device"), free_ports(3), strict=True))
    with Cluster(tmp_path / "data", ports, config=SMALL, log_dir=tmp_path / "logs",
                 # SPT_NOENV: setproctitle (each service names itself in ps) leaves
                 # /proc/<pid>/environ as it was given instead of writing the title over it.
                 extra_env={TOKEN_ENV: mine, "SPT_NOENV": "1"}) as cluster:
        cluster.start(names=("analyzer",), timeout=patience(60), init=True)
        pid = cluster["analyzer"].pid
        assert pid is not None
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert mine.encode() not in environ
        variables = dict(v.split(b"=", 1) for v in environ.split(b"\0") if b"=" in v)
        secret = Path(variables[TOKEN_FILE_ENV.encode()].decode())
        assert secret.read_text() == mine and mode(secret) == 0o600
        assert TOKEN_ENV.encode() not in {k.upper() for k in variables}
    assert not secret.exists() and not secret.parent.exists()
