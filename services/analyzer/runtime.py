"""The analyzer's in-memory runtime: per-task policy, published model, stream feed, and the
batch-ingest procedures: HPKE report batches (decrypt → validate → de-duplicate → aggregate →
commit) and, for ``secure-sum`` tasks, encrypted batch sums (decrypt → range-check → aggregate →
commit).

Readers (``GET /model``, ``/privacy``, the stream) only ever see ``TaskRuntime.published``, which
is replaced after a batch is committed, so no client observes a model that is not on disk.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread
import numpy as np

from services.analyzer.metrics import AnalyzerMetrics
from services.analyzer.store import BatchResult, Store
from shared.core.accounting.ledger import PrivacyLedger
from shared.core.policies import Policy, build_policy, randomizer_for
from shared.core.policies.model import Model
from shared.crypto.hpke import CryptoError, row_length, unpack_report
from shared.crypto.keystore import HpkeKeyStore, PaillierKeyStore
from shared.crypto.paillier import DEFAULT_KEY_BITS, MIN_KEY_BITS, CiphertextError
from shared.crypto.slots import SlotLayout, SlotRangeError, layout_for
from shared.protocol.messages import BatchAck, BatchUpload, ModelMessage, TaskInfo
from shared.protocol.secure_sum import EncryptedBatchSum
from shared.settings import Settings, TaskConfig

log = logging.getLogger(__name__)

DB_FILE = "analyzer.sqlite3"
# Bounds on one group commit: batches waiting for the same task are ingested together (one fsync
# for all of them), which matters for pass-through tasks where every report is a batch.
MAX_GROUP_BATCHES = 256
MAX_GROUP_REPORTS = 20_000


class ShuttingDown(Exception):
    """The analyzer stopped before a batch could be ingested."""


class BatchRefused(Exception):
    """A batch that cannot be counted and was NOT recorded (its id stays unprocessed): the
    route answers 422 with ``code``. Raised per batch, so the rest of its group still commits."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class BatchSumJob:
    """An encrypted batch sum whose wire form has been checked (count, key id, ciphertexts in
    Z*_{n²}); ``ciphertexts`` are the decoded integers, one per plaintext of the task layout."""

    upload: EncryptedBatchSum
    ciphertexts: list[int]

    @property
    def batch_id(self) -> str:
        return self.upload.batch_id


# What a task's ingest worker queues: report batches for ``reports`` tasks, batch sums for
# ``secure-sum`` tasks (the routes never mix them), each with the future of its answer.
IngestItem = BatchUpload | BatchSumJob


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
    # Secure-sum tasks only: the slot layout of the task under the analyzer's Paillier key.
    layout: SlotLayout | None = None
    # The ingest worker and its queue of (batch, future); None is the stop sentinel.
    queue: asyncio.Queue[tuple[IngestItem, asyncio.Future[BatchAck]] | None] | None = None
    worker: asyncio.Task[None] | None = None

    @property
    def id(self) -> str:
        return self.config.id


