"""Delivery of formed batches to the analyzer.

``Forwarder`` runs one delivery loop per task: it posts what the task's transport
(``services.shuffler.transports``) forwards for each of the oldest unacknowledged batches with
the shuffler's bearer token and retries each with exponential backoff until it gets a 200
``BatchAck`` for that batch id, then marks it acknowledged. For a ``reports`` task that is the
batch id and the ciphertexts in the stored shuffled order — nothing else. For a ``paillier``
task the transport first multiplies the batch's Paillier
ciphertexts into one encrypted sum (in a worker thread), stores that durably in place of the
members, and posts only ``EncryptedBatchSum`` to ``/batch-sums`` (the sum, and each member's tag
and ciphertext digest); an individual report of such a task never leaves the shuffler. Before each
attempt such a batch is checked against the analyzer's current Paillier key: a batch holding a
report under another key (the analyzer's key changed after an explicit ``--init``) is dissolved
instead of retried forever (``ShufflerStore.refuse_stale_key``), and an analyzer answering
``unknown_key`` makes the shuffler fetch its key again.

What the analyzer answers:

- 200 ``BatchAck``: the batch is done — counted, its bad reports rejected alone, or (a Paillier
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
import functools
import logging
from collections.abc import Awaitable, Callable

import anyio.to_thread
import httpx
from pydantic import ValidationError

from privbandit.services.common.retry import Jittered, RetryAfterFloor, retry_after, until_true
from privbandit.services.shuffler.errors import Undeliverable
from privbandit.services.shuffler.metrics import ShufflerMetrics
from privbandit.services.shuffler.store import Store
from privbandit.services.shuffler.transports import Transports
from privbandit.services.shuffler.transports.base import Delivery
from privbandit.shared.protocol.messages import BatchAck
from privbandit.shared.settings import Settings

log = logging.getLogger(__name__)

HTTP_TIMEOUT = 60.0  # seconds; a batch of l = 100 000 reports takes a while to ingest
WINDOW = 16  # batches of one task in flight at once


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
        transports: Transports,
    ) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.client = client
        self.transports = transports
        self.tasks = [t.id for t in settings.tasks]
        self.last_error: dict[str, str | None] = {t: None for t in self.tasks}
        self._wake = {t: asyncio.Event() for t in self.tasks}
        self._loops: list[asyncio.Task[None]] = []
        self._deliveries: set[asyncio.Task[None]] = set()
        # A refused delivery's Retry-After (seconds), by batch id, until its next attempt.
        self._retry_after: dict[str, float] = {}
        # How a retry's wait is slept (a test records the waits instead of sleeping them).
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
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

        # E.g. sums need the analyzer's public key (batches stored before a restart wait too).
        await self.transports.of(task).delivery_ready()
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
                delivery.add_done_callback(functools.partial(finished, batch_id=batch_id))

    async def _deliver_until_acked(self, task: str, batch_id: str) -> None:
        # Exponential backoff with jitter (so restarted shufflers do not retry in lockstep); an
        # analyzer that is busy (429, 503 ``overloaded``) says how long to wait at least.
        wait = RetryAfterFloor(Jittered(self.settings.retry_initial, self.settings.retry_max),
                               lambda: self._retry_after.pop(batch_id, 0.0))
        transport = self.transports.of(task)
        delivery: Delivery | None = None

        async def attempt() -> bool | None:
            """True: acknowledged; None: acknowledged or dissolved meanwhile; False: failed
            (reported), retry."""
            nonlocal delivery
            if delivery is None or transport.reload:
                # Some transports load a batch again before every attempt (a Paillier batch is
                # checked against the analyzer's current key; a stale one is dissolved).
                try:
                    delivery = await anyio.to_thread.run_sync(transport.load, task, batch_id)
                except Undeliverable as exc:
                    return self._failed(task, batch_id, exc.reason, str(exc), loud=True)
                if delivery is None:
                    return None
            return await self._deliver(delivery)

        if not await until_true(wait, sleep=self.sleep)(attempt):
            return
        await anyio.to_thread.run_sync(self.store.acknowledge, batch_id)
        self.metrics.batches_acknowledged.labels(task).inc()
        self.last_error[task] = None

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
            self._retry_after[d.batch_id] = retry_after(resp.headers)
            # A 429 is back-pressure, not a mistake of ours: retried like a 5xx.
            reason = ("client_error" if 400 <= resp.status_code < 500 and resp.status_code != 429
                      else "server_error")
            try:
                detail = resp.json()
                # E.g. ``unknown_key``: the analyzer's key changed? (the transport looks again)
                self.transports.of(task).refused(detail.get("code"))
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

    def _failed(
        self, task: str, batch_id: str, reason: str, detail: str, loud: bool = False
    ) -> bool:
        message = f"batch {batch_id}: {detail}"
        self.last_error[task] = message
        self.metrics.forward_failures.labels(task, reason).inc()
        # A 4xx will not fix itself (wrong token, configs that disagree), nor will a batch its
        # transport cannot form (``loud``) without someone looking: say so loudly.
        level = logging.ERROR if loud or reason == "client_error" else logging.WARNING
        log.log(level, "task %s: delivery failed, will retry: %s", task, message)
        return False
