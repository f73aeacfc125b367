"""``GET /healthz`` the same way in every service: 200 with ``{"status": "ok", "service", ...}``
once the service is ready, 503 ``starting`` (an ``ErrorBody`` naming what it waits for) until
then, so an orchestrator (docker compose, ``privbandit up``) starts the next service only when
this one can do its job.

A service lists its conditions in a ``Readiness``: each is a name for the message and a check
returning what is still missing (an empty list once satisfied)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fastapi.responses import JSONResponse

from privbandit.services.common.errors import Starting

# What a readiness condition still misses ([] once met).
Check = Callable[[], list[str]]


class Readiness:
    """Named conditions that must all hold before ``/healthz`` answers 200."""

    def __init__(self) -> None:
        self._checks: list[tuple[str, Check]] = []

    def require(self, waiting_for: str, check: Check) -> None:
        """``check()`` lists what ``waiting_for`` (e.g. "the analyzer") has not provided yet."""
        self._checks.append((waiting_for, check))

    def require_that(self, what: str, condition: Callable[[], bool]) -> None:
        """A yes/no condition, named ``what`` in the 503 message while it is false."""
        self.require(what, lambda: [] if condition() else [what])

    def missing(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for waiting_for, check in self._checks:
            items = check()
            if items:
                out.setdefault(waiting_for, []).extend(items)
        return out

    @property
    def ready(self) -> bool:
        return not self.missing()

    def check(self) -> None:
        """Raise 503 ``starting`` naming what is missing, if anything is."""
        missing = self.missing()
        if missing:
            parts = [what if items == [what] else f"{what}: {', '.join(items)}"
                     for what, items in missing.items()]
            raise Starting("waiting for " + "; ".join(parts))


def health(service: str, readiness: Readiness, details: Mapping[str, object]) -> JSONResponse:
    """The ``/healthz`` answer: 503 ``starting`` until ``readiness`` holds, then ``details``
    under ``{"status": "ok", "service": service}``."""
    readiness.check()
    return JSONResponse({"status": "ok", "service": service, **details})
