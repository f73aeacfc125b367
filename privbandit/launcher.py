"""Start and stop the three services as separate local processes (``privbandit up``/``demo``, e2e
tests).

Each service runs as ``<python> -m privbandit.services.<name> --host 127.0.0.1 --port P`` would,
in its own session (so a Ctrl-C in the terminal reaches only the launcher, which then stops them in
order): forked from a process that has imported the services once (``privbandit.forkstart``: a
start then costs a quarter of the CPU), or with ``PRIVBANDIT_START_METHOD=exec`` as that very
command. Where
they find each other, their config file and their data directory is passed through the
environment, exactly as a deployment would do it:

    PRIVBANDIT_CONFIG=<file>  PRIVBANDIT_DATA_DIR=<dir>
    PRIVBANDIT_ANALYZER__HOST=127.0.0.1  PRIVBANDIT_ANALYZER__PORT=<port>   (same for the others)
    PRIVBANDIT_SHUFFLER_TOKEN_FILE=<file holding the token>

The shuffler's token has no default anywhere: unless the config file or the environment sets one,
the launcher generates one per data directory (``secrets.token_urlsafe(32)``, kept in
``<data dir>/shuffler-token`` with mode 0600, created once and reused by every later start).
It reaches the services as that file's name, never as a value in their environment (which any
process of the user may read: ``/proc/<pid>/environ``, ``ps e``); a token given to the launcher
in its environment is written to a file of mode 0600 in a private temporary directory, removed
when the services stop (``Cluster.stop``).

Everything binds and connects to loopback only.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.util
import json
import os
import random
import secrets
import shutil
import signal
import site
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from privbandit import forkstart
from privbandit.forkstart import Child
from privbandit.shared.credentials import shuffler_token_problem
from privbandit.shared.crypto.key_files import KeyFile, KeyFileError, fingerprint_path
from privbandit.shared.settings import DEFAULT_CONFIG

SERVICES = ("analyzer", "shuffler", "device")
LOOPBACK = "127.0.0.1"
TOKEN_ENV = "PRIVBANDIT_SHUFFLER_TOKEN"
TOKEN_FILE_ENV = "PRIVBANDIT_SHUFFLER_TOKEN_FILE"  # ``Settings.shuffler_token_file``
TOKEN_FILE = "shuffler-token"


class LaunchError(RuntimeError):
    """A service did not come up (it exited, or /healthz did not answer in time)."""


def import_root() -> Path | None:
    """Where a child must look to import the ``privbandit`` (and so ``privbandit.services``) this
    process imports: None when it comes from an installed distribution (a site-packages directory,
    which the child finds by itself), else the directory that holds the package (a source tree on
    ``sys.path``; an editable install's checkout). Nothing here assumes a source checkout."""
    spec = importlib.util.find_spec("privbandit")
    if spec is None or not spec.submodule_search_locations:
        raise LaunchError("the privbandit package is not importable")
    root = Path(next(iter(spec.submodule_search_locations))).resolve().parent
    site_dirs = {Path(p).resolve() for p in site.getsitepackages()}
    return None if root in site_dirs else root


# Where the kernel picks the local port of every outgoing connection (and of bind(0)); a service
# port chosen there can be taken by a client's connection between our check and the service's
# bind, or between a kill and a restart. Ports are chosen below it instead.
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_SERVICE_PORT = 20000


def service_port_range() -> range:
    """Candidate service ports: from ``LOWEST_SERVICE_PORT`` up to the kernel's ephemeral range
    (empty where that range starts too low or cannot be read: ``free_ports`` then binds port 0)."""
    try:
        low = int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return range(0)
    return range(LOWEST_SERVICE_PORT, low)


def _bind(host: str, port: int) -> socket.socket | None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        return None
    return sock


def free_ports(n: int = 3, host: str = LOOPBACK, *, consecutive: bool = False) -> list[int]:
    """``n`` distinct TCP ports that were free on ``host`` a moment ago (``consecutive``: a
    block ``p, p + 1, …``, as shuffler replicas use).

    They are drawn at random below the kernel's ephemeral range, so no outgoing connection of
    any process can take one before (or while) a service binds it; all sockets are held until
    every port is chosen, so the ports are distinct. Another program could still bind one
    first: a start then fails loudly, and ``wait_healthy`` never mistakes it for the service.
    """
    pool = service_port_range()
    draw = random.SystemRandom()  # not a secret: independent of any seeded generator
    for _ in range(200):
        socks: list[socket.socket] = []
        try:
            if len(pool) < 2 * n:  # no room below the ephemeral range: the kernel chooses
                first = _bind(host, 0)
                if first is None:
                    continue
                socks.append(first)
                base = first.getsockname()[1]
                wanted = list(range(base + 1, base + n)) if consecutive else [0] * (n - 1)
            elif consecutive:
                base = draw.randrange(pool.start, pool.stop - n + 1)
                wanted = list(range(base, base + n))
            else:
                wanted = draw.sample(pool, n)
            for port in wanted:
                sock = _bind(host, port)
                if sock is None:
                    break
                socks.append(sock)
            else:
                return [sock.getsockname()[1] for sock in socks]
        finally:
            for sock in socks:
                sock.close()
    raise LaunchError(f"no {n} free{' consecutive' if consecutive else ''} ports on {host}")


def free_port_block(n: int, host: str = LOOPBACK) -> int:
    """The first of ``n`` consecutive TCP ports that were all free on ``host`` a moment ago
    (shuffler replicas listen on consecutive ports)."""
    return free_ports(n, host, consecutive=True)[0]


def cluster_ports(shufflers: int = 1, host: str = LOOPBACK) -> dict[str, int]:
    """A port for every service of a cluster with ``shufflers`` replicas, drawn in one go: the
    replicas take the ports after the shuffler's (``Cluster``), so ports drawn separately for the
    analyzer and the device were free a moment ago but could fall inside that block. One block of
    ``shufflers + 2`` consecutive free ports: the shuffler's (and its replicas'), then the
    analyzer's and the device's."""
    base = free_port_block(shufflers + 2, host)
    return {"shuffler": base, "analyzer": base + shufflers, "device": base + shufflers + 1}


def token_configured(env: dict[str, str], config: Path | None) -> bool:
    """Whether the services' environment or their config file sets the shuffler's token or its
    file (environment variable names are matched case-insensitively, as pydantic-settings
    does)."""
    if any(k.upper() in (TOKEN_ENV, TOKEN_FILE_ENV) for k in env):
        return True
    return config_sets_token(env, config)


def config_sets_token(env: dict[str, str], config: Path | None) -> bool:
    """Whether the services' config file sets ``shuffler_token`` or ``shuffler_token_file``."""
    path = config or Path(env.get("PRIVBANDIT_CONFIG") or DEFAULT_CONFIG)
    try:
        table = tomllib.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return False  # the services report an unreadable config themselves
    return "shuffler_token" in table or "shuffler_token_file" in table


def write_secret(folder: Path, name: str, value: str) -> Path:
    """``folder/name`` holding ``value``, created with mode 0600 from the start (never readable
    by others, not even for a moment)."""
    path = folder / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(value)
    return path


def data_dir_token(data_dir: Path) -> str:
    """The shuffler token of a data directory: ``<data_dir>/shuffler-token``, created with a
    random token (mode 0600) if absent, else reused; like every key file it is fingerprinted when
    made and refused if it changed since (``shared.crypto.key_files``)."""
    path = Path(data_dir) / TOKEN_FILE
    try:
        data = KeyFile(path, "shuffler token").read(
            lambda: secrets.token_urlsafe(32).encode("ascii"))
    except KeyFileError as exc:
        raise LaunchError(f"{exc}; restore it from a backup, or delete it (and "
                          f"{fingerprint_path(path).name}) to generate a new one") from None
    token = data.decode("ascii", errors="replace").strip()
    problem = shuffler_token_problem(token)
    if problem is not None:
        raise LaunchError(f"{path}: {problem} (or delete {path} to generate a new one)")
    return token


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default TLS context (certificate verification on), built once per process: each
    client httpx makes without one builds its own, reading the CA bundle (~40 ms of CPU), and a
    start polls ``healthy`` every 0.1 s until the service answers; the demo's clients share it
    too (``verify=tls_context()``)."""
    return httpx.create_ssl_context()


def healthy(url: str, timeout: float = 1.0, service: str | None = None) -> bool:
    """True when ``GET {url}/healthz`` answers 200 (and, given ``service``, names that service:
    whatever else listens on the port is not mistaken for it)."""
    try:
        response = httpx.get(f"{url}/healthz", timeout=timeout, verify=tls_context())
        if response.status_code != 200:
            return False
        return service is None or response.json().get("service") == service
    except (httpx.HTTPError, ValueError, AttributeError):
        return False


@dataclass
class ServiceProcess:
    """One service process and where it listens."""

    name: str
    port: int
    log_path: Path | None = None
    host: str = LOOPBACK
    # ``python -m services.<module>`` (default: the name; shuffler replicas "shuffler-2", ...
    # run the shuffler module)
    module: str = ""
    proc: Child | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, env: dict[str, str], python: str = sys.executable, init: bool = False,
              forget_persons: bool = False) -> None:
        """Start the service; ``init``: with ``--init`` (create lost state files anew);
        ``forget_persons``: the device also with ``--forget-persons`` (replace a lost database
        that held per-person counts)."""
        if self.alive():
            raise LaunchError(f"{self.name} is already running (pid {self.pid})")
        module = f"privbandit.services.{self.module or self.name}"
        argv = ["--host", self.host, "--port", str(self.port), *(["--init"] if init else [])]
        if init and forget_persons and self.name == "device":
            argv.append("--forget-persons")
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if forkstart.start_method(python) == "forkserver":
            log = str(self.log_path) if self.log_path is not None else None
            self.proc = forkstart.start(module, argv, env, log)
            return
        out: IO[bytes] | int | None = None
        if self.log_path is not None:
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in _reap
            out = self._log
        self.proc = subprocess.Popen(
            [python, "-m", module, *argv],
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
            if healthy(self.url, timeout=1.0, service=self.module or self.name):
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
        store: str | None = None,
        shufflers: int = 1,
    ) -> None:
        """``store``: the analyzer's and the shuffler's store for this cluster (``"sqlite"`` or
        a ``postgresql://`` URL; default: the config's). ``shufflers``: shuffler replicas, on
        consecutive ports from the shuffler's (more than one needs a PostgreSQL store); the
        device spreads its uploads across them."""
        missing = set(SERVICES) - set(ports)
        if missing:
            raise ValueError(f"no port given for {', '.join(sorted(missing))}")
        if shufflers < 1:
            raise ValueError("at least one shuffler")
        if shufflers > 1 and not (store or "").startswith(("postgresql://", "postgres://")):
            raise ValueError("shuffler replicas share one PostgreSQL store: give a "
                             "postgresql:// store (--store) with more than one shuffler")
        self.data_dir = Path(data_dir)
        self.config = Path(config) if config is not None else None
        self.python = python
        self.extra_env = dict(extra_env or {})
        self.store = store
        # A private temporary directory (mode 0700) for a token given in the environment, handed
        # to the services as a file; made when needed, removed by ``stop``.
        self._secrets: Path | None = None
        names = ["analyzer", "shuffler", *(f"shuffler-{i}" for i in range(2, shufflers + 1)),
                 "device"]
        self.services = {
            name: ServiceProcess(
                name,
                int(ports["shuffler"]) + int(name.split("-")[1]) - 1
                if name.startswith("shuffler-") else int(ports[name]),
                log_path=(log_dir / f"{name}.log") if log_dir else None,
                module=name.split("-")[0],
            )
            for name in names
        }
        used = [svc.port for svc in self.services.values()]
        if len(set(used)) != len(used):
            raise ValueError(
                "two services would share a port: "
                + ", ".join(f"{n} {svc.port}" for n, svc in self.services.items())
                + " (shuffler replicas take the ports after the shuffler's; move the others)"
            )
        atexit.register(self.stop)  # never leave orphans behind, whatever happens to us

    def __getitem__(self, name: str) -> ServiceProcess:
        return self.services[name]

    @property
    def shufflers(self) -> list[ServiceProcess]:
        """The shuffler and its replicas."""
        return [svc for svc in self.services.values() if svc.module == "shuffler"]

    @property
    def urls(self) -> dict[str, str]:
        return {name: svc.url for name, svc in self.services.items()}

    def env(self) -> dict[str, str]:
        """The child environment: this one, plus where everything is (``start`` adds the
        shuffler's token)."""
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
        for name in SERVICES:
            svc = self.services[name]
            env[f"PRIVBANDIT_{name.upper()}__HOST"] = svc.host
            env[f"PRIVBANDIT_{name.upper()}__PORT"] = str(svc.port)
        if self.store is not None:
            env["PRIVBANDIT_ANALYZER__STORE"] = self.store
            env["PRIVBANDIT_SHUFFLER__STORE"] = self.store
        if len(self.shufflers) > 1:
            env["PRIVBANDIT_SHUFFLER__URLS"] = json.dumps([s.url for s in self.shufflers])
        env.update(self.extra_env)
        return env

    def _child_env(self) -> dict[str, str]:
        """``env()`` with the shuffler's token as a file (``PRIVBANDIT_SHUFFLER_TOKEN_FILE``),
        never as a value: a token in this environment (unless the config file sets one too,
        which it then overrides as before) moves to a file of mode 0600 in ``_secrets``; else,
        unless the config file sets one, the data directory's (created on first use)."""
        env = self.env()
        given = [k for k in env if k.upper() == TOKEN_ENV]
        if given and not any(k.upper() == TOKEN_FILE_ENV for k in env) and not config_sets_token(
                env, self.config):
            token = env[given[-1]]
            for k in given:
                del env[k]
            if self._secrets is None or not self._secrets.is_dir():
                self._secrets = Path(tempfile.mkdtemp(prefix="privbandit-secrets-"))
            env[TOKEN_FILE_ENV] = str(write_secret(self._secrets, TOKEN_FILE, token))
        elif not token_configured(env, self.config):
            data_dir_token(self.data_dir)  # made, or checked against its fingerprint
            env[TOKEN_FILE_ENV] = str((self.data_dir / TOKEN_FILE).resolve())
        return env

    def start(
        self, names: Iterable[str] = SERVICES, timeout: float = 60.0, init: bool = False,
        forget_persons: bool = False,
    ) -> None:
        """Start services in dependency order and wait for each /healthz (the device is healthy
        only once it holds the analyzer's key and models, so the analyzer goes first).

        ``init``: start them with ``--init``, which creates new files in place of lost ones
        (``services.common.datadir``); restarts never do. ``forget_persons``: the device with
        ``--forget-persons`` as well."""
        wanted = set(names)
        # "shuffler" is the shuffler with its replicas.
        names = [n for n, svc in self.services.items() if n in wanted or svc.module in wanted]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            env = self._child_env()
            if "analyzer" in names:
                self.services["analyzer"].start(env, self.python, init)
                self.services["analyzer"].wait_healthy(timeout)
            rest = [n for n in names if n != "analyzer"]
            for n in rest:
                self.services[n].start(env, self.python, init, forget_persons)
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
        svc.start(self._child_env(), self.python)
        svc.wait_healthy(timeout)

    def kill(self, name: str) -> None:
        """SIGKILL one service (simulated crash)."""
        self.services[name].kill()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every running service, device first (it drains nothing on exit: its outbox is
        durable), then the shuffler, then the analyzer."""
        for name in reversed(list(self.services)):
            self.services[name].stop(timeout)
        if self._secrets is not None:
            shutil.rmtree(self._secrets, ignore_errors=True)
            self._secrets = None

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
    store: str | None = None,
    shufflers: int = 1,
) -> Iterator[Cluster]:
    """Start all three services (on free loopback ports unless given) and stop them on exit;
    ``store`` and ``shufflers`` as for ``Cluster``."""
    if ports is None:
        ports = cluster_ports(shufflers)
    with Cluster(data_dir, ports, config=config, log_dir=log_dir, store=store,
                 shufflers=shufflers) as cluster:
        cluster.start(timeout=timeout)
        yield cluster
