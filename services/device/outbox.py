"""The background uploader: moves sealed reports from the durable outbox to the shuffler.

At-least-once delivery with backoff per (task, transport) group:

- items are read oldest first, up to ``upload_batch`` of one task and one transport per upload,
  to that transport's endpoint (``services.device.transports``): HPKE reports as a
  ``ReportUpload`` to ``POST /v1/tasks/{task}/reports``, Paillier-encrypted counts of a
  Paillier task as a ``PaillierUpload`` to ``POST /v1/tasks/{task}/encrypted-counts``;
- they are deleted from the outbox only after the shuffler answers 202 (it answers 202 only once
  the reports are durable), so a crash of either side at any moment loses nothing;
- a retry after a lost 202 re-sends the byte-identical stored ciphertexts, which the shuffler
  drops as duplicates (and the analyzer would drop HPKE reports by report id), so nothing is
  counted twice. This matters most for Paillier: a fresh encryption of the same counts would be
  a different ciphertext, and the shuffler would add it to a batch sum a second time;
- transport errors, 5xx, 408, 429 and configuration errors (401/403/404, 409 for a transport the
  shuffler's task does not take) are retried with exponential backoff per group, so one task's
  trouble does not stall another's; a ``Retry-After`` header sets a lower bound on the wait;
- an upload refused with 422 ``unknown_key`` makes the device re-fetch the key of a transport
  that has one (``DeviceTransport.refresh_key``: a Paillier task's Paillier config): items
  under a key the analyzer no longer has are dropped and counted (they can never be counted
  nor re-encrypted, see ``DeviceStore.drop_stale``); if the key is still current, the shuffler
  is behind and the upload is retried later;
- other 400/413/422 mean the shuffler refuses these very bytes: retrying cannot help, so the
  offending items (found by splitting the upload) go to a dead-letter table (kept on disk,
  logged, exported as a metric) instead of blocking the queue.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from privbandit.services.common.retry import Jittered, retry_after
from privbandit.services.device.background import stop_task
from privbandit.services.device.store import DeviceStore, OutboxItem
from privbandit.services.device.transports.base import DeviceTransport, KeyRefresher
from privbandit.shared.protocol.messages import ErrorBody, ReportsAccepted
from privbandit.shared.settings import DeviceTiming

log = logging.getLogger(__name__)

PERMANENT = {400, 413, 422}

Group = tuple[str, str]  # (task, transport)


def _error_code(resp: httpx.Response) -> str | None:
    try:
        return ErrorBody.model_validate_json(resp.content).code
    except ValueError:
        return None


class Spread:
    """Clients of several shuffler replicas (``shuffler.urls``) used in turn: each upload goes
    to the next replica, so a retry after a failure goes to another one. Any replica takes any
    report (they share one database), and a re-sent report is a duplicate wherever it lands."""

    def __init__(self, clients: Sequence[httpx.AsyncClient]) -> None:
        if not clients:
            raise ValueError("no shuffler client")
        self.clients = list(clients)
        self._next = itertools.cycle(self.clients)

    async def post(self, url: str, **kw: Any) -> httpx.Response:
        return await next(self._next).post(url, **kw)

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()


class Uploader:
    """Drains the outbox to the shuffler; ``wake()`` after queuing a report.

    ``transports``: the device's transports by name, the ones the outbox's items name (where
    each uploads, and how to re-fetch its key when the shuffler does not know a report's)."""

    def __init__(
        self,
        store: DeviceStore,
        client: httpx.AsyncClient | Spread,
        timing: DeviceTiming,
        transports: Mapping[str, DeviceTransport],
        metrics: object | None = None,
    ) -> None:
        self.store, self.client, self.timing = store, client, timing
        self.transports, self.metrics = transports, metrics
        self._event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Per-group backoff: group -> (its failed attempts in a row, monotonic time before which
        # not to retry); each wait is the retry schedule's for that attempt (``Jittered``), a
        # group's success forgets it (the next failure waits the first delay again).
        self._wait = Jittered.of(timing.upload_retry)
        self._blocked: dict[Group, tuple[int, float]] = {}
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
            blocked = {g for g, (_, until) in self._blocked.items() if until > now}
            try:
                items = await self.store.outbox_head(self.timing.upload_batch, exclude=blocked)
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
                self._backoff(_group(items[0]), "internal error")

    async def _sleep(self, timeout: float | None) -> None:
        """Until ``wake()`` or ``timeout`` seconds, whichever comes first."""
        waiter = asyncio.ensure_future(self._event.wait())
        try:
            await asyncio.wait({waiter}, timeout=timeout)
        finally:
            waiter.cancel()

    async def _upload(self, items: list[OutboxItem]) -> None:
        group = _group(items[0])
        task, name = group
        transport = self.transports[name]
        # The stored JSON goes out verbatim: a retry sends exactly the bytes of the first try.
        body = '{"reports":[' + ",".join(it.report for it in items) + "]}"
        try:
            resp = await self.client.post(
                f"/v1/tasks/{task}/{transport.endpoint}",
                content=body.encode(),
                headers={"Content-Type": "application/json"},
            )
        except httpx.HTTPError as exc:
            self._backoff(group, f"shuffler unreachable: {exc!r}")
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
            self._blocked.pop(group, None)
            self.last_error = None
            self._count("uploaded", len(items))
            return
        detail = resp.text[:300]
        refresh = transport.refresh_key
        if status == 422 and refresh is not None and _error_code(resp) == "unknown_key":
            await self._unknown_key(group, items, detail, refresh)
            return
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
        self._backoff(group, f"shuffler answered {status}: {detail}", retry_after(resp.headers))

    async def _unknown_key(
        self, group: Group, items: list[OutboxItem], detail: str, refresh: KeyRefresher
    ) -> None:
        """The shuffler does not know the key (e.g. Paillier) of (some of) these items: ask the
        analyzer for its current key, drop what was encrypted under another one, retry the
        rest."""
        task, name = group
        current = await refresh(task)
        if current is None:
            self._backoff(group, f"unknown_key and the analyzer's key is unknown: {detail}")
            return
        if all(it.key_id == current for it in items):
            # The device holds the analyzer's current key: the shuffler has an older one and
            # must catch up; keep the items (they are valid) and retry later.
            self._backoff(group, f"the shuffler does not know the analyzer's current Paillier "
                                 f"key {current} yet: {detail}")
            return
        # Items sealed under an old key cannot be re-sent (no analyzer can decrypt them) nor
        # re-encrypted (the device keeps no plaintext): they are lost, and say so.
        dropped = await self.store.drop_stale(task, current, name)
        log.error("task %s: dropped %d report(s) encrypted under a Paillier key the analyzer no "
                  "longer has (its key is now %d); they cannot be counted", task, dropped, current)
        self._count("dropped", dropped)
        self._blocked.pop(group, None)  # what remains is under the current key: send it now

    def _backoff(self, group: Group, reason: str, at_least: float = 0.0) -> None:
        attempt = self._blocked[group][0] + 1 if group in self._blocked else 1
        # Jitter spreads the retries of many devices; a Retry-After is a floor.
        wait = self._wait.delay(attempt, at_least)
        self._blocked[group] = (attempt, time.monotonic() + wait)
        self.last_error = reason
        self._count("failures", 1)
        log.warning("upload for %s (%s) failed (%s); retry in %.2fs", group[0], group[1],
                    reason, wait)

    def _count(self, what: str, n: int) -> None:
        hook = getattr(self.metrics, "on_upload", None)
        if hook is not None:
            hook(what, n)


def _group(item: OutboxItem) -> Group:
    return item.task, item.transport
