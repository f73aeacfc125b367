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
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread
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
# Bounds on one group commit: batches waiting for the same task are ingested together (one fsync
# for all of them), which matters for pass-through tasks where every report is a batch.
MAX_GROUP_BATCHES = 256
MAX_GROUP_REPORTS = 20_000


class ShuttingDown(Exception):
    """The analyzer stopped before a batch could be ingested."""


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
    """One task: its policy (mutated only by the task's ingest worker) and counters."""

    config: TaskConfig
    policy: Policy
    row_bytes: int
    published: ModelMessage
    feed: ModelFeed
    reports_counted: int = 0
    rejected: int = 0
    duplicates: int = 0
    batches: int = 0
    ledger_cache: PrivacyLedger | None = None
    # The ingest worker and its queue of (batch, future); None is the stop sentinel.
    queue: asyncio.Queue[tuple[BatchUpload, asyncio.Future[BatchAck]] | None] | None = None
    worker: asyncio.Task[None] | None = None

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
        """After ``stop``: end the streams and close the store."""
        self.close_streams()
        self.store.close()

    def ledger(self, rt: TaskRuntime) -> PrivacyLedger:
        """The task's ledger (depends on its parameters only; computed once, it can take ~1 s)."""
        if rt.ledger_cache is None:
            rt.ledger_cache = rt.policy.ledger(T=None)
        return rt.ledger_cache

    # -----------------------------------------------------------------------------------------
    # Batch ingest: a per-task worker coalesces waiting batches into one group commit

    def start(self) -> None:
        """Start the per-task ingest workers (in the event loop)."""
        for rt in self.tasks.values():
            rt.queue = asyncio.Queue()
            rt.worker = asyncio.create_task(self._ingest_worker(rt), name=f"ingest-{rt.id}")

    async def stop(self) -> None:
        """Let each worker finish the group in progress, then fail anything still queued."""
        for rt in self.tasks.values():
            if rt.worker is None or rt.queue is None:
                continue
            rt.queue.put_nowait(None)
            await rt.worker
            rt.worker = None
            while not rt.queue.empty():
                item = rt.queue.get_nowait()
                if item is not None and not item[1].done():
                    item[1].set_exception(ShuttingDown("the analyzer is shutting down"))

    async def submit(self, rt: TaskRuntime, upload: BatchUpload) -> BatchAck:
        """Queue a batch for its task's worker and wait for its (committed) ack."""
        if rt.queue is None or rt.worker is None or rt.worker.done():
            raise ShuttingDown("the analyzer is not accepting batches")
        fut: asyncio.Future[BatchAck] = asyncio.get_running_loop().create_future()
        rt.queue.put_nowait((upload, fut))
        # shield: a client that goes away must not cancel the group commit it is part of.
        return await asyncio.shield(fut)

    async def _ingest_worker(self, rt: TaskRuntime) -> None:
        assert rt.queue is not None
        while True:
            first = await rt.queue.get()
            if first is None:
                return
            group = [first]
            reports = len(first[0].reports)
            while not rt.queue.empty() and len(group) < MAX_GROUP_BATCHES:
                item = rt.queue.get_nowait()
                if item is None:
                    rt.queue.put_nowait(None)  # stop after this group
                    break
                group.append(item)
                reports += len(item[0].reports)
                if reports >= MAX_GROUP_REPORTS:
                    break
            uploads = [upload for upload, _ in group]
            try:
                # Not abandoned on cancellation: shutdown waits for a commit in progress.
                acks = await anyio.to_thread.run_sync(self.ingest_group, rt, uploads)
            except Exception as exc:
                log.exception("task %s: ingest of %d batch(es) failed", rt.id, len(group))
                for _, fut in group:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            finally:
                self.sync_published(rt)
            for (_, fut), ack in zip(group, acks, strict=True):
                if not fut.done():
                    fut.set_result(ack)

    def ingest_group(self, rt: TaskRuntime, uploads: list[BatchUpload]) -> list[BatchAck]:
        """Process batches of one task and commit them in ONE transaction; one ack per upload.

        Runs in a worker thread; only the task's worker calls it, so ingests of a task are
        serialised. A batch id already committed (or repeated within the group) is a replay.
        Reports that fail decryption or validation are rejected and not fed; report ids already
        counted (or repeated within the group) are duplicates. If anything fails before the
        commit, the policy is restored, so memory never runs ahead of disk.
        """
        started = time.perf_counter()
        policy = rt.policy
        randomizer = policy.randomizer
        committed = self.store.processed_batches(rt.id, [u.batch_id for u in uploads])

        # Decrypt and validate every report of the new batches (the CPU-heavy part).
        fresh: list[BatchUpload] = []
        replayed: set[int] = set()
        group_batches: set[str] = set()
        decoded: list[tuple[list[bytes], list[np.ndarray], int]] = []
        for i, upload in enumerate(uploads):
            if upload.batch_id in committed or upload.batch_id in group_batches:
                replayed.add(i)
                continue
            group_batches.add(upload.batch_id)
            ids: list[bytes] = []
            rows: list[np.ndarray] = []
            rejected = 0
            for report in upload.reports:
                try:
                    plaintext = self.keys.open(rt.id, report)
                    report_id, row_bytes = unpack_report(plaintext, rt.row_bytes)
                    rows.append(randomizer.from_bytes(row_bytes))
                except (CryptoError, ValueError) as exc:
                    rejected += 1
                    log.debug("task %s batch %s: rejected a report: %s", rt.id, upload.batch_id,
                              exc)
                    continue
                ids.append(report_id)
            fresh.append(upload)
            decoded.append((ids, rows, rejected))

        known = self.store.known_report_ids(rt.id, [rid for ids, _, _ in decoded for rid in ids])
        before = policy.get_state()
        results: list[tuple[BatchResult, list[bytes]]] = []
        try:
            for upload, (ids, rows, rejected) in zip(fresh, decoded, strict=True):
                new_ids: list[bytes] = []
                new_rows: list[np.ndarray] = []
                for report_id, row in zip(ids, rows, strict=True):
                    if report_id in known:
                        continue
                    known.add(report_id)  # also catches repeats within the batch and group
                    new_ids.append(report_id)
                    new_rows.append(row)
                self._feed(policy, new_rows)
                result = BatchResult(
                    batch_id=upload.batch_id,
                    counted=len(new_ids),
                    rejected=rejected,
                    duplicates=len(ids) - len(new_ids),
                    model_version=policy.model.version,
                )
                results.append((result, new_ids))
            if results:
                self.store.commit_batches(rt.id, results, policy.get_state())
        except BaseException:
            policy.set_state(before)
            raise

        m = self.metrics
        for result, _ in results:
            rt.reports_counted += result.counted
            rt.rejected += result.rejected
            rt.duplicates += result.duplicates
            rt.batches += 1
            m.batches.labels(rt.id, "processed").inc()
            m.reports_counted.labels(rt.id).inc(result.counted)
            m.reports_rejected.labels(rt.id).inc(result.rejected)
            m.reports_duplicate.labels(rt.id).inc(result.duplicates)
        if replayed:
            m.batches.labels(rt.id, "replayed").inc(len(replayed))
        if results:
            m.ingest_seconds.labels(rt.id).observe(time.perf_counter() - started)
            m.group_batches.labels(rt.id).observe(len(results))

        by_id = {result.batch_id: result for result, _ in results}
        acks = []
        for i, upload in enumerate(uploads):
            if i in replayed:
                acks.append(
                    BatchAck(
                        batch_id=upload.batch_id, replayed=True, counted=0, rejected=0,
                        duplicates=0, model_version=policy.model.version,
                    )
                )
                continue
            r = by_id[upload.batch_id]
            acks.append(
                BatchAck(
                    batch_id=r.batch_id, replayed=False, counted=r.counted, rejected=r.rejected,
                    duplicates=r.duplicates, model_version=r.model_version,
                )
            )
        return acks

    @staticmethod
    def _feed(policy: Policy, rows: list[np.ndarray]) -> None:
        """Feed rows to the policy until all are consumed (exact policies consume rows up to
        their next model switch per call)."""
        if not rows:
            return
        stacked = np.stack(rows)
        consumed = 0
        while consumed < stacked.shape[0]:
            k = policy.ingest(stacked[consumed:])
            if k < 1:
                raise RuntimeError(f"policy {policy.algo} consumed no rows")
            consumed += k

    def sync_published(self, rt: TaskRuntime) -> None:
        """Publish the policy's model if it is newer than the published one (event loop, after
        a commit or a rolled-back failure)."""
        if rt.policy.model.version != rt.published.version:
            rt.published = model_message(rt.id, rt.policy.model)
            self.metrics.model_version.labels(rt.id).set(rt.published.version)
            rt.feed.publish(rt.published)
