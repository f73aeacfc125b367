"""The shuffler's runtime: its store, intake, forwarder, secure-sum key state and metrics, opened
for the app's lifespan (``open_runtime``) and handed to the routes as ``RuntimeDep``.

The shuffler is ready (``/healthz`` 200) once intake and delivery run and, if a task uses
secure summation, the analyzer's Paillier key has been fetched; until then 503 ``starting``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from services.common.health import Readiness
from services.shuffler.forwarder import HTTP_TIMEOUT, Forwarder
from services.shuffler.intake import Intake
from services.shuffler.metrics import ShufflerMetrics
from services.shuffler.secure_sum import PaillierState, fetch_paillier_config
from services.shuffler.store import ShufflerStore
from services.shuffler.tasks import TaskSpec
from shared.protocol.messages import ShufflerStatus, TaskQueueStatus
from shared.settings import Settings

DB_FILE = "shuffler.sqlite3"
PAILLIER_CACHE = "paillier-config.json"


@dataclass
class ShufflerRuntime:
    """Everything a request handler needs; one per app."""

    settings: Settings
    store: ShufflerStore
    tasks: dict[str, TaskSpec]
    intake: Intake
    forwarder: Forwarder
    metrics: ShufflerMetrics
    paillier: PaillierState
    readiness: Readiness

    def health(self) -> dict[str, object]:
        """What ``/healthz`` says once ready."""
        body: dict[str, object] = {"tasks": sorted(self.tasks)}
        if self.paillier.needed:
            # Secure-sum intake opens once the analyzer's Paillier key is known.
            body["secure_sum_ready"] = self.paillier.config is not None
        return body

    def status(self) -> ShufflerStatus:
        """Every task's queue (reads the store: call it in a worker thread); refreshes the
        pending gauges."""
        out = []
        for spec in self.tasks.values():
            c = self.store.counts(spec.id)
            self.metrics.pending.labels(spec.id).set(c.pending)
            out.append(
                TaskQueueStatus(
                    task=spec.id,
                    batch_size=spec.config.batch_size,
                    pending=c.pending,
                    accepted=c.accepted,
                    batches_formed=c.batches_formed,
                    batches_acknowledged=c.batches_acknowledged,
                    batches_in_flight=c.batches_formed - c.batches_acknowledged,
                    last_error=self.forwarder.last_error.get(spec.id),
                )
            )
        return ShufflerStatus(tasks=out)


@asynccontextmanager
async def open_runtime(
    settings: Settings,
    tasks: dict[str, TaskSpec],
    analyzer_transport: httpx.AsyncBaseTransport | None = None,
) -> AsyncIterator[ShufflerRuntime]:
    """Open the store and the analyzer client, start intake, delivery and (for secure-sum tasks)
    the Paillier key fetch; stop and close them all on exit."""
    metrics = ShufflerMetrics()
    store = ShufflerStore(
        Path(settings.data_dir) / "shuffler" / DB_FILE,
        {t.id: t.batch_size for t in settings.tasks},
    )
    client = httpx.AsyncClient(
        base_url=settings.analyzer.url, transport=analyzer_transport, timeout=HTTP_TIMEOUT
    )
    paillier = PaillierState(
        settings.tasks, cache=Path(settings.data_dir) / "shuffler" / PAILLIER_CACHE
    )
    forwarder = Forwarder(settings, store, metrics, client, paillier)
    intake = Intake(store, metrics, forwarder, paillier, settings.limits)
    readiness = Readiness()
    readiness.require("the analyzer", paillier.missing)
    readiness.require_that("intake", lambda: intake.running)
    readiness.require_that("batch delivery", lambda: forwarder.running)
    fetcher = None
    if paillier.needed:
        fetcher = asyncio.create_task(
            fetch_paillier_config(paillier, client, settings), name="fetch-paillier-config"
        )
    intake.start()
    forwarder.start()
    try:
        yield ShufflerRuntime(
            settings, store, tasks, intake, forwarder, metrics, paillier, readiness
        )
    finally:
        if fetcher is not None:
            fetcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await fetcher
        await intake.stop()
        await forwarder.stop()
        await client.aclose()
        store.close()
