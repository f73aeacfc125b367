"""The device service's app factory: storage, model cache and uploader wired into one FastAPI app.

``create_app`` takes optional httpx transports for the two peers so tests can run the analyzer and
shuffler apps in-process (``httpx.ASGITransport``) or substitute fakes; in production the peers are
reached over HTTP at the addresses in ``Settings``.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import httpx
import numpy as np
from fastapi import Depends, FastAPI, Request

from services.common.web import ApiError, BodyLimitMiddleware, install_error_handlers
from services.device.background import stop_task
from services.device.cache import ModelCache
from services.device.metrics import DeviceMetrics
from services.device.outbox import Uploader
from services.device.secure_sum import SecureSumKeys
from services.device.store import Store
from shared.core.policies import randomizer_for
from shared.core.randomizers.base import Randomizer
from shared.crypto.paillier import MIN_KEY_BITS
from shared.settings import Settings, TaskConfig

log = logging.getLogger(__name__)

DB_FILE = "device.sqlite3"
# Largest request body accepted: K = 1024 arms × d = 64 features as JSON text fits comfortably.
MAX_BODY_BYTES = 4 * 1024 * 1024
# Decision bookkeeping: tombstones of answered decisions are kept an hour (so a late duplicate
# feedback still gets 409), unanswered decisions a day; then they are forgotten.
USED_DECISION_TTL = 3600.0
UNUSED_DECISION_TTL = 86400.0
PRUNE_INTERVAL = 300.0


@dataclass
class Device:
    """Everything a request handler needs; one per app."""

    settings: Settings
    store: Store
    cache: ModelCache
    keys: SecureSumKeys
    uploader: Uploader
    metrics: DeviceMetrics
    randomizers: dict[str, Randomizer]
    # Device-side randomness for the local randomizers: seeded once per process from the OS
    # CSPRNG (never a fixed seed), so reports cannot be de-randomised by anyone.
    rng: np.random.Generator = field(
        default_factory=lambda: np.random.default_rng(secrets.randbits(128))
    )

    def task(self, task_id: str) -> TaskConfig:
        cfg = self.settings.task(task_id)
        if cfg is None:
            raise ApiError(404, "unknown_task", f"no task {task_id!r} on this device")
        return cfg

    @property
    def ready(self) -> bool:
        """Every key and model the device needs has come from the analyzer."""
        return self.cache.ready and self.keys.ready

    def missing(self) -> list[str]:
        return self.cache.missing() + self.keys.missing()


async def get_device(request: Request) -> Device:
    # async: a plain ``def`` dependency would be run in a worker thread on every request.
    return request.app.state.device


DeviceDep = Annotated[Device, Depends(get_device)]


def data_path(settings: Settings) -> Path:
    """The device's SQLite file: ``<data_dir>/device/device.sqlite3``."""
    return Path(settings.data_dir) / "device" / DB_FILE


def create_app(
    settings: Settings | None = None,
    *,
    analyzer_transport: httpx.AsyncBaseTransport | None = None,
    shuffler_transport: httpx.AsyncBaseTransport | None = None,
    paillier_min_bits: int = MIN_KEY_BITS,
    paillier_pool: int | None = None,
) -> FastAPI:
    """The device app. Its lifespan opens the store and starts the cache, the secure-sum key
    fetchers and the uploader.

    ``paillier_min_bits``: smallest Paillier key the device encrypts under (tests lower it to
    use fast test keys; production keys have at least 2048 bits). ``paillier_pool``: obfuscators
    precomputed per secure-sum task (default ``secure_sum.POOL_TARGET``).
    """
    settings = settings if settings is not None else Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        metrics = DeviceMetrics()
        store = Store(data_path(settings))
        analyzer = httpx.AsyncClient(
            base_url=settings.analyzer.url, transport=analyzer_transport, timeout=10.0
        )
        shuffler = httpx.AsyncClient(
            base_url=settings.shuffler.url, transport=shuffler_transport, timeout=10.0
        )
        # An in-process ASGI transport buffers whole responses, so an endless SSE stream would
        # never return: with one, follow the model by polling only.
        stream = not isinstance(analyzer_transport, httpx.ASGITransport)
        cache = ModelCache(settings, analyzer, stream=stream, on_update=metrics.on_model)
        keys = SecureSumKeys(
            settings, analyzer, min_key_bits=paillier_min_bits, pool_target=paillier_pool,
            on_change=metrics.on_paillier_key,
        )
        uploader = Uploader(store, shuffler, metrics, refresh_key=keys.refresh)
        metrics.bind_store(
            lambda: store.counters.outbox_pending,
            lambda: store.counters.dead_letters,
            lambda: store.counters.dropped,
        )
        for task, m in cache.versions().items():
            metrics.model_version.labels(task).set(m)
        app.state.device = Device(
            settings=settings,
            store=store,
            cache=cache,
            keys=keys,
            uploader=uploader,
            metrics=metrics,
            randomizers={t.id: randomizer_for(t.policy) for t in settings.tasks},
        )
        cache.start()
        keys.start()
        uploader.start()
        if store.counters.outbox_pending:
            log.info("outbox holds %d earlier reports; uploading", store.counters.outbox_pending)
        pruner = asyncio.create_task(_prune_forever(store), name="decision-pruner")
        try:
            yield
        finally:
            await stop_task(pruner)
            await uploader.stop()
            await keys.stop()
            await cache.stop()
            await analyzer.aclose()
            await shuffler.aclose()
            store.close()

    app = FastAPI(
        title="privbandit device",
        version="1",
        lifespan=lifespan,
        description="On-device agent: decides locally, randomises and encrypts feedback.",
    )
    install_error_handlers(app, on_error=_count_rejection)
    app.add_middleware(BodyLimitMiddleware, max_bytes=MAX_BODY_BYTES)
    from services.device.routes import router

    app.include_router(router)
    return app


async def _prune_forever(store: Store) -> None:
    while True:
        await asyncio.sleep(PRUNE_INTERVAL)
        try:
            n = await store.prune_decisions(USED_DECISION_TTL, UNUSED_DECISION_TTL)
            if n:
                log.info("forgot %d old decisions", n)
        except Exception:
            log.exception("decision pruning failed")


def _count_rejection(request: Request, status: int, code: str) -> None:
    """Count every 4xx the device answers, by code (a metric of client mistakes)."""
    device = getattr(request.app.state, "device", None)
    if device is not None and 400 <= status < 500:
        device.metrics.rejected.labels(code).inc()
