"""Service processes forked from a process that has imported the services once.

``python -m privbandit.services.<name>`` spends about 1 s of CPU importing FastAPI, pydantic, NumPy
and the accountants before the service does anything (``python -m bench.forkserver_start``: a median
1.04-1.27 s against 0.24-0.25 s forked; docs/benchmarks/test-suite.md). A launcher that starts many
services (``privbandit up`` with replicas, the demo, the e2e tests with their restarts and kill
campaigns) pays it at every start. Instead, one ``multiprocessing`` forkserver per launcher process
imports the service modules once (``PRELOAD``), and every service is a fork of it that then runs the
module's ``__main__`` exactly as ``python -m`` would, with

- its own environment (``os.environ`` replaced by the one the launcher gives it),
- its own session (``os.setsid``: a Ctrl-C in the terminal reaches only the launcher),
- its own argv, stdin from ``/dev/null``, stdout and stderr appended to its log file (or the
  launcher's terminal), line-buffered as ``PYTHONUNBUFFERED`` would have them,
- its exit status as ``subprocess.Popen`` reports it (``-15`` after SIGTERM, as uvicorn re-raises
  the signal once it has shut down; the code of ``SystemExit``; 1 after an uncaught exception).

What differs, and why it is harmless here:

- Variables the interpreter reads at its own start (``PYTHONHASHSEED``, ``PYTHONPATH``, ...) are
  the forkserver's: it is started from the launcher's interpreter with the launcher's
  ``sys.path``, so the services import the same code. A launcher given another interpreter than
  its own starts services with ``python -m`` (``start_method``).
- State created at import is shared by every fork: the services create none that must differ
  between processes (their randomness comes from the OS CSPRNG or from generators made at start;
  ``random`` reseeds itself after a fork).
- ``atexit`` functions do not run (a forkserver child ends with ``os._exit``); the services
  register none, and under ``python -m`` a service stopped by SIGTERM does not run them either.
- ``ps`` shows the forkserver's command line, not ``-m privbandit.services.<name>``; the launcher
  prints each service's pid.

``PRIVBANDIT_START_METHOD=exec`` makes the launcher start every service with ``python -m``.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import multiprocessing as mp
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import threading
import types
from collections.abc import Iterator
from multiprocessing.process import BaseProcess
from typing import Protocol

START_METHOD_ENV = "PRIVBANDIT_START_METHOD"
START_METHODS = ("forkserver", "exec")
# How long the forkserver may take to report the status of a child that has ended (it does so as
# it reaps it, within milliseconds; the bound only guards against a forkserver that hangs).
STATUS_TIMEOUT = 10.0

# The forkserver imports these once. ``privbandit.services`` comes first: it pins the BLAS thread
# pools to one thread, which only works before NumPy is imported. A module that fails to import
# here is skipped by multiprocessing (its forks import it themselves, as ``python -m`` would).
PRELOAD = [
    "privbandit.services",
    "privbandit.services.common.cli",
    "privbandit.services.analyzer.app",
    "privbandit.services.shuffler.app",
    "privbandit.services.device.app",
    "privbandit.services.analyzer.server",
    "privbandit.shared.core.policies.bco_kernels",
    "dp_accounting",
    # what uvicorn and httpx import only when a server starts or a client connects
    "uvicorn.loops.auto",
    "uvicorn.protocols.websockets.auto",
    "uvicorn.lifespan.on",
    "anyio._backends._asyncio",
    "httpcore",
]


class Child(Protocol):
    """What the launcher needs of a service process: ``subprocess.Popen``'s part it uses."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


def start_method(python: str) -> str:
    """How the launcher starts a service with interpreter ``python``: ``"forkserver"`` unless
    ``PRIVBANDIT_START_METHOD=exec`` says otherwise, the interpreter is not this one, or the
    platform has no forkserver."""
    wanted = os.environ.get(START_METHOD_ENV, "forkserver").strip().lower() or "forkserver"
    if wanted not in START_METHODS:
        raise ValueError(f"{START_METHOD_ENV} must be one of {', '.join(START_METHODS)}, "
                         f"not {wanted!r}")
    if wanted == "exec" or "forkserver" not in mp.get_all_start_methods():
        return "exec"
    if not _socket_path_fits():
        return "exec"
    same = python == sys.executable or (
        os.path.exists(python) and os.path.samefile(python, sys.executable))
    return "forkserver" if same else "exec"


