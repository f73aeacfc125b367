"""The services' error type: domain code raises a ``ServiceError`` (each service subclasses it in
its own ``errors.py``) and never an HTTP exception; ``services.common.web`` maps every one of
them, in one place, to the protocol's error body ``{"code", "message"}`` with its status.

A subclass names its status and code either as class attributes (``status = 404``,
``default_code = "unknown_task"``) or as class keywords::

    class UnknownTask(NotFound, code="unknown_task"): ...
"""

from __future__ import annotations

from typing import Any, ClassVar


class ServiceError(Exception):
    """A refusal with an HTTP status, a machine-readable ``code`` and a human ``message``.

    Subclasses fix ``status`` and ``code``; an instance may override ``code`` (one class can
    stand for several codes of the same kind) and add response ``headers`` (e.g. Retry-After)."""

    status: ClassVar[int] = 400
    default_code: ClassVar[str] = "bad_request"

    def __init_subclass__(
        cls, *, status: int | None = None, code: str | None = None, **kw: Any
    ) -> None:
        super().__init_subclass__(**kw)
        if status is not None:
            cls.status = status
        if code is not None:
            cls.default_code = code

    def __init__(
        self, message: str, *, code: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.headers = headers


# The kinds of refusal, by HTTP status.
class Unauthorized(ServiceError, status=401, code="unauthorized"):
    pass


class NotFound(ServiceError, status=404, code="not_found"):
    pass


class Conflict(ServiceError, status=409, code="conflict"):
    pass


class Invalid(ServiceError, status=422, code="invalid_request"):
    """Well-formed JSON whose meaning is refused (wrong shape for the task, out of range...)."""


class TooMany(ServiceError, status=429, code="too_many_requests"):
    pass


class Unavailable(ServiceError, status=503, code="unavailable"):
    """Not now: the caller should retry (e.g. a key not fetched yet, shutting down)."""


# Refusals every service makes the same way.
class Overloaded(Unavailable, code="overloaded"):
    """The service is at its bound of requests in flight (``limits.<service>_requests``):
    refused before any work, with Retry-After (``services.common.admission``); retry then."""


class UnknownTask(NotFound, code="unknown_task"):
    """A task id this service is not configured with (``services.common.deps.lookup_task``)."""


class Starting(Unavailable, code="starting"):
    """``/healthz`` of a service that is not ready yet (``services.common.health``)."""


class StoreUnavailable(Unavailable, code="store_unavailable"):
    """The service's PostgreSQL database is unreachable (its connection was lost and the
    transaction's retries are spent); with Retry-After (``services.common.web``)."""
