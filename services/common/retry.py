"""The one retry schedule of the services: exponential backoff with jitter.

Every loop that retries something remote (batch delivery, fetching the analyzer's keys, uploading
the device outbox) iterates a ``Backoff``: delays start at ``initial``, double after each failure up
to ``maximum``, and are drawn uniformly from [½, 1½) of the nominal delay with the OS CSPRNG, so
that restarted processes do not retry in lockstep. ``reset()`` after a success.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator, Mapping

from privbandit.shared.settings import Retry

_JITTER = secrets.SystemRandom()


class Backoff(Iterator[float]):
    """An endless iterator of jittered, doubling delays (seconds)."""

    def __init__(self, initial: float, maximum: float, *, factor: float = 2.0) -> None:
        if not 0 < initial <= maximum:
            raise ValueError("need 0 < initial <= maximum")
        if factor < 1:
            raise ValueError("factor must be >= 1")
        self.initial, self.maximum, self.factor = initial, maximum, factor
        self.nominal = initial

    @classmethod
    def of(cls, schedule: Retry) -> Backoff:
        """The backoff of a configured retry schedule."""
        return cls(schedule.initial, schedule.maximum)

    def __next__(self) -> float:
        delay = self.nominal * (0.5 + _JITTER.random())
        self.nominal = min(self.nominal * self.factor, self.maximum)
        return delay

    def reset(self) -> None:
        self.nominal = self.initial

    def delay(self, at_least: float = 0.0) -> float:
        """The next delay, or ``at_least`` seconds (e.g. a server's Retry-After, capped at
        ``maximum``) if that is longer."""
        return max(next(self), min(at_least, self.maximum))

    async def sleep(self, at_least: float = 0.0) -> float:
        """Sleep for ``delay(at_least)``; returns the time slept."""
        delay = self.delay(at_least)
        await asyncio.sleep(delay)
        return delay


def retry_after(headers: Mapping[str, str]) -> float:
    """A response's ``Retry-After`` in seconds (0 when absent, or an HTTP date: not worth
    parsing, the backoff applies): the least wait before a retry (``Backoff.sleep``)."""
    try:
        return max(0.0, float(headers.get("retry-after", 0)))
    except ValueError:
        return 0.0
