"""The one retry schedule of the services — exponential backoff with jitter — as a tenacity wait
strategy (``Jittered``), and the loops that retry something remote until it answers, run by
tenacity (``until_success``).

The schedule: the n-th wait (n = 1, 2, …) is drawn uniformly from [½, 1½) of its nominal delay
min(initial · factor^(n−1), maximum), with the OS CSPRNG, so that restarted processes do not
retry in lockstep. tenacity runs the device's loops of fetches that retry until the analyzer
answers (its model, HPKE and Paillier configs). ``Backoff``, the same schedule as an iterator,
serves the retries that are not such a loop: the device outbox's per-group "not before" times
(a group waits while the others upload), the shuffler's batch deliveries, where a server's
``Retry-After`` sets a lower bound on the wait, and the shuffler's config fetcher
(``services.shuffler.published``), whose fetch reports failure instead of raising. The PostgreSQL
stores' transactions retry with tenacity too (``services.common.pg``, a bounded number of tries).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Iterator, Mapping

import tenacity

from privbandit.shared.settings import Retry

_JITTER = secrets.SystemRandom()


class Jittered(tenacity.wait.wait_base):
    """tenacity's wait for attempt n: uniform in [½, 1½) × min(initial · factor^(n−1),
    maximum)."""

    def __init__(self, initial: float, maximum: float, *, factor: float = 2.0) -> None:
        if not 0 < initial <= maximum:
            raise ValueError("need 0 < initial <= maximum")
        if factor < 1:
            raise ValueError("factor must be >= 1")
        self.initial, self.maximum, self.factor = initial, maximum, factor

    @classmethod
    def of(cls, schedule: Retry) -> Jittered:
        """The wait of a configured retry schedule."""
        return cls(schedule.initial, schedule.maximum)

    def nominal(self, attempt: int) -> float:
        """The n-th wait's nominal delay (n ≥ 1)."""
        # The exponent capped, so a long outage cannot overflow the float.
        return min(self.initial * self.factor ** min(max(0, attempt - 1), 64), self.maximum)

    def delay(self, attempt: int) -> float:
        return self.nominal(attempt) * (0.5 + _JITTER.random())

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return self.delay(retry_state.attempt_number)


def until_success(
    wait: Jittered, errors: tuple[type[BaseException], ...], log: logging.Logger, what: str,
    *, on_failure: Callable[[BaseException], int] | None = None,
) -> tenacity.AsyncRetrying:
    """Retry, forever, on ``errors`` with ``wait``, logging each failure (``what``: e.g.
    ``"task t: analyzer not ready"``) at INFO, or at the level ``on_failure(exc)`` returns (it
    may also record the failure)::

        async for attempt in until_success(...):
            with attempt:
                ...
    """

    def before_sleep(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        level = on_failure(exc) if on_failure is not None and exc is not None else logging.INFO
        log.log(level, "%s (%s); retrying in %.1fs", what, exc, delay)

    return tenacity.AsyncRetrying(wait=wait, retry=tenacity.retry_if_exception_type(errors),
                                  before_sleep=before_sleep, sleep=asyncio.sleep)


class Backoff(Iterator[float]):
    """``Jittered``'s schedule as an endless iterator of delays (seconds), for a retry that is
    not one loop (module docstring). ``reset()`` after a success."""

    def __init__(self, initial: float, maximum: float, *, factor: float = 2.0) -> None:
        self.wait = Jittered(initial, maximum, factor=factor)
        self.initial, self.maximum = initial, maximum
        self.attempt = 0

    @classmethod
    def of(cls, schedule: Retry) -> Backoff:
        """The backoff of a configured retry schedule."""
        return cls(schedule.initial, schedule.maximum)

    def __next__(self) -> float:
        self.attempt += 1
        return self.wait.delay(self.attempt)

    def reset(self) -> None:
        self.attempt = 0

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
