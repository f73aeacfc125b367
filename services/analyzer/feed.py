"""The published model of one task, the wake-up signal of its Server-Sent Events streams, and
the analyzer-wide bound on open streams."""

from __future__ import annotations

import asyncio
from typing import Any

from privbandit.shared.protocol.messages import AnyModelMessage
from privbandit.shared.settings import TaskConfig


def model_message(config: TaskConfig, model: Any) -> AnyModelMessage:
    """The wire form of a task's published model: its policy family's message
    (``shared.core.policies.families``: (θ̃, V, β) for a linear task, with θ̂ for ``ldp-glb``,
    the arm rule of a multi-armed task, a phase's arms and design, a BCO task's point)."""
    return config.family.publish(config.id, model)


class ModelFeed:
    """The latest published model of one task and a wake-up signal for stream subscribers.

    Used from the event loop only. Subscribers read ``current`` and then ``await wait()`` with
    no suspension in between, so a publication can never fall between the two.
    """

    def __init__(self, current: AnyModelMessage) -> None:
        self.current = current
        self.closed = False
        self._changed = asyncio.Event()

    def publish(self, message: AnyModelMessage) -> None:
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


class StreamSlots:
    """At most ``limit`` model streams open at once (event loop only): ``acquire`` before a
    stream starts, ``release`` exactly once when it ends, however it ends."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        self.limit = limit
        self.open = 0

    def acquire(self) -> bool:
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open -= 1
