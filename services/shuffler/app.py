"""The shuffler service: accepts opaque HPKE ciphertexts from devices, keeps them durably, and
releases each task's reports to the analyzer only in batches of exactly l, in a uniformly random
order from the OS CSPRNG, with nothing but the batch id and the ciphertexts (spec §2).

It holds no key and cannot read a report. Its task list comes from its own ``Settings``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from fastapi import FastAPI

from services.shuffler.forwarder import HTTP_TIMEOUT, Committer, Forwarder
from services.shuffler.metrics import ShufflerMetrics
from services.shuffler.routes import ShufflerRuntime, TaskSpec, router
from services.shuffler.store import Store
from services.shuffler.web import BodyLimitMiddleware, install_error_handlers, report_json_bytes
from shared.crypto import ciphertext_length, row_length
from shared.policies import randomizer_for
from shared.protocol import MAX_REPORTS_PER_UPLOAD
from shared.settings import Settings, TaskConfig

DB_FILE = "shuffler.sqlite3"


def _ct_bytes(config: TaskConfig) -> int:
    """The task's ciphertext length: report id + the randomizer's row + AEAD tag (public)."""
    return ciphertext_length(row_length(randomizer_for(config.policy)))


def create_app(
    settings: Settings | None = None,
    *,
    analyzer_transport: httpx.AsyncBaseTransport | None = None,
) -> FastAPI:
    """Build a shuffler app; its state lives in ``settings.data_dir / "shuffler"``.

    ``analyzer_transport``: how to reach the analyzer (default: HTTP to ``settings.analyzer``);
    tests pass ``httpx.ASGITransport(analyzer_app)`` or a failing transport.
    """
    settings = settings if settings is not None else Settings()
    specs = {t.id: TaskSpec(config=t, ct_bytes=_ct_bytes(t)) for t in settings.tasks}
    largest_report = max((s.ct_bytes for s in specs.values()), default=1024)
    max_body = MAX_REPORTS_PER_UPLOAD * report_json_bytes(largest_report) + 64 * 1024

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        metrics = ShufflerMetrics()
        store = Store(
            Path(settings.data_dir) / "shuffler" / DB_FILE,
            {t.id: t.batch_size for t in settings.tasks},
        )
        client = httpx.AsyncClient(
            base_url=settings.analyzer.url, transport=analyzer_transport, timeout=HTTP_TIMEOUT
        )
        forwarder = Forwarder(settings, store, metrics, client)
        committer = Committer(store, metrics, forwarder)
        app.state.runtime = ShufflerRuntime(settings, store, specs, committer, forwarder, metrics)
        committer.start()
        forwarder.start()
        try:
            yield
        finally:
            await committer.stop()
            await forwarder.stop()
            await client.aclose()
            store.close()

    app = FastAPI(title="privbandit shuffler", version="1", lifespan=lifespan)
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_body)
    app.state.settings = settings
    install_error_handlers(app)
    app.include_router(router)
    return app
