"""The analyzer's runtime: its keys, its store, and per task the policy, published model, stream
feed and the group committer that runs the ingest pipeline (``services.analyzer.ingest``).

Readers (``GET /model``, ``/privacy``, the stream) only ever see ``TaskRuntime.published``, which
is replaced after a group of batches is committed, so no client observes a model that is not on
disk.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from privbandit.services.analyzer.feed import ModelFeed, StreamSlots, model_message
from privbandit.services.analyzer.ingest import MAX_GROUP_BATCHES, MAX_GROUP_REPORTS, IngestPipeline
from privbandit.services.analyzer.metrics import AnalyzerMetrics
from privbandit.services.analyzer.status import TaskCollector
from privbandit.services.analyzer.store import AnalyzerStore, Store
from privbandit.services.analyzer.tasks import TaskRuntime
from privbandit.services.analyzer.transports import transport_for, used
from privbandit.services.common.datadir import StateDir
from privbandit.services.common.group_commit import GroupCommitter, ShuttingDown
from privbandit.services.common.health import Readiness
from privbandit.shared.core.accounting.ledger import PrivacyLedger
from privbandit.shared.core.policies import build_policy
from privbandit.shared.core.policies.person import person_ledger
from privbandit.shared.crypto.keystore import (
    HPKE_KEY_FILE,
    PAILLIER_KEY_FILE,
    HpkeKeyStore,
    PaillierKeyStore,
    load_hpke_key,
    load_paillier_key,
)
from privbandit.shared.crypto.paillier import DEFAULT_KEY_BITS, MIN_KEY_BITS
from privbandit.shared.protocol.messages import BatchAck
from privbandit.shared.settings import Settings, TaskConfig

log = logging.getLogger(__name__)

DB_FILE = "analyzer.sqlite3"


def state_dir(settings: Settings) -> StateDir:
    """The analyzer's data directory and the files its state lives in: the database (unless
    it is in PostgreSQL), the HPKE key and the keys of the transports the tasks use (the
    Paillier key when a task uses the Paillier transport); each key is checked against its
    fingerprint."""
    files = {
        HPKE_KEY_FILE: "the analyzer's HPKE private key, which every device's report is sealed to",
    }
    if not settings.analyzer.postgres:
        files[DB_FILE] = "the analyzer's database: models, counts, processed batches and report ids"
    for transport in used(settings):
        files.update(transport.key_files)
    # Both keys are checked whenever present: the Paillier key may have been made on a request.
    keys = {HPKE_KEY_FILE: load_hpke_key, PAILLIER_KEY_FILE: load_paillier_key}
    return StateDir("analyzer", Path(settings.data_dir) / "analyzer", files, keys=keys)


def open_store(settings: Settings) -> Store:
    """The store the settings name (``analyzer.store``): the SQLite file in the data directory,
    or the PostgreSQL database (``StoreUnavailable`` if it cannot be used: no fallback)."""
    if settings.analyzer.postgres:
        from privbandit.services.analyzer.store.postgres import (
            PgAnalyzerStore,  # psycopg only when used
        )

        return PgAnalyzerStore(settings.analyzer.store)
    return AnalyzerStore(Path(settings.data_dir) / "analyzer" / DB_FILE)


class StandbyStopped(RuntimeError):
    """A stop was requested while this analyzer waited as a standby."""


async def claim_tasks(
    store: Store, settings: Settings, stopping: Callable[[], bool] = lambda: False
) -> None:
    """Wait until this analyzer is the active one for every task (at once on SQLite; a
    PostgreSQL standby waits here, without blocking the event loop, until the active analyzer
    is gone). ``stopping()`` true (SIGTERM to a standby): ``StandbyStopped``."""
    tasks = [t.id for t in settings.tasks]
    logged = False
    while waiting := await asyncio.to_thread(store.try_claim, tasks):
        if stopping():
            raise StandbyStopped("stopped while waiting as a standby")
        if not logged:
            log.warning("standby: task(s) %s are served by another analyzer; waiting",
                        ", ".join(waiting))
            logged = True
        await asyncio.sleep(0.2)
    if logged:
        log.warning("active: took over task(s) %s", ", ".join(tasks))


class AnalyzerRuntime:
    """Everything the routes need, created in the lifespan and closed with it."""

    def __init__(
        self,
        settings: Settings,
        *,
        sse_keepalive: float = 15.0,
        paillier_key_bits: int = DEFAULT_KEY_BITS,
        store: Store | None = None,
    ) -> None:
        """``store``: the opened store, its tasks claimed (``claim_tasks``); by default the
        one the settings name, opened and claimed here (refused if another analyzer holds
        a task)."""
        self.settings = settings
        self.sse_keepalive = sse_keepalive
        self.metrics = AnalyzerMetrics()
        # Model streams open at once, all tasks together (limits.model_streams).
        self.streams = StreamSlots(settings.limits.model_streams)
        self.metrics.streams_open.set_function(lambda: self.streams.open)
        # Per-task gauges (privacy spent, batches, reports), read at each scrape.
        self.metrics.registry.register(TaskCollector(self))
        data = Path(settings.data_dir) / "analyzer"
        self.data_dir = data
        self.keys = HpkeKeyStore(data)
        # The Paillier key of the ``paillier`` transport lives next to the HPKE key. Keys below
        # 2048 bits are only reachable through this constructor argument (tests), never through
        # the deployment configuration.
        self._paillier_key_bits = paillier_key_bits
        self._paillier: PaillierKeyStore | None = None
        self._paillier_lock = threading.Lock()
        for transport in used(settings):
            # Created (or loaded) before the first request: devices and the shuffler need them.
            transport.open_keys(self)
        if store is None:
            store = open_store(settings)
            if held := store.try_claim([t.id for t in settings.tasks]):
                store.close()
                raise RuntimeError(f"task(s) {held} are served by another analyzer")
        self.store = store
        store.observe(self.metrics.transactions)
        self.tasks: dict[str, TaskRuntime] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        # /healthz: 200 once every task ingests (keys and tasks are loaded below).
        self.readiness = Readiness()
        self.readiness.require("batch ingest", self._not_ingesting)
        try:
            for config in settings.tasks:
                self.tasks[config.id] = self._load_task(config)
        except BaseException:
            self.store.close()
            raise
        # The linear tasks' ledgers, computed once in a thread: an sblb schedule over the secure
        # sum runs the sum-only accountant at each batch length (seconds), which must not stall
        # the event loop of the first /status or metrics scrape. Ready once they are computed.
        self._ledgers = threading.Thread(target=self._warm_ledgers, daemon=True,
                                         name="privacy-ledgers")
        self._ledgers.start()
        self.readiness.require(
            "the privacy ledgers", lambda: ["ledgers"] if self._ledgers.is_alive() else [])

    def wait_for_ledgers(self, timeout: float | None = None) -> bool:
        """Block until the start-up thread has computed the ledgers (or ``timeout`` passed);
        whether it has."""
        self._ledgers.join(timeout)
        return not self._ledgers.is_alive()

    def _warm_ledgers(self) -> None:
        for rt in self.tasks.values():
            if not rt.config.family.ledger_moves:
                try:
                    self.ledger(rt, wait=False)
                except Exception:  # computed (and raised) again by the request that needs it
                    log.exception("task %s: privacy ledger", rt.id)

    # -----------------------------------------------------------------------------------------
    # Loading

    def _load_task(self, config: TaskConfig) -> TaskRuntime:
        # The analyzer's own randomness (AdaR-OFUL's Gaussian noise) is seeded from the OS CSPRNG;
        # one generator per task, since tasks ingest concurrently in worker threads.
        policy = build_policy(config.policy, np.random.default_rng(secrets.randbits(128)))
        wanted = config.model_dump(mode="json")
        record = self.store.load_task(config.id)
        if record is None:
            self.store.init_task(config.id, wanted, policy.get_state())
            record = self.store.load_task(config.id)
            assert record is not None
        elif record.config != wanted:
            # Aggregates computed under other parameters (ε0, d, l, ...) cannot be continued
            # without breaking the estimator and the privacy ledger.
            raise RuntimeError(
                f"task {config.id!r}: its configuration changed since the state in "
                f"{self.store.path} was created; use a new task id or a fresh data_dir"
            )
        try:
            policy.set_state(record.state)
        except (KeyError, ValueError, TypeError) as exc:
            raise RuntimeError(
                f"task {config.id!r}: stored policy state is unusable: {exc}"
            ) from exc
        decoder = transport_for(config).decoder(config, policy, self)
        published = model_message(config, policy.model)
        self.metrics.model_version.labels(config.id).set(published.version)
        return TaskRuntime(
            config=config,
            policy=policy,
            decoder=decoder,
            published=published,
            feed=ModelFeed(published),
            reports_counted=record.counters["reports_counted"],
            rejected=record.counters["rejected"],
            duplicates=record.counters["duplicates"],
            batches=record.counters["batches"],
            quarantined=record.counters["quarantined"],
            last_batch_at=record.last_batch_at,
            skipped=policy.skipped,
        )

    def opened_paillier_keys(self) -> PaillierKeyStore | None:
        """The Paillier key store if a task opened it at start-up, else ``None`` (never created
        by a request: ``GET /v1/paillier-config``)."""
        return self._paillier

    def paillier_keys(self) -> PaillierKeyStore:
        """The analyzer's Paillier key store, created on first use: at start-up, by a task whose
        transport is Paillier (``open_keys``). Thread-safe."""
        with self._paillier_lock:
            if self._paillier is None:
                bits = self._paillier_key_bits
                self._paillier = PaillierKeyStore(
                    self.data_dir, bits, allow_small=bits < MIN_KEY_BITS
                )
                log.info(
                    "Paillier key %d (%d bits) in %s",
                    self._paillier.key_id, self._paillier.key_bits, self._paillier.path,
                )
            return self._paillier

    # -----------------------------------------------------------------------------------------
    # Ledger and readiness

    def ledger(self, rt: TaskRuntime, wait: bool = True) -> PrivacyLedger:
        """The task's ledger (a linear task's depends on its parameters only: computed once at
        start-up in a thread, it can take seconds; a multi-armed task's carries the per-user
        fractions so far: ``Family.ledger_moves``). ``wait``: first let the start-up thread
        finish (it computes it)."""
        if rt.config.family.ledger_moves:
            # Cheap, and it moves with every report (the arms family's per-user fractions).
            return rt.policy.ledger(T=None, aggregation=rt.config.aggregation)
        if rt.ledger_cache is None and wait and self._ledgers.is_alive():
            self._ledgers.join()
        if rt.ledger_cache is None:
            # The transport decides what an observer of the shuffler output sees (spec §3).
            secure = rt.config.secure_sum if rt.config.aggregation == "secure-sum" else None
            ledger = rt.policy.ledger(T=None, aggregation=rt.config.aggregation,
                                      secure_sum=secure)
            rt.ledger_cache = ledger
        return rt.ledger_cache

    def person(self, rt: TaskRuntime, ledger: PrivacyLedger) -> dict[str, Any]:
        """The task's guarantee per person beside ``ledger`` (its per-report one; issue 24):
        at most k reports per person and period, as the devices enforce
        (``TaskConfig.contributions``). It depends on the task's parameters only: computed once."""
        if rt.person_cache is None:
            bound = rt.config.contributions
            person = person_ledger(rt.policy, ledger, None if bound is None else bound.k,
                                   "forever" if bound is None else bound.period,
                                   rt.config.aggregation)
            assert person.person is not None  # person_ledger states it
            rt.person_cache = person.person
        return rt.person_cache

    def _not_ingesting(self) -> list[str]:
        """Tasks whose group committer is not running (all of them before ``start`` and after
        ``stop``); keys and tasks are loaded by the constructor."""
        return [rt.id for rt in self.tasks.values()
                if rt.committer is None or not rt.committer.running]

    # -----------------------------------------------------------------------------------------
    # Ingest: one group committer per task runs the pipeline

    def start(self) -> None:
        """Start the per-task group committers (in the event loop)."""
        self._loop = asyncio.get_running_loop()
        for rt in self.tasks.values():
            pipeline = IngestPipeline(rt, self.store, self.metrics)

            def after(_items: object, _outcomes: object, rt: TaskRuntime = rt) -> None:
                self.sync_published(rt)

            rt.committer = GroupCommitter(
                f"analyzer task {rt.id}",
                pipeline,
                max_items=MAX_GROUP_BATCHES,
                max_weight=MAX_GROUP_REPORTS,
                weight=pipeline.weight,
                after=after,
            )
            rt.committer.start()

    async def stop(self) -> None:
        """Let each committer finish the group in progress, then fail anything still queued."""
        for rt in self.tasks.values():
            if rt.committer is not None:
                await rt.committer.stop()

    async def submit(self, rt: TaskRuntime, upload: BaseModel) -> BatchAck:
        """Check an upload against its task's transport, queue it for the task's committer and
        wait for its (committed) ack; raises the ``BatchRefused`` of a batch that cannot be
        counted and ``ShuttingDown`` (503) when ingest is not running."""
        item = rt.decoder.accept(upload)
        if rt.committer is None:
            raise ShuttingDown(f"analyzer task {rt.id}: not accepting work")
        return await rt.committer.submit(item)

    def sync_published(self, rt: TaskRuntime) -> None:
        """Publish the policy's model if it is newer than the published one (event loop, after
        a commit or a rolled-back failure)."""
        if rt.policy.model.version != rt.published.version:
            rt.published = model_message(rt.config, rt.policy.model)
            self.metrics.model_version.labels(rt.id).set(rt.published.version)
            rt.feed.publish(rt.published)

    # -----------------------------------------------------------------------------------------
    # Shutdown

    def close_streams(self) -> None:
        """End every model stream (from the event loop)."""
        for rt in self.tasks.values():
            rt.feed.close()

    def request_shutdown(self) -> None:
        """Thread- and signal-safe ``close_streams``: uvicorn waits for open responses before it
        runs the lifespan shutdown, so streams must end first."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.close_streams)

    def close(self) -> None:
        """After ``stop``: end the streams and close the store."""
        self.close_streams()
        self.store.close()

