"""Intake: an upload is checked against its task and made durable by group commit.

Checks come first and refuse the whole upload (nothing stored): the transport must be the
task's (HPKE ``reports`` or ``paillier`` counts), whose ``check`` then runs
(``services.shuffler.transports``): every HPKE report must be sealed to the key id
the analyzer publishes, with a well-formed encapsulated key and the task's one public length
(anything else cannot be a report of this task, and equal lengths leak nothing in the batch;
``services.shuffler.hpke``); encrypted counts must be under the analyzer's Paillier key and in
Z*_{n²} (one bad ciphertext in a batch would make its whole sum undecryptable), with a tag that
passes the same HPKE checks. A Paillier report whose tag the shuffler already holds is a
duplicate (``ShufflerStore.accept``), like an identical ciphertext.

Then concurrent uploads are funnelled into one SQLite transaction per group (uploads arriving
while a commit is in progress form the next group), so a 202 costs a share of one fsync; the
same transaction forms every batch that became full, and the forwarder is woken for it. With
the SQLite store the group commits on the event loop's thread (``Store.accept_in_loop``: no
thread hand-off per group) and the WAL is checkpointed in a worker thread every
``CHECKPOINT_EVERY`` groups; a PostgreSQL commit, round trips to the server, runs in a worker
thread.

Backpressure: an upload arriving while its task has ``limits.shuffler_reports`` reports stored
and not yet acknowledged by the analyzer (counting uploads being committed) is refused with 429
``queue_full`` and a Retry-After before anything of it is stored.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from privbandit.services.common.group_commit import GroupCommitter, Outcome, ShuttingDown
from privbandit.services.shuffler.errors import AggregationMismatch, QueueFull, StorageError
from privbandit.services.shuffler.forwarder import Forwarder
from privbandit.services.shuffler.hpke import HpkeState, Refresh
from privbandit.services.shuffler.metrics import ShufflerMetrics
from privbandit.services.shuffler.store import AcceptResult, Store, Upload
from privbandit.services.shuffler.tasks import TaskSpec
from privbandit.services.shuffler.transports import Transports
from privbandit.services.shuffler.transports.base import Reports, ShufflerTransport
from privbandit.shared.settings import Limits

log = logging.getLogger(__name__)

MAX_GROUP = 256  # uploads per group commit
# Group commits between two WAL checkpoints of an in-loop store (~1 s at a busy shuffler's
# rate of groups, so the WAL stays a few MB).
CHECKPOINT_EVERY = 64


@dataclass(frozen=True)
class Committed:
    """One upload's outcome, with the batches its whole group formed (per task)."""

    result: AcceptResult
    formed: Mapping[str, int]


def require_transport(spec: TaskSpec, transport: ShufflerTransport, own: ShufflerTransport
                      ) -> None:
    """409 unless the task takes uploads of this transport (``own`` is the task's)."""
    if spec.config.transport == transport.name:
        return
    hint = f"it takes {own.route.takes} at POST /v1/tasks/{spec.id}/{own.route.endpoint}"
    raise AggregationMismatch(
        f"task {spec.id!r} uses {spec.config.transport} aggregation: {hint}; "
        "no report was stored"
    )


async def _answered() -> bool:
    return True


@dataclass(frozen=True)
class AnalyzerKeys:
    """What intake checks reports against beyond its transport's own configs: the analyzer's
    published HPKE config, and how to ask for it again (a report names a key id this shuffler
    does not know: the analyzer may have a new key)."""

    hpke: HpkeState
    refresh_hpke: Refresh = _answered


