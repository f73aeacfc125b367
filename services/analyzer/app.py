"""The analyzer service: holds the HPKE private key, ingests shuffled batches from the shuffler,
aggregates them with the task's policy and publishes models and the privacy ledger (spec §2, §4).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from privbandit.services.analyzer.routes import BROWSER_ROUTES, router
from privbandit.services.analyzer.runtime import AnalyzerRuntime, claim_tasks, open_store, state_dir
from privbandit.services.analyzer.transports import transport_for
from privbandit.services.common.app import build_app
from privbandit.shared.crypto.paillier import DEFAULT_KEY_BITS
from privbandit.shared.settings import Settings


def max_body_bytes(settings: Settings) -> int:
    """Largest acceptable request body: one batch of any task as its transport posts it
    (``AnalyzerTransport.max_body``: e.g. l reports of the task's exact ciphertext length),
    with room for formatting; anything larger is refused with 413 before parsing."""
    largest = 64 * 1024
    for task in settings.tasks:
        largest = max(largest, transport_for(task).max_body(task) + 64 * 1024)
    return largest


def create_app(
    settings: Settings | None = None,
    *,
    sse_keepalive: float = 15.0,
    paillier_key_bits: int = DEFAULT_KEY_BITS,
    init: bool = False,
) -> FastAPI:
    """Build an analyzer app; its state and keys live in ``settings.data_dir / "analyzer"``.
    Raises ``StartupRefused`` without a usable shuffler token, or when that directory was
    initialised before and its database or a key is missing or empty (unless ``init``:
    explicitly create new ones; see ``services.common.datadir``).

    ``sse_keepalive``: seconds between keep-alive comments on idle model streams.
    ``paillier_key_bits``: size of a Paillier key created on first start (an existing key is
    loaded as it is). Below 2048 bits only for tests: such a key is refused unless the app is
    built with the same small size, and the deployment configuration cannot ask for one.
    """
    settings = settings if settings is not None else Settings()
    if settings.analyzer.postgres:
        # A wrong URL or a server that is down refuses the start at once (no SQLite fallback).
        from privbandit.services.common import pg

        pg.check(settings.analyzer.store, service="analyzer")

    @asynccontextmanager
    async def open_runtime() -> AsyncIterator[AnalyzerRuntime]:
        # Opening SQLite and loading keys and policy state happen before the first request.
        store = open_store(settings)
        try:
            # A standby waits here (not yet listening) until the active analyzer is gone.
            await claim_tasks(store, settings, lambda: getattr(app.state, "stopping", False))
            runtime = AnalyzerRuntime(
                settings, sse_keepalive=sse_keepalive, paillier_key_bits=paillier_key_bits,
                store=store,
            )
        except BaseException:
            store.close()
            raise
        runtime.start()
        try:
            yield runtime
        finally:
            await runtime.stop()
            runtime.close()

    app = build_app(
        "analyzer", settings, router=router, runtime=open_runtime,
        max_body=max_body_bytes(settings),
        state=state_dir(settings),
        init=init,
        uses_shuffler_token=True,
        # A model stream lasts as long as its device is connected: bounded by
        # ``limits.model_streams``, not by the requests in flight.
        unbounded_suffixes=("/model/stream",),
        browser_routes=BROWSER_ROUTES,
    )
    return app


def request_shutdown(app: FastAPI) -> None:
    """End the app's long-lived responses (model streams) so a graceful server stop can finish.
    Safe to call from a signal handler or another thread."""
    app.state.stopping = True  # a standby still waiting for its tasks gives up
    runtime = getattr(app.state, "runtime", None)
    if runtime is not None:
        runtime.request_shutdown()
