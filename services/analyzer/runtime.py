"""The analyzer's in-memory runtime: per-task policy, published model, stream feed, and the
batch-ingest procedure (decrypt → validate → de-duplicate → aggregate → commit).

Readers (``GET /model``, ``/privacy``, the stream) only ever see ``TaskRuntime.published``, which
is replaced after a batch is committed, so no client observes a model that is not on disk.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from services.analyzer.metrics import AnalyzerMetrics
from services.analyzer.store import BatchResult, Store
from shared.accounting.ledger import PrivacyLedger
from shared.crypto import CryptoError, KeyStore, row_length, unpack_report
from shared.policies import Policy, build_policy, randomizer_for
from shared.policies.model import Model
from shared.protocol import BatchAck, BatchUpload, ModelMessage, TaskInfo
from shared.settings import Settings, TaskConfig

log = logging.getLogger(__name__)

DB_FILE = "analyzer.sqlite3"


def row_wire_bytes(config: TaskConfig) -> int:
    """Length of one report row's wire form (``Randomizer.to_bytes``) for a task."""
    return row_length(randomizer_for(config.policy))


def model_message(task: str, model: Model) -> ModelMessage:
    return ModelMessage(
        task=task,
        version=model.version,
        theta=[float(v) for v in model.theta],
        V=[[float(v) for v in row] for row in model.V],
        beta=float(model.beta),
        reports=int(model.reports),
    )


def task_info(config: TaskConfig) -> TaskInfo:
    return TaskInfo(
        id=config.id,
        threat_model=config.threat_model,
        algo=config.policy.algo,
        d=config.policy.d,
        K=config.K,
        batch_size=config.batch_size,
        aggregation=config.aggregation,
        policy=config.policy.model_dump(mode="json"),
    )


class ModelFeed:
    """The latest published model of one task and a wake-up signal for stream subscribers.

    Used from the event loop only. Subscribers read ``current`` and then ``await wait()`` with
    no suspension in between, so a publication can never fall between the two.
    """

    def __init__(self, current: ModelMessage) -> None:
        self.current = current
        self.closed = False
        self._changed = asyncio.Event()

    def publish(self, message: ModelMessage) -> None:
        self.current = message
        self._wake()

    def close(self) -> None:
        """End every subscription (service shutdown)."""
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    async def wait(self, timeout: float) -> bool:
        """True when woken by a publication or close, False after ``timeout`` seconds."""
        event = self._changed
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        return True


@dataclass
class TaskRuntime:
    """One task: its policy (mutated only under ``lock``, in a worker thread) and counters."""

    config: TaskConfig
    policy: Policy
    row_bytes: int
    published: ModelMessage
    feed: ModelFeed
    reports_counted: int = 0
    rejected: int = 0
    duplicates: int = 0
    batches: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    ledger_cache: PrivacyLedger | None = None

    @property
    def id(self) -> str:
        return self.config.id


