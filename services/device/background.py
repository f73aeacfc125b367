"""Stopping background tasks reliably.

A plain ``task.cancel(); await task`` can hang: a cancellation delivered while the task is inside
a library that runs its own cancel scopes (anyio under httpx/starlette, e.g. an in-process ASGI
call) may be consumed there, and a ``while True`` loop then simply carries on. So the loops check
a stop flag as well, and ``stop_task`` re-cancels until the task has really finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


async def stop_task(task: asyncio.Task[None] | None, *, attempts: int = 50) -> None:
    """Cancel ``task`` and wait until it is done (re-cancelling every 0.1 s if it goes on)."""
    if task is None:
        return
    for _ in range(attempts):
        if task.done():
            break
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
    if not task.done():
        log.warning("background task %s did not stop", task.get_name())
        return
    with contextlib.suppress(asyncio.CancelledError, Exception):
        task.result()


class Loops:
    """Background loops started together and stopped together: ``stopping`` is the flag the
    loops check (see the module docstring), ``stop`` sets it and then stops every task."""

    def __init__(self) -> None:
        self.stopping = False
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=name))

    async def stop(self) -> None:
        self.stopping = True
        await asyncio.gather(*(stop_task(t) for t in self._tasks))
        self._tasks.clear()
