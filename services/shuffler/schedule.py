"""Batch schedules (issue 22): the shuffler catches up with the analyzer's announced batch length.

The shuffler's store decides batch k's length l_k from its own count k of batches formed
(``store.base``: batch schedules), and refuses a report whose share is sized for a longer batch
than its next one. Honest devices size their share for the length l_b the analyzer announced
with its model (``ModelMessage.batch_size``), after b batches — so an honest report is refused
only if the shuffler's count is behind the analyzer's: its store was started afresh
(``--init``) while the analyzer kept its state. Every report would then be refused and no batch
would ever form. ``ScheduleCatchUp`` closes that gap from the analyzer's side, never from a
device's (a device cannot move the schedule): at start-up, and after an upload had a report
refused (at most every ``INTERVAL`` seconds per task), it reads the task's model and moves the
store's index on to the first batch at least l_b long (``Store.catch_up``). Skipping indices
only lengthens batches, so no share ever falls short."""

from __future__ import annotations

import asyncio
import logging
import time

import httpx

from privbandit.services.shuffler.store import Store
from privbandit.shared.settings import Settings

log = logging.getLogger(__name__)

# Least seconds between two catch-ups of one task asked for by refused reports.
INTERVAL = 5.0
# Longest wait for the analyzer's model during start-up.
FIRST_TIMEOUT = 2.0


class ScheduleCatchUp:
    """Reads each growing-schedule task's announced length from the analyzer and catches the
    store up to it (module docstring)."""

    def __init__(self, settings: Settings, store: Store, client: httpx.AsyncClient) -> None:
        self.store, self.client = store, client
        self.tasks = [t.id for t in settings.tasks if not t.schedule.is_fixed]
        self._last: dict[str, float] = {}
        self._running: set[asyncio.Task[None]] = set()

    async def catch_up(self, task: str, timeout: float | None = None) -> int | None:
        """One catch-up of ``task``: the store's next batch index after it, None if the analyzer
        did not answer (logged; the next refused report asks again)."""
        try:
            resp = await self.client.get(f"/v1/tasks/{task}/model", timeout=timeout)
            resp.raise_for_status()
            length = resp.json().get("batch_size")
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("task %s: could not read the analyzer's batch length: %r", task, exc)
            return None
        if not isinstance(length, int) or length < 1:
            return None  # nothing announced yet: batch 0's length
        k = await asyncio.to_thread(self.store.catch_up, task, length)
        log.info("task %s: analyzer announces batches of %d; next batch index %d", task, length, k)
        return k

    async def first(self) -> None:
        """Start-up: every growing-schedule task once, without waiting long for the analyzer."""
        for task in self.tasks:
            await self.catch_up(task, FIRST_TIMEOUT)

    def refused(self, task: str) -> None:
        """(Event loop.) An upload of ``task`` had a report refused as oversized: catch up in the
        background, at most every ``INTERVAL`` seconds."""
        now = time.monotonic()
        if task not in self.tasks or now - self._last.get(task, -INTERVAL) < INTERVAL:
            return
        self._last[task] = now
        running = asyncio.create_task(self._quietly(task), name=f"catch-up:{task}")
        self._running.add(running)
        running.add_done_callback(self._running.discard)

    async def _quietly(self, task: str) -> None:
        try:
            await self.catch_up(task)
        except Exception:  # the store may be briefly away: the next refusal asks again
            log.exception("task %s: schedule catch-up failed", task)

    async def stop(self) -> None:
        for running in list(self._running):
            running.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
