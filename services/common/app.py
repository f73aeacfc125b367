"""The one way a service's FastAPI app is put together (each service's ``create_app`` calls
``build_app``): title and version, the request-body limit, error handling (every error as
``ErrorBody``), the service's router, and a lifespan that opens the service's runtime before the
first request, keeps it at ``app.state.runtime`` (where ``services.common.deps.get_runtime``
finds it) and closes it after the last.

Before that, the start-up checks every service makes the same way (``StartupRefused`` when one
fails): the shuffler's credential where it is used (analyzer and shuffler), and the service's
data directory (``services.common.datadir``): checked when the app is built, so that
``python -m services.<name>`` refuses at once with one message, and again when the lifespan
starts; the marker is written once the runtime has opened its files."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI
from starlette.types import Scope

from privbandit.services.common.admission import ALWAYS_ADMITTED, AdmissionMiddleware
from privbandit.services.common.cors import BrowserCORS
from privbandit.services.common.datadir import StartupRefused, StateDir
from privbandit.services.common.http_metrics import HttpMetrics
from privbandit.services.common.logs import REQUEST_ID, CorrelationIdMiddleware
from privbandit.services.common.web import BodyLimitMiddleware, ErrorHook, install_error_handlers
from privbandit.shared.credentials import shuffler_token_problem
from privbandit.shared.settings import Settings

# Opens a service's runtime (stores, clients, background loops) and closes it on exit.
RuntimeFactory = Callable[[], AbstractAsyncContextManager[Any]]


def build_app(
    service: str,
    settings: Settings,
    *,
    router: APIRouter,
    runtime: RuntimeFactory,
    max_body: int | Callable[[], int],
    description: str = "",
    on_error: ErrorHook | None = None,
    state: StateDir | None = None,
    init: bool = False,
    forget_persons: bool = False,
    uses_shuffler_token: bool = False,
    unbounded_suffixes: tuple[str, ...] = (),
    browser_routes: dict[str, tuple[str, ...]] | None = None,
) -> FastAPI:
    """A service app: ``runtime()`` is entered for the app's lifespan and what it yields becomes
    ``app.state.runtime``; request bodies above ``max_body`` bytes (a number, or a function
    evaluated per request) are refused with 413 ``body_too_large``; ``on_error`` sees every
    error response (see ``install_error_handlers``).

    ``state``: the service's data directory, checked here and before ``runtime()`` (``init``
    allows re-creating lost files, ``forget_persons`` those that held per-person state) and
    marked after it. ``uses_shuffler_token``: refuse to build
    the app without a usable ``settings.shuffler_token``. Both raise ``StartupRefused``.

    Requests in flight are bounded by ``settings.limits.<service>_requests``
    (``services.common.admission``); ``/healthz``, ``/metrics`` and paths ending with one of
    ``unbounded_suffixes`` (long-lived streams with a bound of their own) are not counted.

    ``browser_routes``: the path templates (with their methods) a browser client calls, opened
    to ``settings.browser_origins`` by CORS (``services.common.cors``); nothing when no origin
    is listed."""
    if uses_shuffler_token:
        problem = shuffler_token_problem(settings.shuffler_token)
        if problem is not None:
            raise StartupRefused(f"{service}: refusing to start: {problem}")
    if state is not None:
        state.check(init=init, forget_persons=forget_persons)

    http = HttpMetrics(service)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if state is not None:
            # The files may have gone since the app was built (their content was checked then).
            state.check(init=init, forget_persons=forget_persons, damage=False)
        async with runtime() as rt:
            if state is not None:
                state.mark()
            app.state.runtime = rt
            # The per-route HTTP metrics join the runtime's (new) registry: its GET /metrics.
            http.register(getattr(getattr(rt, "metrics", None), "registry", None))
            # Everything allocated until now (modules, schemas, keys, models) lives as long as
            # the process: out of the collector's sight, a full collection no longer walks it.
            # Under load, the objects of requests that wait for a commit survive the young
            # generations and trigger full collections; without the freeze each of those walked
            # the whole heap (decide at 50 clients: p99 157 ms → 40 ms, docs/benchmarks/load.md).
            # Only in a service process (``cli.serve`` and the analyzer's ``__main__`` set the
            # flag): a test process that builds many apps must keep collecting what earlier
            # ones left behind.
            # A service's ``__main__`` turns the collector off before its first import, and it
            # comes back on here: until now nearly everything allocated (modules, schemas, task
            # set-up) stays alive, so the collections a start would trigger walk a growing heap
            # to free almost nothing (a device's import and start: ~8 % of its CPU).
            if getattr(app.state, "freeze_gc", False):
                gc.collect()
                gc.freeze()
                gc.enable()
            yield

    # No /docs or /redoc pages: FastAPI's load their scripts from a CDN, which a deployment
    # without internet access cannot reach (issue 26 item 10); the schema is at /openapi.json.
    app = FastAPI(
        title=f"privbandit {service}", version="1", lifespan=lifespan, description=description,
        docs_url=None, redoc_url=None,
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_body)
    limit = settings.limits.requests(service)
    if limit is not None:
        # Added last, so outermost: a shed request costs no more than its 503.
        app.add_middleware(
            AdmissionMiddleware, limit=limit, retry_after=settings.limits.retry_after,
            exempt=ALWAYS_ADMITTED, exempt_suffixes=unbounded_suffixes, on_shed=_count_shed,
        )
    if browser_routes and settings.browser_origins:
        # Outside admission: a preflight is answered without taking a request slot, and a
        # shed request's 503 still carries the origin, so a page can read it and back off.
        app.add_middleware(BrowserCORS, origins=settings.browser_origins, routes=browser_routes)
    # Outside admission and CORS: a shed request's 503 carries its id too, and the browser may
    # send one (services.common.logs).
    app.add_middleware(CorrelationIdMiddleware, header_name=REQUEST_ID)
    app.state.settings = settings
    install_error_handlers(app, on_error=on_error)
    # The router's routes become the app's own: ``include_router`` would keep the router as a
    # nested dispatcher (``_IncludedRouter``), matched again on every request (decide: about
    # 0.06 of the floor's throughput, docs/benchmarks/load.md). The routers have no prefix, tags or
    # dependencies of their own, so nothing else changes.
    app.router.routes.extend(router.routes)
    # Last, so outermost: it times and counts every answer, the middleware's refusals included.
    http.instrument(app)
    return app


def _count_shed(scope: Scope) -> None:
    """Count a shed request in the service's metrics (once its runtime has opened them)."""
    runtime = getattr(scope["app"].state, "runtime", None)
    # Every service's metrics are a ``ServiceMetrics``, which declares the counter.
    counter = getattr(getattr(runtime, "metrics", None), "requests_shed", None)
    if counter is not None:
        counter.inc()