class Intake:
    """Checks uploads and makes them durable (group commit); ``start``/``stop`` with the app."""

    def __init__(
        self, store: Store, metrics: ShufflerMetrics, forwarder: Forwarder,
        keys: AnalyzerKeys, limits: Limits | None = None,
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.metrics = metrics
        # Called (event loop) with the task of an upload that had a report refused as sized for
        # a longer batch than the next (``services.shuffler.schedule``).
        self.on_refused = on_refused
        self.forwarder = forwarder
        self.transports: Transports = forwarder.transports
        self.hpke = keys.hpke
        self.refresh_hpke = keys.refresh_hpke
        self.limits = limits if limits is not None else Limits()
        # Reports of uploads between the backpressure check and their commit, per task.
        self._committing: dict[str, int] = {}
        for task in store.schedules:
            metrics.stored.labels(task).set_function(functools.partial(store.stored, task))
        self._committer: GroupCommitter[Upload, Committed] = GroupCommitter(
            "shuffler intake", self._commit, max_items=MAX_GROUP, after=self._after,
            in_loop=store.accept_in_loop,
        )
        self._groups = 0
        self._checkpointing: asyncio.Future[None] | None = None

    @property
    def running(self) -> bool:
        return self._committer.running

    def start(self) -> None:
        self._committer.start()

    async def stop(self) -> None:
        """Finish the group in progress (its clients get their answers), then stop."""
        await self._committer.stop()
        if self._checkpointing is not None:
            await asyncio.gather(self._checkpointing, return_exceptions=True)

    def _maybe_checkpoint(self) -> None:
        """(Event loop.) Every ``CHECKPOINT_EVERY`` groups of an in-loop store, one WAL
        checkpoint in a worker thread, unless the previous one is still running."""
        self._groups += 1
        if not self.store.accept_in_loop or self._groups % CHECKPOINT_EVERY:
            return
        if self._checkpointing is not None and not self._checkpointing.done():
            return
        self._checkpointing = asyncio.get_running_loop().run_in_executor(
            None, self.store.checkpoint)
        self._checkpointing.add_done_callback(_log_failure)

    async def accept(self, transport: str, spec: TaskSpec, reports: Reports) -> AcceptResult:
        """An upload of ``transport`` (its name) for a task, checked by the task's transport
        (409 if it is another), durable once this returns."""
        own = self.transports.of(spec.id)
        require_transport(spec, self.transports[transport], own)
        await own.check(spec.id, reports, self.hpke, self.refresh_hpke)
        return await self._submit(spec, reports)

    def _check_room(self, task: str) -> None:
        """429 ``queue_full`` when the task's stored, unacknowledged reports (and those being
        committed) reach ``limits.shuffler_reports``."""
        limit = self.limits.shuffler_reports
        held = self.store.stored(task) + self._committing.get(task, 0)
        if held >= limit:
            self.metrics.uploads_refused.labels(task, "queue_full").inc()
            raise QueueFull(
                f"task {task!r} has {held} reports waiting for their batch or for the analyzer "
                f"(limit {limit}); none of this upload was stored: retry later",
                self.limits.retry_after,
            )

    async def _submit(self, spec: TaskSpec, reports: Reports) -> AcceptResult:
        self._check_room(spec.id)
        self._committing[spec.id] = self._committing.get(spec.id, 0) + len(reports)
        try:
            committed = await self._committer.submit(Upload(spec.id, reports))
        except ShuttingDown:
            raise  # 503 unavailable
        except Exception as exc:
            raise StorageError(
                "reports could not be stored; retry later (none was accepted)"
            ) from exc
        finally:
            self._committing[spec.id] -= len(reports)
        return committed.result

    def _commit(self, uploads: list[Upload]) -> list[Committed]:
        """(Event loop's thread for an in-loop store, else a worker thread.) One transaction
        for the whole group."""
        started = time.perf_counter()
        results, formed = self.store.accept(uploads)
        self.metrics.commit_seconds.observe(time.perf_counter() - started)
        return [Committed(result, formed) for result in results]

    def _after(self, uploads: list[Upload], outcomes: list[Outcome[Committed]]) -> None:
        """(Event loop.) Metrics, and wake the forwarder for the batches formed."""
        first = outcomes[0]
        if isinstance(first, BaseException):  # the whole group failed: nothing was stored
            return
        self._maybe_checkpoint()
        self.metrics.commit_group.observe(len(uploads))
        for upload, outcome in zip(uploads, outcomes, strict=True):
            assert isinstance(outcome, Committed)
            self.metrics.reports_accepted.labels(upload.task).inc(outcome.result.accepted)
            self.metrics.reports_duplicate.labels(upload.task).inc(outcome.result.duplicates)
            if outcome.result.refused and self.on_refused is not None:
                self.on_refused(upload.task)
        for task, n in first.formed.items():
            self.metrics.batches_formed.labels(task).inc(n)
            self.forwarder.wake(task)


def _log_failure(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("shuffler: WAL checkpoint failed", exc_info=fut.exception())