class AnalyzerRuntime:
    """Everything the routes need, created in the lifespan and closed with it."""

    def __init__(self, settings: Settings, *, sse_keepalive: float = 15.0) -> None:
        self.settings = settings
        self.sse_keepalive = sse_keepalive
        self.metrics = AnalyzerMetrics()
        data = Path(settings.data_dir) / "analyzer"
        self.keys = KeyStore(data)
        self.store = Store(data / DB_FILE)
        self.tasks: dict[str, TaskRuntime] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        try:
            for config in settings.tasks:
                self.tasks[config.id] = self._load_task(config)
        except BaseException:
            self.store.close()
            raise

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
        row_bytes = row_wire_bytes(config)
        published = model_message(config.id, policy.model)
        self.metrics.model_version.labels(config.id).set(published.version)
        return TaskRuntime(
            config=config,
            policy=policy,
            row_bytes=row_bytes,
            published=published,
            feed=ModelFeed(published),
            reports_counted=record.reports_counted,
            rejected=record.rejected,
            duplicates=record.duplicates,
            batches=record.batches,
        )

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

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
        self.close_streams()
        self.store.close()

    def ledger(self, rt: TaskRuntime) -> PrivacyLedger:
        """The task's ledger (depends on its parameters only; computed once, it can take ~1 s)."""
        if rt.ledger_cache is None:
            rt.ledger_cache = rt.policy.ledger(T=None)
        return rt.ledger_cache

    # -----------------------------------------------------------------------------------------
    # Batch ingest (runs in a worker thread while the task's asyncio lock is held)

    def ingest_batch(self, rt: TaskRuntime, upload: BatchUpload) -> BatchAck:
        """Process one new batch and return its ack.

        Reports that fail decryption or validation are counted as rejected and not fed; report ids
        already counted (or repeated within the batch) are duplicates. The policy is restored to
        its previous state if anything fails before the commit, so memory never runs ahead of disk.
        """
        started = time.perf_counter()
        randomizer = rt.policy.randomizer
        ids: list[bytes] = []
        rows: list[np.ndarray] = []
        rejected = 0
        for report in upload.reports:
            try:
                plaintext = self.keys.open(rt.id, report)
                report_id, row_bytes = unpack_report(plaintext, rt.row_bytes)
                row = randomizer.from_bytes(row_bytes)
            except (CryptoError, ValueError) as exc:
                rejected += 1
                log.debug("task %s batch %s: rejected a report: %s", rt.id, upload.batch_id, exc)
                continue
            ids.append(report_id)
            rows.append(row)

        known = self.store.known_report_ids(rt.id, ids)
        fresh_ids: list[bytes] = []
        fresh_rows: list[np.ndarray] = []
        seen: set[bytes] = set()
        for report_id, row in zip(ids, rows, strict=True):
            if report_id in known or report_id in seen:
                continue
            seen.add(report_id)
            fresh_ids.append(report_id)
            fresh_rows.append(row)
        duplicates = len(ids) - len(fresh_ids)

        policy = rt.policy
        before = policy.get_state()
        try:
            if fresh_rows:
                stacked = np.stack(fresh_rows)
                consumed = 0
                # Exact policies consume rows up to their next model switch per call.
                while consumed < stacked.shape[0]:
                    k = policy.ingest(stacked[consumed:])
                    if k < 1:
                        raise RuntimeError(f"policy {policy.algo} consumed no rows")
                    consumed += k
            result = BatchResult(
                batch_id=upload.batch_id,
                counted=len(fresh_ids),
                rejected=rejected,
                duplicates=duplicates,
                model_version=policy.model.version,
            )
            self.store.commit_batch(rt.id, result, policy.get_state(), fresh_ids)
        except BaseException:
            policy.set_state(before)
            raise
        rt.reports_counted += result.counted
        rt.rejected += rejected
        rt.duplicates += duplicates
        rt.batches += 1
        m = self.metrics
        m.batches.labels(rt.id, "processed").inc()
        m.reports_counted.labels(rt.id).inc(result.counted)
        m.reports_rejected.labels(rt.id).inc(rejected)
        m.reports_duplicate.labels(rt.id).inc(duplicates)
        m.ingest_seconds.labels(rt.id).observe(time.perf_counter() - started)
        ack = BatchAck(
            batch_id=upload.batch_id,
            replayed=False,
            counted=result.counted,
            rejected=rejected,
            duplicates=duplicates,
            model_version=result.model_version,
        )
        return ack

    def sync_published(self, rt: TaskRuntime) -> None:
        """Publish the policy's model if it is newer than the published one (event loop, under
        the task lock, after a commit)."""
        if rt.policy.model.version != rt.published.version:
            rt.published = model_message(rt.id, rt.policy.model)
            self.metrics.model_version.labels(rt.id).set(rt.published.version)
            rt.feed.publish(rt.published)
