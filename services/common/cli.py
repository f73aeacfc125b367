"""What ``python -m services.<name>`` does the same way for every service: its command line (bind
address, access log, ``--init``), its logging set-up, and refusing to start with one message
(``build_or_exit``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Protocol, TypeVar

import uvicorn
from fastapi import FastAPI
from setproctitle import setproctitle
from threadpoolctl import ThreadpoolController, threadpool_limits

from privbandit.services.common.datadir import StartupRefused
from privbandit.services.common.logs import setup_logging
from privbandit.services.common.server import server_config
from privbandit.shared.settings import Settings

Built = TypeVar("Built")


class AppFactory(Protocol):
    """A service's ``create_app``: its app from the settings, ``init`` as ``--init`` says (the
    device's also takes ``forget_persons``, as ``--forget-persons`` says)."""

    def __call__(self, settings: Settings | None = None, *, init: bool = False) -> FastAPI: ...


def service_args(
    name: str, description: str | None, settings: Settings, argv: list[str] | None = None
) -> argparse.Namespace:
    """``--host``, ``--port`` (default: the service's address in the settings),
    ``--access-log`` (default: on only at log level debug: one line per request costs more than
    handling a small request under load), ``--init`` and, for the device, ``--forget-persons``
    (see ``services.common.datadir``).

    ``--host`` is only the bind address (``0.0.0.0`` in a container); the peers' addresses come
    from the settings (config file and ``PRIVBANDIT_*`` environment variables)."""
    address = getattr(settings, name)
    parser = argparse.ArgumentParser(prog=f"python -m services.{name}", description=description)
    parser.add_argument("--host", default=address.host,
                        help=f"bind address (default: {address.host}, from the settings)")
    parser.add_argument("--port", type=int, default=address.port,
                        help=f"port (default: {address.port}, from the settings)")
    parser.add_argument("--access-log", action="store_true",
                        help="log every request (default: only at log level debug)")
    parser.add_argument("--init", action="store_true",
                        help="create new state files (database, keys) in place of missing or "
                             "empty ones; without it a service whose data directory was "
                             "initialised before refuses to start when one is lost")
    if name == "device":
        parser.add_argument("--forget-persons", action="store_true",
                            help="with --init: also replace a lost database that held per-person "
                                 "contribution counts (each person can then contribute k more "
                                 "reports in the current period)")
    args = parser.parse_args(argv)
    if getattr(args, "forget_persons", False) and not args.init:
        parser.error("--forget-persons only means something with --init")
    args.access_log = args.access_log or settings.log_level.lower() == "debug"
    return args


def start_process(name: str, args: argparse.Namespace, settings: Settings) -> None:
    """What a service process does before building its app: logging as the settings say
    (``log_level``, ``log_format``) and its name in ``ps``."""
    setup_logging(name, settings.log_level, settings.log_format)
    name_process(name, args.host, args.port)


def name_process(name: str, host: str, port: int) -> None:
    """Name this process after its service in ``ps``/``top`` (``privbandit-analyzer
    127.0.0.1:8701``) instead of ``python -m services.analyzer``."""
    setproctitle(f"privbandit-{name} {host}:{port}")


def build_or_exit(name: str, create: Callable[[], Built]) -> Built:
    """``create()``, or, if the service refuses to start (``StartupRefused``: lost state, no
    usable credential), its one message on stderr and exit status 2."""
    try:
        return create()
    except StartupRefused as exc:
        # The message starts with the service's name ("shuffler: refusing to start: ...").
        message = str(exc) if str(exc).startswith(f"{name}: ") else f"{name}: {exc}"
        print(f"privbandit {message}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def single_threaded_blas() -> ThreadpoolController:
    """Limit the BLAS (OpenBLAS, MKL) of this process to one thread; the limiter, which can
    restore the previous limits.

    A service's linear algebra is on d×d matrices (d ≤ a few dozen), far below where a second
    thread pays off, and a multi-threaded BLAS hands even those to its worker threads. When the
    other cores are busy (a loaded host, or the service's own clients), the caller then waits
    for a worker to be scheduled: a 5×5 triangular solve took 2.9 ms instead of 8 µs on this
    project's 2-core machine (docs/benchmarks/load.md, "A quiet machine"), which stalls the event
    loop."""
    return threadpool_limits(limits=1, user_api="blas")


def serve(
    app: FastAPI, args: argparse.Namespace, settings: Settings, graceful_timeout: int
) -> None:
    """Run ``app`` with uvicorn at the parsed address until SIGINT/SIGTERM; open responses get
    ``graceful_timeout`` whole seconds to finish (uvicorn takes an int). The objects alive once
    the service has started are frozen out of the garbage collector (``build_app``'s lifespan),
    and BLAS runs on one thread (``single_threaded_blas``). Connections follow
    ``settings.connections`` (``services.common.server``)."""
    app.state.freeze_gc = True
    single_threaded_blas()
    uvicorn.Server(server_config(
        app, args.host, args.port, settings.connections, log_level=settings.log_level,
        access_log=args.access_log, graceful_timeout=graceful_timeout,
    )).run()


def run_service(
    name: str,
    description: str | None,
    create_app: AppFactory,
    argv: list[str] | None = None,
    *,
    graceful_timeout: int,
) -> None:
    """``python -m services.<name>``: settings from the config file and the environment, the
    command line, logging, then the app from ``create_app(settings, init=...)`` served until
    stopped (or exit status 2 if it refuses to start)."""
    settings = Settings()
    args = service_args(name, description, settings, argv)
    start_process(name, args, settings)
    options = {"forget_persons": True} if getattr(args, "forget_persons", False) else {}
    app = build_or_exit(name, lambda: create_app(settings, init=args.init, **options))
    serve(app, args, settings, graceful_timeout=graceful_timeout)
