"""The device's runtime: storage, model cache, transports (with the Paillier keys) and uploader,
opened for the app's lifespan (``open_runtime``) and handed to the routes as ``RuntimeDep``.

The device is ready (``/healthz`` 200) once every key and model it needs has come from the
analyzer; until then 503 ``starting`` (decide still answers, from the version-0 models).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

from privbandit.services.common.datadir import StateDir
from privbandit.services.common.health import Readiness
from privbandit.services.common.http_client import service_client
from privbandit.services.common.logs import request_id_hook
from privbandit.services.device.background import Loops
from privbandit.services.device.cache import ModelCache
from privbandit.services.device.decision_ids import KEY_FILE, DecisionIds, load_decision_key
from privbandit.services.device.metrics import DeviceMetrics
from privbandit.services.device.outbox import Spread, Uploader
from privbandit.services.device.persons import period_of
from privbandit.services.device.store import DeviceStore
from privbandit.services.device.transports import Transports
from privbandit.services.device.transports.base import Context
from privbandit.shared.core.policies import build_policy, randomizer_for
from privbandit.shared.core.policies.base import Scheduled
from privbandit.shared.core.randomizers.base import NoiseShares, Randomizer, calibrate
from privbandit.shared.crypto.paillier import MIN_KEY_BITS
from privbandit.shared.settings import Settings, TaskConfig

log = logging.getLogger(__name__)

DB_FILE = "device.sqlite3"


def data_path(settings: Settings) -> Path:
    """The device's SQLite file: ``<data_dir>/device/device.sqlite3``."""
    return Path(settings.data_dir) / "device" / DB_FILE


def state_dir(settings: Settings) -> StateDir:
    """The device's data directory and the files its state lives in. With a task that bounds
    each person's reports (``contributions``), the database holds per-person state that
    ``--init`` alone does not replace (``services.common.datadir``)."""
    bounded = sorted(t.id for t in settings.tasks if t.contributions is not None)
    persons = {DB_FILE: (
        f"it held the per-person contribution counts of task(s) {', '.join(bounded)}: a new "
        f"database starts them at 0, so each person can contribute up to k more reports in the "
        f"current period (docs/operations.md, 'Lost state and --init')")} if bounded else {}
    return StateDir("device", data_path(settings).parent, {
        DB_FILE: "the device's database: used decisions, per-person counts, the outbox of "
                 "reports not yet uploaded",
        KEY_FILE: "the key sealing decision ids (without it no open decision takes feedback)",
    }, keys={KEY_FILE: load_decision_key}, persons=persons)


@dataclass
class DeviceRuntime:
    """Everything a request handler needs; one per app."""

    settings: Settings
    store: DeviceStore
    decision_ids: DecisionIds
    cache: ModelCache
    transports: Transports
    uploader: Uploader
    metrics: DeviceMetrics
    randomizers: dict[str, Randomizer]
    readiness: Readiness
    # Tasks with a growing batch schedule (ddp-linucb, sblb): one randomizer per batch length.
    sized: dict[str, dict[int, Randomizer]] = field(default_factory=dict)
    # Device-side randomness for the local randomizers: seeded once per process from the OS
    # CSPRNG (never a fixed seed), so reports cannot be de-randomised by anyone.
    rng: np.random.Generator = field(
        default_factory=lambda: np.random.default_rng(secrets.randbits(128))
    )

    @property
    def tasks(self) -> dict[str, TaskConfig]:
        return self.cache.tasks

    def report_randomizer(self, task: str) -> Randomizer:
        """The randomizer of a report of ``task`` made now. A task with a growing batch schedule
        sizes its noise for the batch length announced with the newest model the device holds
        (``ModelMessage.batch_size``; the first length before one is announced), rounded down
        to a length of the schedule: the analyzer announced l_b after b batches were formed, so
        the report lands in a batch of length ≥ l_b. ``ddp-linucb``: its Skellam share is at
        least what that batch needs (``policies.ddp_linucb``); ``sblb``: its ε0(l_b) is at most
        the batch's ε0 (``accounting.shuffle_schedule``: a late report is the batch's own
        randomizer applied to a randomised input). The newest model is never older than the
        one the user decided with, so the length is at least the decision's."""
        sized = self.sized.get(task)
        if not sized:
            return self.randomizers[task]
        announced = getattr(self.cache.model(task), "batch_size", None)
        lengths = sorted(sized)
        size = lengths[0] if announced is None else max(
            (length for length in lengths if length <= announced), default=lengths[0])
        return sized[size]

    def health(self) -> dict[str, object]:
        """What ``/healthz`` says once ready."""
        counters = self.store.counters
        return {
            "models": self.cache.versions(),
            "streaming": sorted(self.cache.streaming),
            "outbox_pending": counters.outbox_pending,
            "dropped": counters.dropped,
            **self.transports.health(),  # e.g. the Paillier key id of each Paillier task
            "last_upload_error": self.uploader.last_error,
        }


