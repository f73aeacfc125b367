"""The shuffler's runtime: its store, intake, forwarder, secure-sum key state and metrics, opened
for the app's lifespan (``open_runtime``) and handed to the routes as ``RuntimeDep``.

The shuffler is ready (``/healthz`` 200) once intake and delivery run and the analyzer's HPKE
config and, if a task uses secure summation, its Paillier key have been fetched (or read from the
last copy kept in the data directory); until then 503 ``starting``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from services.common.datadir import StateDir
from services.common.health import Readiness
from services.shuffler.forwarder import HTTP_TIMEOUT, Forwarder
from services.shuffler.hpke import HpkeState
from services.shuffler.intake import AnalyzerKeys, Intake
from services.shuffler.metrics import ShufflerMetrics
from services.shuffler.published import ConfigFetcher
from services.shuffler.secure_sum import PaillierState
from services.shuffler.store import ShufflerStore, Store
from services.shuffler.tasks import TaskSpec
from shared.protocol.messages import ShufflerStatus, TaskQueueStatus
from shared.protocol.secure_sum import PaillierConfig
from shared.settings import Settings

DB_FILE = "shuffler.sqlite3"
PAILLIER_CACHE = "paillier-config.json"
HPKE_CACHE = "hpke-config.json"


def state_dir(settings: Settings) -> StateDir:
    """The shuffler's data directory and the file its state lives in (the Paillier config cache
    is not state: it is fetched again from the analyzer)."""
    files = {} if settings.shuffler.postgres else {
        DB_FILE: "the shuffler's database: accepted reports, pending and unacknowledged batches",
    }
    return StateDir("shuffler", Path(settings.data_dir) / "shuffler", files)


def open_store(settings: Settings) -> Store:
    """The store the settings name (``shuffler.store``): the SQLite file in the data directory,
    or the PostgreSQL database (``StoreUnavailable`` if it cannot be used: no fallback)."""
    sizes = {t.id: t.batch_size for t in settings.tasks}
    if settings.shuffler.postgres:
        from services.shuffler.pg_store import PgShufflerStore  # psycopg only when used

        return PgShufflerStore(
            settings.shuffler.store, sizes, dead_after=settings.shuffler.replica_timeout
        )
    return ShufflerStore(Path(settings.data_dir) / "shuffler" / DB_FILE, sizes)


@dataclass
class ShufflerRuntime:
    """Everything a request handler needs; one per app."""

    settings: Settings
    store: Store
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
                    refused_stale_key=c.refused_stale_key,
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
    """Open the store and the analyzer client, start intake, delivery and the fetches of the
    analyzer's HPKE config and (for secure-sum tasks) Paillier key; stop and close them all on
    exit."""
    metrics = ShufflerMetrics()
    store = open_store(settings)
    client = httpx.AsyncClient(
        base_url=settings.analyzer.url, transport=analyzer_transport, timeout=HTTP_TIMEOUT
    )
    paillier = PaillierState(
        settings.tasks, cache=Path(settings.data_dir) / "shuffler" / PAILLIER_CACHE
    )
    hpke = HpkeState(bool(settings.tasks), cache=Path(settings.data_dir) / "shuffler" / HPKE_CACHE)
    hpke_fetcher = ConfigFetcher(hpke, client, settings)
    forwarder = Forwarder(settings, store, metrics, client, paillier)
    keys = AnalyzerKeys(paillier, hpke, hpke_fetcher.refresh)
    intake = Intake(store, metrics, forwarder, keys, settings.limits)
    readiness = Readiness()
    readiness.require("the analyzer", lambda: hpke.missing() + paillier.missing())
    readiness.require_that("intake", lambda: intake.running)
    readiness.require_that("batch delivery", lambda: forwarder.running)
    # Each config the tasks need: one attempt now (so a shuffler whose analyzer is up is ready
    # when it starts), then followed in the background; a new Paillier key refuses what is held
    # under the old one (batches never mix keys).
    async def paillier_adopted(config: PaillierConfig) -> None:
        await forwarder.on_new_key(config.key_id)

    fetchers: list[asyncio.Task[None]] = []
    for fetcher, hook in ((hpke_fetcher, None),
                          (ConfigFetcher(paillier, client, settings), paillier_adopted)):
        if fetcher.state.needed:
            fetched = await fetcher.first()
            name = f"fetch-{fetcher.state.name}"
            fetchers.append(asyncio.create_task(fetcher.follow(hook, fetched), name=name))
    intake.start()
    forwarder.start()
    try:
        yield ShufflerRuntime(
            settings, store, tasks, intake, forwarder, metrics, paillier, readiness
        )
    finally:
        for following in fetchers:
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
        await intake.stop()
        await forwarder.stop()
        await client.aclose()
        store.close()
