"""Delivery of formed batches to the analyzer.

``Forwarder`` runs one delivery loop per task: it posts the oldest unacknowledged batches (batch
id and ciphertexts in the stored shuffled order — nothing else) with the shuffler's bearer token
and retries each with exponential backoff until it gets a 200 ``BatchAck`` for that batch id, then
marks it acknowledged. For a ``secure-sum`` task it first multiplies the batch's Paillier
ciphertexts into one encrypted sum (in a worker thread), stores that durably in place of the
members, and posts only ``EncryptedBatchSum`` to ``/batch-sums`` (the sum, and each member's tag
and ciphertext digest); an individual report of such a task never leaves the shuffler. Before each
attempt such a batch is checked against the analyzer's current Paillier key: a batch holding a
report under another key (the analyzer's key changed after an explicit ``--init``) is dissolved
instead of retried forever (``ShufflerStore.refuse_stale_key``), and an analyzer answering
``unknown_key`` makes the shuffler fetch its key again.

What the analyzer answers:

- 200 ``BatchAck``: the batch is done — counted, its bad reports rejected alone, or (a secure-sum
  batch whose sum or tags are invalid) ``quarantined``, all its reports refused. Nothing in a
  batch's content makes the analyzer refuse it otherwise, so no report can hold a delivery slot.
- any other 4xx (401 token, 404 task, 409 transport, 413 body, 422 l, Paillier key or message
  form): the shuffler and the analyzer disagree on the deployment (configuration, credentials
  or keys). That holds for every batch of the task alike, and dropping batches would lose honest
  reports that the fix makes deliverable, so the batch is kept and retried with the capped
  backoff like a 5xx or a transport error, logged at ERROR, counted in ``forward_failures``
  (reason ``client_error``) and shown in ``/v1/status`` (``last_error``) until someone fixes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

import anyio.to_thread
import httpx
from pydantic import ValidationError

from services.common.retry import Backoff
from services.shuffler.errors import SumUnavailable
from services.shuffler.metrics import ShufflerMetrics
from services.shuffler.secure_sum import PaillierState, batch_sum, sum_message
from services.shuffler.store import Store
from shared.protocol.messages import BatchAck, BatchUpload
from shared.settings import Settings

log = logging.getLogger(__name__)

HTTP_TIMEOUT = 60.0  # seconds; a batch of l = 100 000 reports takes a while to ingest
WINDOW = 16  # batches of one task in flight at once


@dataclass(frozen=True)
class Delivery:
    """One batch ready to post: where to, and the exact body (re-sent unchanged on retries)."""

    batch_id: str
    task: str
    path: str
    body: str


async def _wait(event: asyncio.Event, timeout: float | None) -> None:
    """Until ``event`` is set or ``timeout`` seconds pass. Not ``asyncio.wait_for``: on Python
    3.11 it can swallow a cancellation that arrives as the event is set (``stop`` cancels the
    loop while the cancelled deliveries set the event), and the loop would never end."""
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()


class Forwarder:
    """Delivers formed batches to the analyzer, exactly as stored, until acknowledged.

    Per task, up to ``WINDOW`` batches are in flight at once (oldest first); the analyzer
    serialises them per task and commits batches that arrive together in one transaction, so
    pass-through tasks (every report a batch) are not limited to one fsync round trip each.
    """

    def __init__(
        self,
        settings: Settings,
        store: Store,
        metrics: ShufflerMetrics,
        client: httpx.AsyncClient,
        paillier: PaillierState | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.client = client
        self.paillier = paillier if paillier is not None else PaillierState(settings.tasks)
        self.tasks = [t.id for t in settings.tasks]
        self.secure = {t.id for t in settings.tasks if t.aggregation == "secure-sum"}
        self.last_error: dict[str, str | None] = {t: None for t in self.tasks}
        self._wake = {t: asyncio.Event() for t in self.tasks}
        self._loops: list[asyncio.Task[None]] = []
        self._deliveries: set[asyncio.Task[None]] = set()
        self._started = False

    @property
    def running(self) -> bool:
        """Started, and no task's delivery loop has ended."""
        return self._started and not any(t.done() for t in self._loops)

    def start(self) -> None:
        self._started = True
        for task in self.tasks:
            # Un-acknowledged batches from before a restart are picked up at once.
            self._wake[task].set()
            self._loops.append(asyncio.create_task(self._run(task), name=f"forward-{task}"))

    async def stop(self) -> None:
        """Cancel delivery: a batch in flight stays unacknowledged and is re-sent on restart."""
        tasks = [*self._loops, *self._deliveries]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._loops.clear()
        self._deliveries.clear()
        self._started = False

    def wake(self, task: str) -> None:
        if task in self._wake:
            self._wake[task].set()

    async def _run(self, task: str) -> None:
        event = self._wake[task]
        slots = asyncio.Semaphore(WINDOW)
        in_flight: set[str] = set()

        def finished(_: asyncio.Task[None], batch_id: str) -> None:
            in_flight.discard(batch_id)
            slots.release()
            event.set()

        if task in self.secure:
            # Sums need the analyzer's public key (batches stored before a restart wait too).
            await self.paillier.ready.wait()
        while True:
            # Clear before looking: a batch formed (or a slot freed) after the look sets it again.
            event.clear()
            ids = await anyio.to_thread.run_sync(
                self.store.unacked, task, WINDOW, frozenset(in_flight)
            )
            if not ids:
                # Replicas on one database: another may have formed a batch this one owns
                # (a sweep) or died with batches to take over; look again every poll.
                await _wait(event, self.store.poll_interval)
                continue
            for batch_id in ids:
                await slots.acquire()
                in_flight.add(batch_id)
                delivery = asyncio.create_task(self._deliver_until_acked(task, batch_id))
                self._deliveries.add(delivery)
                delivery.add_done_callback(self._deliveries.discard)
                delivery.add_done_callback(lambda t, b=batch_id: finished(t, b))

    async def _deliver_until_acked(self, task: str, batch_id: str) -> None:
        # Exponential backoff with jitter (so restarted shufflers do not retry in lockstep).
        backoff = Backoff(self.settings.retry_initial, self.settings.retry_max)
        delivery: Delivery | None = None
        while True:
            # A secure-sum batch is loaded again before every attempt: checked against the
            # analyzer's current key (a stale one is dissolved, see ``_load_sum``).
            if delivery is None or task in self.secure:
                try:
                    delivery = await self._load(task, batch_id)
                except SumUnavailable as exc:
                    self._failed(task, batch_id, "secure_sum", str(exc))
                    await backoff.sleep()
                    continue
                if delivery is None:  # acknowledged or dissolved meanwhile
                    return
            if await self._deliver(delivery):
                break
            await backoff.sleep()
        await anyio.to_thread.run_sync(self.store.acknowledge, batch_id)
        self.metrics.batches_acknowledged.labels(task).inc()
        self.last_error[task] = None

    async def _load(self, task: str, batch_id: str) -> Delivery | None:
        """The delivery of a stored unacknowledged batch, or None if it was acknowledged."""
        if task in self.secure:
            return await anyio.to_thread.run_sync(self._load_sum, batch_id)
        batch = await anyio.to_thread.run_sync(self.store.load_batch, batch_id)
        if batch is None:
            return None
        body = BatchUpload(batch_id=batch.batch_id, reports=batch.reports).model_dump_json()
        return Delivery(batch_id, task, f"/v1/tasks/{task}/batches", body)

    def _load_sum(self, batch_id: str) -> Delivery | None:
        """(Worker thread.) The stored encrypted sum of a secure-sum batch, computed and stored
        first if needed: the product is deterministic, so a crash between storing and posting
        re-sends the same sum under the same batch id and the analyzer counts it once."""
        batch = self.store.load_secure_batch(batch_id)
        if batch is None:
            return None
        keys = {batch.key_id} if batch.sum_ct is not None else {m[0] for m in batch.members}
        if self.paillier.config is not None and not all(map(self.paillier.is_current, keys)):
            # Under a key the analyzer no longer has: it can never be counted, and a sum over
            # two keys decrypts to nothing. Dissolve it (this and any other such batch).
            self.refuse_stale_key(batch.task, self.paillier.config.key_id)
            return None
        if batch.sum_ct is None:
            started = time.perf_counter()
            key_id, ct, members = batch_sum(self.paillier, batch)
            self.metrics.sum_seconds.observe(time.perf_counter() - started)
            if not self.store.save_sum(batch_id, key_id, batch.size, ct, members):
                return None
            batch = self.store.load_secure_batch(batch_id)
            if batch is None or batch.sum_ct is None:
                return None
        body = sum_message(batch).model_dump_json()
        return Delivery(batch_id, batch.task, f"/v1/tasks/{batch.task}/batch-sums", body)

    def refuse_stale_key(self, task: str, key_id: int) -> None:
        """(Worker thread.) Drop what ``task`` holds under another Paillier key than ``key_id``
        (``ShufflerStore.refuse_stale_key``), count and log it."""
        done = self.store.refuse_stale_key(task, key_id)
        if done.refused or done.dissolved:
            self.metrics.reports_refused_stale_key.labels(task).inc(done.refused)
            self.metrics.batches_formed.labels(task).inc(done.formed)
            log.error(
                "task %s: refused %d accepted report(s) encrypted under a Paillier key the "
                "analyzer no longer has (its key is %d); %d unacknowledged batch(es) dissolved, "
                "%d formed again", task, done.refused, key_id, done.dissolved, done.formed,
            )

    async def on_new_key(self, key_id: int) -> None:
        """The analyzer's Paillier key is ``key_id`` (newly adopted): refuse what every
        secure-sum task holds under another key, then let delivery look again."""
        for task in sorted(self.secure):
            await anyio.to_thread.run_sync(self.refuse_stale_key, task, key_id)
            self.wake(task)

    async def _deliver(self, d: Delivery) -> bool:
        """One delivery attempt; True iff the analyzer acknowledged this batch id."""
        task = d.task
        try:
            resp = await self.client.post(
                d.path,
                content=d.body,
                headers={
                    "Authorization": f"Bearer {self.settings.shuffler_token}",
                    "Content-Type": "application/json",
                },
            )
        except httpx.HTTPError as exc:
            return self._failed(task, d.batch_id, "transport", f"{type(exc).__name__}: {exc}")
        if resp.status_code != 200:
            reason = "client_error" if 400 <= resp.status_code < 500 else "server_error"
            try:
                detail = resp.json()
                if detail.get("code") == "unknown_key":  # the analyzer's key changed?
                    self.paillier.request_refresh()
                detail = f"{detail.get('code')}: {detail.get('message')}"
            except (ValueError, AttributeError):
                detail = resp.text[:200]
            return self._failed(task, d.batch_id, reason, f"HTTP {resp.status_code} {detail}")
        try:
            ack = BatchAck.model_validate_json(resp.content)
        except ValidationError:
            return self._failed(
                task, d.batch_id, "bad_ack", "analyzer answered 200 without a BatchAck"
            )
        if ack.batch_id != d.batch_id:
            return self._failed(
                task, d.batch_id, "bad_ack", f"analyzer acknowledged {ack.batch_id}, not this batch"
            )
        log.log(
            logging.WARNING if ack.quarantined else logging.DEBUG,
            "task %s batch %s acknowledged: counted=%d rejected=%d duplicates=%d replayed=%s "
            "quarantined=%s", task, d.batch_id, ack.counted, ack.rejected, ack.duplicates,
            ack.replayed, ack.quarantined,
        )
        if ack.quarantined:
            self.metrics.batches_quarantined.labels(task).inc()
        return True

    def _failed(self, task: str, batch_id: str, reason: str, detail: str) -> bool:
        message = f"batch {batch_id}: {detail}"
        self.last_error[task] = message
        self.metrics.forward_failures.labels(task, reason).inc()
        # A 4xx will not fix itself (wrong token, configs that disagree): say so loudly.
        level = logging.ERROR if reason in ("client_error", "secure_sum") else logging.WARNING
        log.log(level, "task %s: delivery failed, will retry: %s", task, message)
        return False