class ForkedChild:
    """A forkserver child seen through ``subprocess.Popen``'s interface.

    The forkserver reaps it and reports its exit status. Whether it still runs, and where a signal
    goes, is asked of a pidfd (Linux 5.3 or later) where there is one: a pidfd names this process
    and never a later one given the same pid, and it still answers when the forkserver itself has
    been killed (e.g. by a signal to the launcher's process group), so that the launcher can
    still stop its services; their status is then unknown and reads 255, as multiprocessing has
    it.
    """

    def __init__(self, process: BaseProcess, what: str) -> None:
        self._process = process
        self._what = what
        pid = process.pid
        if pid is None:  # pragma: no cover - start() sets it or raises
            raise RuntimeError(f"{what} has no pid after its start")
        self._pid = pid
        self._code: int | None = None
        self._pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):  # no pidfds here, or it has ended
            self._pidfd = os.pidfd_open(pid)

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def returncode(self) -> int | None:
        return self._code

    def _ended(self, timeout: float | None) -> bool:
        if self._pidfd is None:
            self._process.join(timeout)
            return self._process.exitcode is not None
        return bool(select.select([self._pidfd], [], [], timeout)[0])

    def poll(self) -> int | None:
        if self._code is None and self._ended(0):
            self._process.join(STATUS_TIMEOUT)  # the forkserver reaps it and writes its status
            code = self._process.exitcode
            self._code = 255 if code is None else code
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
        return self._code

    def wait(self, timeout: float | None = None) -> int:
        if self._code is None and not self._ended(timeout):
            raise subprocess.TimeoutExpired(self._what, timeout or 0.0)
        code = self.poll()
        assert code is not None
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is not None:
            return  # reaped: its pid may be another process's by now
        with contextlib.suppress(ProcessLookupError):
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, sig)
            else:
                os.kill(self._pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


# The forkserver children started and not yet seen to end. multiprocessing joins a launcher's live
# children when the launcher's interpreter exits; ``_stop_leftovers`` stops them first, so that a
# launcher that did not stop a service neither hangs at exit nor leaves it running.
_LIVE: set[ForkedChild] = set()
# The forkserver listens on a Unix socket at <tempdir>/pymp-XXXXXXXX/listener-XXXXXXXX
# (multiprocessing.connection.arbitrary_address): 32 characters after the temporary directory,
# and Linux's sun_path holds 107. A deep TMPDIR (e.g. a test's tmp_path) would make the bind
# fail with "AF_UNIX path too long"; services then start by python -m instead.
_SOCKET_SUFFIX = len("/pymp-12345678/listener-12345678")
_SUN_PATH_MAX = 107


def _socket_path_fits() -> bool:
    return len(tempfile.gettempdir()) + _SOCKET_SUFFIX <= _SUN_PATH_MAX


_context: mp.context.ForkServerContext | None = None


def _forkserver() -> mp.context.ForkServerContext:
    global _context
    if _context is None:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        # Registered after multiprocessing's own exit function, so it runs before it.
        atexit.register(_stop_leftovers)
        _context = ctx
    return _context


def _stop_leftovers(timeout: float = 10.0) -> None:
    children = [c for c in _LIVE if c.poll() is None]
    for child in children:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signal.SIGTERM)
    for child in children:
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            child.wait()


def _run_module(module: str, argv: list[str], env: dict[str, str], log: str | None) -> None:
    """In the fork: become what ``python -m <module> <argv>`` with ``env`` would be, then run it."""
    os.setsid()
    os.environ.clear()
    os.environ.update(env)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if log is not None:
        out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=True)
    sys.argv = [module, *argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


_STARTING = threading.Lock()


@contextlib.contextmanager
def _main_hidden() -> Iterator[None]:
    """multiprocessing has every child import its parent's ``__main__`` first (for targets defined
    there; ``multiprocessing.spawn.prepare``). Ours is in this module, and a launcher's script must
    not run again in each service it starts (an unguarded one would start services in a loop), so
    the child's start data is gathered while ``__main__`` is a module with neither file nor
    spec."""
    with _STARTING:
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = main


def start(module: str, argv: list[str], env: dict[str, str], log: str | None) -> ForkedChild:
    """Fork ``python -m <module> <argv>`` from the forkserver, with environment ``env`` and its
    output appended to the file ``log`` (``None``: the launcher's terminal)."""
    process = _forkserver().Process(
        target=_run_module, args=(module, argv, env, log), name=module, daemon=False)
    with _main_hidden():
        process.start()
    child = ForkedChild(process, module)
    _LIVE.difference_update([c for c in _LIVE if c.poll() is not None])
    _LIVE.add(child)
    return child
