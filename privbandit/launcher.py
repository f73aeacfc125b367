"""Start and stop the three services as separate local processes (``privbandit up``/``demo``, e2e
tests).

Each service runs as ``<python> -m services.<name> --host 127.0.0.1 --port P`` in its own session
(so a Ctrl-C in the terminal reaches only the launcher, which then stops them in order). Where
they find each other, their config file and their data directory is passed through the
environment, exactly as a deployment would do it:

    PRIVBANDIT_CONFIG=<file>  PRIVBANDIT_DATA_DIR=<dir>
    PRIVBANDIT_ANALYZER__HOST=127.0.0.1  PRIVBANDIT_ANALYZER__PORT=<port>   (same for the others)

Everything binds and connects to loopback only.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import signal
import site
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

SERVICES = ("analyzer", "shuffler", "device")
LOOPBACK = "127.0.0.1"


class LaunchError(RuntimeError):
    """A service did not come up (it exited, or /healthz did not answer in time)."""


def import_root() -> Path | None:
    """Where a child must look to import the ``services`` this process would import: None when it
    comes from an installed distribution (a site-packages directory, which the child finds by
    itself), else the directory that holds the package (a source tree on ``sys.path``; an editable
    install's checkout). Nothing here assumes a source checkout."""
    spec = importlib.util.find_spec("services")
    if spec is None or not spec.submodule_search_locations:
        raise LaunchError("the services package is not importable")
    root = Path(next(iter(spec.submodule_search_locations))).resolve().parent
    site_dirs = {Path(p).resolve() for p in site.getsitepackages()}
    return None if root in site_dirs else root


def free_ports(n: int = 3, host: str = LOOPBACK) -> list[int]:
    """``n`` distinct TCP ports that were free on ``host`` a moment ago.

    All sockets are held open until every port is chosen, so the ports are distinct; another
    program could still grab one before the service binds it (a start then fails loudly).
    """
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def healthy(url: str, timeout: float = 1.0) -> bool:
    """True when ``GET {url}/healthz`` answers 200."""
    try:
        return httpx.get(f"{url}/healthz", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class ServiceProcess:
    """One service process and where it listens."""

    name: str
    port: int
    log_path: Path | None = None
    host: str = LOOPBACK
    proc: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, env: dict[str, str], python: str = sys.executable) -> None:
        if self.alive():
            raise LaunchError(f"{self.name} is already running (pid {self.pid})")
        cmd = [python, "-m", f"services.{self.name}", "--host", self.host, "--port", str(self.port)]
        out: IO[bytes] | int | None = None
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in _reap
            out = self._log
        self.proc = subprocess.Popen(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT if out is not None else None,
            start_new_session=True,
        )

    def wait_healthy(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise LaunchError(
                    f"{self.name} exited with status {self.proc.returncode}{self._log_tail()}"
                )
            if healthy(self.url, timeout=1.0):
                return
            time.sleep(0.1)
        raise LaunchError(f"{self.name} did not become healthy at {self.url} within {timeout:.0f}s"
                          f"{self._log_tail()}")

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM (graceful: lifespans close their stores), then SIGKILL after ``timeout``."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self._reap()

    def kill(self) -> int | None:
        """SIGKILL: a crash, with no chance to flush or close anything."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait()
        return self._reap()

    def _reap(self) -> int | None:
        code = self.proc.returncode if self.proc is not None else None
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def _log_tail(self, lines: int = 25) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return f"\n--- last lines of {self.log_path} ---\n" + "\n".join(tail)


class Cluster:
    """The three services as local processes sharing one config file and one data directory.

    ``ports`` maps every service name to its port (use ``free_ports()`` for a private cluster).
    ``config`` is the TOML file the services read (default: whatever ``PRIVBANDIT_CONFIG`` or the
    built-in default says). ``log_dir`` receives one log file per service; without it the services
    write to this process's terminal.
    """

    def __init__(
        self,
        data_dir: Path,
        ports: dict[str, int],
        *,
        config: Path | None = None,
        log_dir: Path | None = None,
        extra_env: dict[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        missing = set(SERVICES) - set(ports)
        if missing:
            raise ValueError(f"no port given for {', '.join(sorted(missing))}")
        self.data_dir = Path(data_dir)
        self.config = Path(config) if config is not None else None
        self.python = python
        self.extra_env = dict(extra_env or {})
        self.services = {
            name: ServiceProcess(
                name, int(ports[name]), log_path=(log_dir / f"{name}.log") if log_dir else None
            )
            for name in SERVICES
        }
        atexit.register(self.stop)  # never leave orphans behind, whatever happens to us

    def __getitem__(self, name: str) -> ServiceProcess:
        return self.services[name]

    @property
    def urls(self) -> dict[str, str]:
        return {name: svc.url for name, svc in self.services.items()}

    def env(self) -> dict[str, str]:
        """The child environment: this one, plus where everything is."""
        env = dict(os.environ)
        root = import_root()
        if root is not None:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(root), env.get("PYTHONPATH", "")) if p
            )
        env["PYTHONUNBUFFERED"] = "1"
        # The services do small linear algebra (d <= 64) per request; a multi-threaded BLAS
        # spends more time waking its threads than computing, and on a small machine the
        # spinning threads steal the CPU from the other services (10× slower decisions).
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(var, "1")
        env["PRIVBANDIT_DATA_DIR"] = str(self.data_dir)
        if self.config is not None:
            env["PRIVBANDIT_CONFIG"] = str(self.config)
        for name, svc in self.services.items():
            env[f"PRIVBANDIT_{name.upper()}__HOST"] = svc.host
            env[f"PRIVBANDIT_{name.upper()}__PORT"] = str(svc.port)
        env.update(self.extra_env)
        return env

    def start(self, names: Iterable[str] = SERVICES, timeout: float = 60.0) -> None:
        """Start services in dependency order and wait for each /healthz (the device is healthy
        only once it holds the analyzer's key and models, so the analyzer goes first)."""
        names = [n for n in SERVICES if n in set(names)]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = self.env()
        try:
            if "analyzer" in names:
                self.services["analyzer"].start(env, self.python)
                self.services["analyzer"].wait_healthy(timeout)
            rest = [n for n in names if n != "analyzer"]
            for n in rest:
                self.services[n].start(env, self.python)
            for n in rest:
                self.services[n].wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise

    def restart(self, name: str, timeout: float = 60.0) -> None:
        """Start a stopped or killed service again on the same port and data directory."""
        svc = self.services[name]
        if svc.alive():
            svc.stop()
        svc.start(self.env(), self.python)
        svc.wait_healthy(timeout)

    def kill(self, name: str) -> None:
        """SIGKILL one service (simulated crash)."""
        self.services[name].kill()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every running service, device first (it drains nothing on exit: its outbox is
        durable), then the shuffler, then the analyzer."""
        for name in reversed(SERVICES):
            self.services[name].stop(timeout)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        atexit.unregister(self.stop)


@contextlib.contextmanager
def local_cluster(
    data_dir: Path,
    *,
    config: Path | None = None,
    ports: dict[str, int] | None = None,
    log_dir: Path | None = None,
    timeout: float = 60.0,
) -> Iterator[Cluster]:
    """Start all three services (on free loopback ports unless given) and stop them on exit."""
    if ports is None:
        ports = dict(zip(SERVICES, free_ports(len(SERVICES)), strict=True))
    with Cluster(data_dir, ports, config=config, log_dir=log_dir) as cluster:
        cluster.start(timeout=timeout)
        yield cluster
