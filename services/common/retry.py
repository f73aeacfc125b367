"""The one retry schedule of the services — exponential backoff with jitter — as a tenacity wait
strategy (``Jittered``), and the loops that retry until something succeeds, run by tenacity.

The schedule: the n-th wait (n = 1, 2, …) is drawn uniformly from [½, 1½) of its nominal delay
min(initial · factor^(n−1), maximum), with the OS CSPRNG, so that restarted processes do not
retry in lockstep; a server's ``Retry-After`` is a lower bound on it (capped at ``maximum``:
``Jittered.delay(n, at_least)``, ``RetryAfterFloor`` as a tenacity wait).

tenacity runs every retry loop: ``until_success`` the device's fetches that retry until the
analyzer answers (its model, HPKE and Paillier configs), ``until_true`` the ones whose attempt
reports its own failure and answers False (the shuffler's batch deliveries, with the analyzer's
``Retry-After`` as the floor, and its config fetcher, ``services.shuffler.published``). The
device outbox's per-group "not before" times are not one loop (a group waits while the others
upload), so it keeps each group's attempt number and takes each wait from the same
``Jittered.delay``. A new loop (or a group's success) starts again at the first wait. The
PostgreSQL stores' transactions retry with tenacity too (``services.common.pg``, a bounded
number of tries).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping

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

    def delay(self, attempt: int, at_least: float = 0.0) -> float:
        """The n-th wait (n ≥ 1), jittered; or ``at_least`` seconds (a server's Retry-After,
        capped at ``maximum`` so a hint cannot park a loop for hours) if that is longer."""
        return max(self.nominal(attempt) * (0.5 + _JITTER.random()), min(at_least, self.maximum))

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return self.delay(retry_state.attempt_number)


class RetryAfterFloor(tenacity.wait.wait_base):
    """tenacity's wait for attempt n: ``wait``'s n-th delay, or the server's hint if longer
    (``hint()``, read once per wait: e.g. the Retry-After of the answer that failed the attempt,
    0 when there was none; capped at ``wait.maximum``)."""

    def __init__(self, wait: Jittered, hint: Callable[[], float]) -> None:
        self.wait, self.hint = wait, hint

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return self.wait.delay(retry_state.attempt_number, self.hint())


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


def until_true(
    wait: tenacity.wait.wait_base, on_retry: Callable[[float], None] | None = None,
    *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> tenacity.AsyncRetrying:
    """Run an async attempt again, forever, while it returns False (a failure it has reported
    itself, e.g. an HTTP error it logged and counted), waiting ``wait`` before each retry;
    ``on_retry(delay)`` before each wait. Its other results end the loop and are returned;
    an exception it raises is not retried but propagates (a bug, or cancellation)::

        result = await until_true(Jittered(...))(attempt, *args)

    ``sleep``: how a wait is slept (a test records the waits instead)."""

    def before_sleep(state: tenacity.RetryCallState) -> None:
        if on_retry is not None:
            on_retry(state.next_action.sleep if state.next_action is not None else 0.0)

    return tenacity.AsyncRetrying(wait=wait, retry=tenacity.retry_if_result(_failed),
                                  before_sleep=before_sleep, sleep=sleep)


def _failed(result: object) -> bool:
    return result is False


def retry_after(headers: Mapping[str, str]) -> float:
    """A response's ``Retry-After`` in seconds (0 when absent, or an HTTP date: not worth
    parsing, the backoff applies): the least wait before a retry (``RetryAfterFloor``)."""
    try:
        return max(0.0, float(headers.get("retry-after", 0)))
    except ValueError:
        return 0.0