class AnalyzerRuntime:
    """Everything the routes need, created in the lifespan and closed with it."""

    def __init__(
        self,
        settings: Settings,
        *,
        sse_keepalive: float = 15.0,
        paillier_key_bits: int = DEFAULT_KEY_BITS,
    ) -> None:
        self.settings = settings
        self.sse_keepalive = sse_keepalive
        self.metrics = AnalyzerMetrics()
        data = Path(settings.data_dir) / "analyzer"
        self.data_dir = data
        self.keys = HpkeKeyStore(data)
        # The Paillier key of the secure-sum transport lives next to the HPKE key. Keys below
        # 2048 bits are only reachable through this constructor argument (tests), never through
        # the deployment configuration.
        self._paillier_key_bits = paillier_key_bits
        self._paillier: PaillierKeyStore | None = None
        self._paillier_lock = threading.Lock()
        if any(t.aggregation == "secure-sum" for t in settings.tasks):
            # Created (or loaded) before the first request: devices and the shuffler need it.
            self.paillier_keys()
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
        task_layout = None
        if config.aggregation == "secure-sum":
            task_layout = self._task_layout(config, policy)
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
            layout=task_layout,
        )

    def _task_layout(self, config: TaskConfig, policy: Policy) -> SlotLayout:
        """c = d(d+3)/2 counts of 0..m per report, batch size l, under the Paillier key."""
        try:
            return layout_for(config, self.paillier_keys().key_bits)
        except ValueError as exc:
            raise RuntimeError(f"task {config.id!r}: no secure-sum slot layout: {exc}") from exc

    def paillier_keys(self) -> PaillierKeyStore:
        """The analyzer's Paillier key store, created on first use (at start-up when a task uses
        secure-sum; otherwise on the first ``GET /v1/paillier-config``). Thread-safe."""
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
            # The transport decides what an observer of the shuffler output sees (spec §3).
            rt.ledger_cache = rt.policy.ledger(T=None, aggregation=rt.config.aggregation)
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

    async def submit(self, rt: TaskRuntime, upload: IngestItem) -> BatchAck:
        """Queue a batch (or a checked batch sum) for its task's worker and wait for its
        (committed) ack; raises ``BatchRefused`` for a batch sum that cannot be counted."""
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
            reports = _weight(first[0])
            while not rt.queue.empty() and len(group) < MAX_GROUP_BATCHES:
                item = rt.queue.get_nowait()
                if item is None:
                    rt.queue.put_nowait(None)  # stop after this group
                    break
                group.append(item)
                reports += _weight(item[0])
                if reports >= MAX_GROUP_REPORTS:
                    break
            uploads = [upload for upload, _ in group]
            try:
                # Not abandoned on cancellation: shutdown waits for a commit in progress.
                acks: list[BatchAck | BatchRefused]
                if rt.layout is not None:
                    jobs = [u for u in uploads if isinstance(u, BatchSumJob)]
                    assert len(jobs) == len(uploads), "report batch queued for a secure-sum task"
                    acks = await anyio.to_thread.run_sync(self.ingest_sum_group, rt, jobs)
                else:
                    batches = [u for u in uploads if isinstance(u, BatchUpload)]
                    assert len(batches) == len(uploads), "batch sum queued for a reports task"
                    acks = list(await anyio.to_thread.run_sync(self.ingest_group, rt, batches))
            except Exception as exc:
                log.exception("task %s: ingest of %d batch(es) failed", rt.id, len(group))
                for _, fut in group:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            finally:
                self.sync_published(rt)
            for (_, fut), ack in zip(group, acks, strict=True):
                if fut.done():
                    continue
                if isinstance(ack, BatchRefused):
                    fut.set_exception(ack)
                else:
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

    def ingest_sum_group(
        self, rt: TaskRuntime, jobs: list[BatchSumJob]
    ) -> list[BatchAck | BatchRefused]:
        """Open encrypted batch sums of one secure-sum task and commit the good ones in ONE
        transaction; one ack (or ``BatchRefused``) per job, in order.

        Runs in a worker thread, serialised per task like ``ingest_group``. Only the batch counts
        (Z, U) are ever decrypted, never a single report. A sum with a slot outside 0..l·m (an
        out-of-range report, too many reports, a tampered product) is refused before anything
        is fed, so a refused batch changes no state and its id stays unprocessed; a batch id
        already committed (or repeated within the group) is a replay. There are no report ids:
        duplicates are dropped by the shuffler (identical ciphertexts) before a sum is formed.
        """
        started = time.perf_counter()
        policy = rt.policy
        assert rt.layout is not None
        keys = self.paillier_keys()
        committed = self.store.processed_batches(rt.id, [j.batch_id for j in jobs])

        outcome: list[BatchRefused | None] = [None] * len(jobs)
        replayed: set[int] = set()
        opened: list[tuple[int, np.ndarray]] = []
        group_batches: set[str] = set()
        for i, job in enumerate(jobs):
            if job.batch_id in committed or job.batch_id in group_batches:
                replayed.add(i)
                continue
            try:
                # Pure: decrypts and range-checks only; nothing is fed before every check passed.
                stat = keys.open_batch_sum(job.ciphertexts, rt.layout, job.upload.count)
            except SlotRangeError as exc:
                outcome[i] = BatchRefused(
                    "slot_out_of_range",
                    f"batch {job.batch_id}: the decrypted sum is not one of {job.upload.count} "
                    f"reports with counts in 0..{rt.layout.m} ({exc}); nothing was counted",
                )
                continue
            except CiphertextError as exc:
                outcome[i] = BatchRefused("bad_ciphertext", f"batch {job.batch_id}: {exc}")
                continue
            # Only an opened batch claims its id: a refused one may be re-sent (and re-refused).
            group_batches.add(job.batch_id)
            opened.append((i, stat))

        before = policy.get_state()
        results: dict[int, BatchResult] = {}
        try:
            for i, stat in opened:
                job = jobs[i]
                policy.ingest_statistic(stat, job.upload.count)
                results[i] = BatchResult(
                    batch_id=job.batch_id, counted=job.upload.count, rejected=0, duplicates=0,
                    model_version=policy.model.version,
                )
            if results:
                self.store.commit_batches(
                    rt.id, [(r, []) for r in results.values()], policy.get_state()
                )
        except BaseException:
            policy.set_state(before)
            raise

        m = self.metrics
        for r in results.values():
            rt.reports_counted += r.counted
            rt.batches += 1
            m.batches.labels(rt.id, "processed").inc()
            m.reports_counted.labels(rt.id).inc(r.counted)
        refused = sum(o is not None for o in outcome)
        if refused:
            m.batches.labels(rt.id, "refused").inc(refused)
        if replayed:
            m.batches.labels(rt.id, "replayed").inc(len(replayed))
        if results:
            m.ingest_seconds.labels(rt.id).observe(time.perf_counter() - started)
            m.group_batches.labels(rt.id).observe(len(results))

        acks: list[BatchAck | BatchRefused] = []
        for i, job in enumerate(jobs):
            refusal = outcome[i]
            if refusal is not None:
                acks.append(refusal)
            elif i in replayed:
                acks.append(
                    BatchAck(
                        batch_id=job.batch_id, replayed=True, counted=0, rejected=0,
                        duplicates=0, model_version=policy.model.version,
                    )
                )
            else:
                r = results[i]
                acks.append(
                    BatchAck(
                        batch_id=r.batch_id, replayed=False, counted=r.counted, rejected=0,
                        duplicates=0, model_version=r.model_version,
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


def _weight(item: IngestItem) -> int:
    """A queued item's share of a group's work bound: its reports (one decryption per report
    for a report batch, one per plaintext for a batch sum, which is at most a few)."""
    return len(item.reports) if isinstance(item, BatchUpload) else len(item.ciphertexts)