@asynccontextmanager
async def open_runtime(
    settings: Settings,
    *,
    analyzer_transport: httpx.AsyncBaseTransport | None = None,
    shuffler_transport: httpx.AsyncBaseTransport | None = None,
    paillier_min_bits: int = MIN_KEY_BITS,
) -> AsyncIterator[DeviceRuntime]:
    """Open the store, start the cache, the transports (the Paillier key fetchers), the
    uploader and the decision pruner; stop and close them all on exit."""
    timing = settings.device_timing
    metrics = DeviceMetrics()
    store = DeviceStore(data_path(settings), on_group=metrics.commit_group.observe)
    decision_ids = DecisionIds.load_or_create(data_path(settings).parent / KEY_FILE)
    analyzer = httpx.AsyncClient(
        base_url=settings.analyzer.url, transport=analyzer_transport, timeout=timing.http_timeout,
        event_hooks={"request": [request_id_hook()]},
    )
    # Uploads go to each shuffler replica in turn (one URL: always that one).
    shuffler = Spread([service_client(url, timing.http_timeout, shuffler_transport)
                       for url in settings.shuffler.all_urls])
    # An in-process ASGI transport buffers whole responses, so an endless SSE stream would
    # never return: with one, follow the model by polling only.
    stream = not isinstance(analyzer_transport, httpx.ASGITransport)
    cache = ModelCache(settings, analyzer, stream=stream, on_update=metrics.on_model)
    transports = Transports(
        settings, Context(settings, analyzer, cache, metrics, paillier_min_bits))
    uploader = Uploader(store, shuffler, timing, transports.by_name, metrics)
    metrics.bind_store(
        lambda: store.counters.outbox_pending,
        lambda: store.counters.dead_letters,
        lambda: store.counters.dropped,
    )
    for task, m in cache.versions().items():
        metrics.model_version.labels(task).set(m)
    readiness = Readiness()
    readiness.require("the analyzer", lambda: cache.missing() + transports.missing())
    randomizers, sized = task_randomizers(settings.tasks)
    samplers = warm_share_samplers(
        {t: [r, *sized.get(t, {}).values()] for t, r in randomizers.items()})
    readiness.require("the noise samplers",
                      lambda: [f"skellam-table:{t}" for t, th in samplers.items() if th.is_alive()])
    runtime = DeviceRuntime(settings, store, decision_ids, cache, transports, uploader, metrics,
                            randomizers, readiness, sized=sized)
    store.start()
    cache.start()
    transports.start()
    uploader.start()
    if store.counters.outbox_pending:
        log.info("outbox holds %d earlier reports; uploading", store.counters.outbox_pending)
    pruner = Loops()
    pruner.start(_prune_forever(store, settings, pruner), "decision-pruner")
    try:
        yield runtime
    finally:
        await pruner.stop()
        await uploader.stop()
        await transports.stop()
        await cache.stop()
        await analyzer.aclose()
        await shuffler.aclose()
        await store.stop()
        store.close()


def task_randomizers(
    tasks: list[TaskConfig],
) -> tuple[dict[str, Randomizer], dict[str, dict[int, Randomizer]]]:
    """Each task's device randomizer, and for a task with a growing batch schedule whose
    policy sizes its noise per batch length (``randomizer_for(length)``: ``ddp-linucb``,
    ``sblb``) one per length of the schedule (``DeviceRuntime.report_randomizer``)."""
    randomizers: dict[str, Randomizer] = {}
    sized: dict[str, dict[int, Randomizer]] = {}
    for t in tasks:
        if t.schedule.is_fixed:  # the randomizer alone: no analyzer state to build
            randomizers[t.id] = randomizer_for(t.policy)
            continue
        policy = build_policy(t.policy)
        randomizers[t.id] = policy.randomizer
        if isinstance(policy, Scheduled):
            sized[t.id] = {size: policy.randomizer_for(size)
                           for size in t.schedule.distinct_sizes()}
    # σ and ε0 now, at start, rather than in the first request that needs them
    for r in [*randomizers.values(), *(r for rs in sized.values() for r in rs.values())]:
        calibrate(r)
    return randomizers, sized


def warm_share_samplers(randomizers: dict[str, list[Randomizer]]) -> dict[str, threading.Thread]:
    """Build each ``ddp-linucb`` task's exact Skellam samplers (their certified CDF tables: 0.01 s
    to a few seconds each, growing with the share's λ; one per batch length of a growing
    schedule) in a thread at start-up, so no feedback request builds one on the event loop; the
    device is ready once they are built."""
    threads = {}
    for task, options in randomizers.items():
        skellam = [r for r in options if isinstance(r, NoiseShares)]
        if skellam:
            th = threading.Thread(target=lambda rs=skellam: [r.exact_noise for r in rs],
                                  daemon=True, name=f"skellam-table:{task}")
            th.start()
            threads[task] = th
    return threads


async def _prune_forever(store: DeviceStore, settings: Settings, loops: Loops) -> None:
    """Every ``prune_interval``, forget tombstones older than ``used_decision_ttl``."""
    timing = settings.device_timing
    while not loops.stopping:
        await asyncio.sleep(timing.prune_interval)
        try:
            n = await store.prune_decisions(timing.used_decision_ttl)
            if n:
                log.info("forgot %d tombstones of used decisions", n)
            # Per-person counts of periods past (issue 24): no report of theirs can be made.
            now = time.time()
            current = {t.id: period_of(t.contributions.period_seconds, now)
                       for t in settings.tasks if t.contributions is not None
                       and t.contributions.period_seconds is not None}
            if current:
                await store.prune_periods(current)
        except Exception:
            log.exception("decision pruning failed")
