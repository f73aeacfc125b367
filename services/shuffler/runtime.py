"""The shuffler's runtime: its store, intake, forwarder, transports (with the analyzer configs
they follow, e.g. the Paillier transport's key) and metrics, opened for the app's lifespan
(``open_runtime``) and handed to the routes as ``RuntimeDep``.

The shuffler is ready (``/healthz`` 200) once intake and delivery run and the analyzer's HPKE
config and whatever its tasks' transports need (if a task uses the Paillier transport, its
key) have been fetched (or read from the last copy kept in the data directory); until then 503
``starting``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from privbandit.services.common.datadir import StateDir
from privbandit.services.common.health import Readiness
from privbandit.services.common.http_client import service_client
from privbandit.services.shuffler.forwarder import HTTP_TIMEOUT, Forwarder
from privbandit.services.shuffler.hpke import HpkeState
from privbandit.services.shuffler.intake import AnalyzerKeys, Intake
from privbandit.services.shuffler.metrics import ShufflerMetrics
from privbandit.services.shuffler.published import ConfigFetcher
from privbandit.services.shuffler.schedule import ScheduleCatchUp
from privbandit.services.shuffler.store import ShufflerStore, Store
from privbandit.services.shuffler.tasks import TaskSpec
from privbandit.services.shuffler.transports import Transports
from privbandit.services.shuffler.transports.base import Context, OnAdopted
from privbandit.shared.crypto.key_files import KeyFile, exactly
from privbandit.shared.crypto.noise_stream import NOISE_KEY_BYTES, NOISE_KEY_FILE
from privbandit.shared.protocol.messages import ShufflerStatus, TaskQueueStatus
from privbandit.shared.settings import Settings

DB_FILE = "shuffler.sqlite3"
HPKE_CACHE = "hpke-config.json"


def state_dir(settings: Settings) -> StateDir:
    """The shuffler's data directory and the files its state lives in (the Paillier config cache
    is not state: it is fetched again from the analyzer): its database, unless it is in
    PostgreSQL, and its noise key once a task has made it (``shared.crypto.noise_stream``),
    checked against its fingerprint."""
    files = {} if settings.shuffler.postgres else {
        DB_FILE: "the shuffler's database: accepted reports, pending and unacknowledged batches",
    }
    files[NOISE_KEY_FILE] = ("the shuffler's noise key (the aggregator noise of ddp-linucb: the "
                             "same noise at every delivery of a batch)")
    return StateDir("shuffler", Path(settings.data_dir) / "shuffler", files,
                    keys={NOISE_KEY_FILE: check_noise_key})


def check_noise_key(path: Path) -> bytes:
    """The existing noise key file ``path``, checked (``KeyFileError`` naming it)."""
    return KeyFile(path, "noise").load(exactly(NOISE_KEY_BYTES))


def open_store(settings: Settings) -> Store:
    """The store the settings name (``shuffler.store``): the SQLite file in the data directory,
    or the PostgreSQL database (``StoreUnavailable`` if it cannot be used: no fallback)."""
    sizes = {t.id: t.schedule for t in settings.tasks}
    if settings.shuffler.postgres:
        from privbandit.services.shuffler.store.postgres import (
            PgShufflerStore,  # psycopg only when used
        )

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
    transports: Transports
    readiness: Readiness

    def health(self) -> dict[str, object]:
        """What ``/healthz`` says once ready (and what each transport adds)."""
        return {"tasks": sorted(self.tasks), **self.transports.health()}

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
                    refused_oversized=c.refused_oversized,
                    next_batch_size=self.store.schedules[spec.id].size(c.next_batch),
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
    analyzer's HPKE config and of what the transports need (for Paillier tasks the
    key); stop and close them all on exit."""
    metrics = ShufflerMetrics()
    store = open_store(settings)
    store.observe(metrics.transactions)
    # Never the id of a device's upload on a call to the analyzer: it would link the upload to
    # the batch it is shuffled into (services.common.logs).
    client = service_client(settings.analyzer.url, HTTP_TIMEOUT, analyzer_transport,
                            propagate=False)
    transports = Transports(
        settings, Context(store, metrics, cache_dir=Path(settings.data_dir) / "shuffler",
                          analyzer=client, settings=settings)
    )
    hpke = HpkeState(bool(settings.tasks), cache=Path(settings.data_dir) / "shuffler" / HPKE_CACHE)
    hpke_fetcher = ConfigFetcher(hpke, client, settings)
    forwarder = Forwarder(settings, store, metrics, client, transports)
    keys = AnalyzerKeys(hpke, hpke_fetcher.refresh)
    catch_up = ScheduleCatchUp(settings, store, client)
    intake = Intake(store, metrics, forwarder, keys, settings.limits,
                    on_refused=catch_up.refused)
    readiness = Readiness()
    readiness.require("the analyzer", lambda: hpke.missing() + transports.missing())
    readiness.require_that("intake", lambda: intake.running)
    readiness.require_that("batch delivery", lambda: forwarder.running)
    # Each config the tasks need: one attempt now (so a shuffler whose analyzer is up is ready
    # when it starts), then followed in the background; a transport acts on a new one (a new
    # Paillier key refuses what is held under the old one: batches never mix keys).
    followed: list[tuple[ConfigFetcher, Callable[[Any], Awaitable[None]] | None]] = [
        (hpke_fetcher, None)]
    for state, on_adopted in transports.published():
        act: Callable[[Any], Awaitable[None]] | None = None if on_adopted is None else (
            functools.partial(_adopted, on_adopted, forwarder.wake))
        followed.append((ConfigFetcher(state, client, settings), act))
    fetchers: list[asyncio.Task[None]] = []
    for fetcher, hook in followed:
        if fetcher.state.needed:
            fetched = await fetcher.first()
            name = f"fetch-{fetcher.state.name}"
            fetchers.append(asyncio.create_task(fetcher.follow(hook, fetched), name=name))
    await catch_up.first()  # a store started afresh beside an analyzer that kept its state
    intake.start()
    forwarder.start()
    try:
        yield ShufflerRuntime(
            settings, store, tasks, intake, forwarder, metrics, transports, readiness
        )
    finally:
        for following in fetchers:
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
        await intake.stop()
        await catch_up.stop()
        await forwarder.stop()
        await client.aclose()
        store.close()


async def _adopted(on_adopted: OnAdopted, wake: Callable[[str], None], config: Any) -> None:
    """A transport's action on a newly adopted analyzer config, waking delivery of its tasks."""
    await on_adopted(config, wake)
