"""The background uploader: moves sealed reports from the durable outbox to the shuffler.

At-least-once delivery with per-task backoff:

- items are read oldest first, up to ``UPLOAD_BATCH`` of one task per ``ReportUpload``;
- they are deleted from the outbox only after the shuffler answers 202 (it answers 202 only once
  the reports are durable), so a crash of either side at any moment loses nothing;
- a retry after a lost 202 re-sends byte-identical ciphertexts, which the shuffler counts as
  duplicates and the analyzer would drop by report id, so nothing is counted twice;
- transport errors, 5xx, 408, 429 and configuration errors (401/403/404: the shuffler does not
  know the task or us) are retried with exponential backoff per task, so one task's trouble
  does not stall another's;
- 400/413/422 mean the shuffler refuses these very bytes: retrying cannot help, so the items go to
  a dead-letter table (kept on disk, logged, exported as a metric) instead of blocking the queue.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time

import httpx

from services.device.background import stop_task
from services.device.store import OutboxItem, Store
from shared.protocol import ReportsAccepted

log = logging.getLogger(__name__)

UPLOAD_BATCH = 100
BACKOFF_INITIAL = 0.1
BACKOFF_MAX = 5.0
PERMANENT = {400, 413, 422}


class Uploader:
    """Drains the outbox to the shuffler; ``wake()`` after queuing a report."""

    def __init__(self, store: Store, client: httpx.AsyncClient, metrics: object | None = None):
        self.store = store
        self.client = client
        self.metrics = metrics
        self._event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Per-task backoff: task -> (current delay, monotonic time before which not to retry).
        self._blocked: dict[str, tuple[float, float]] = {}
        self.last_error: str | None = None
        self._stopping = False

    def wake(self) -> None:
        self._event.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="outbox-uploader")

    async def stop(self) -> None:
        self._stopping = True
        self._event.set()
        await stop_task(self._task)
        self._task = None

    async def _run(self) -> None:
        while not self._stopping:
            # Clear before reading so a report queued while we read is not missed.
            self._event.clear()
            now = time.monotonic()
            blocked = {t for t, (_, until) in self._blocked.items() if until > now}
            try:
                items = await self.store.outbox_head(UPLOAD_BATCH, exclude=blocked)
            except Exception:  # storage trouble: log, wait, try again
                log.exception("outbox read failed")
                await self._sleep(1.0)
                continue
            if not items:
                waits = [until - now for _, until in self._blocked.values() if until > now]
                await self._sleep(min(waits) if waits else None)
                continue
            try:
                await self._upload(items)
            except Exception:  # never let the uploader die
                log.exception("outbox upload crashed; retrying")
                self._backoff(items[0].task, "internal error")

    async def _sleep(self, timeout: float | None) -> None:
        """Until ``wake()`` or ``timeout`` seconds, whichever comes first."""
        waiter = asyncio.ensure_future(self._event.wait())
        try:
            await asyncio.wait({waiter}, timeout=timeout)
        finally:
            waiter.cancel()

    async def _upload(self, items: list[OutboxItem]) -> None:
        task = items[0].task
        body = '{"reports":[' + ",".join(it.report for it in items) + "]}"
        try:
            resp = await self.client.post(
                f"/v1/tasks/{task}/reports",
                content=body.encode(),
                headers={"Content-Type": "application/json"},
            )
        except httpx.HTTPError as exc:
            self._backoff(task, f"shuffler unreachable: {exc!r}")
            return
        status = resp.status_code
        if status == 202:
            try:
                ReportsAccepted.model_validate_json(resp.content)
            except ValueError:
                # The shuffler said 202, which by contract means durable; a body we cannot
                # parse does not change that, so still delete (re-sending would be harmless too).
                log.warning("shuffler 202 with an unexpected body: %r", resp.content[:200])
            await self.store.mark_uploaded([it.seq for it in items])
            self._blocked.pop(task, None)
            self.last_error = None
            self._count("uploaded", len(items))
            return
        detail = resp.text[:300]
        if status in PERMANENT:
            if len(items) > 1:
                # Find the offending report(s) instead of discarding good neighbours.
                mid = len(items) // 2
                await self._upload(items[:mid])
                await self._upload(items[mid:])
                return
            log.error("shuffler refused a report for good (%d %s); dead-lettered", status, detail)
            await self.store.dead_letter(items, f"{status} {detail}")
            self._count("dead_lettered", len(items))
            return
        self._backoff(task, f"shuffler answered {status}: {detail}")

    def _backoff(self, task: str, reason: str) -> None:
        delay, _ = self._blocked.get(task, (BACKOFF_INITIAL / 2, 0.0))
        delay = min(2 * delay, BACKOFF_MAX)
        # Jitter spreads the retries of many devices; not security relevant.
        until = time.monotonic() + delay * (0.5 + random.random())
        self._blocked[task] = (delay, until)
        self.last_error = reason
        self._count("failures", 1)
        log.warning("upload for %s failed (%s); retry in %.2fs", task, reason, delay)

    def _count(self, what: str, n: int) -> None:
        hook = getattr(self.metrics, "on_upload", None)
        if hook is not None:
            hook(what, n)
