"""The services' error type: domain code raises a ``ServiceError`` (each service subclasses it in
its own ``errors.py``) and never an HTTP exception; ``services.common.web`` maps every one of
them, in one place, to the protocol's error body ``{"code", "message"}`` with its status."""

from __future__ import annotations

from typing import ClassVar


class ServiceError(Exception):
    """A refusal with an HTTP status, a machine-readable ``code`` and a human ``message``.

    Subclasses fix ``status`` and ``code``; an instance may override ``code`` (one class can
    stand for several codes of the same kind) and add response ``headers`` (e.g. Retry-After)."""

    status: ClassVar[int] = 400
    default_code: ClassVar[str] = "bad_request"

    def __init__(
        self, message: str, *, code: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.headers = headers


class Unauthorized(ServiceError):
    status = 401
    default_code = "unauthorized"


class NotFound(ServiceError):
    status = 404
    default_code = "not_found"


class Conflict(ServiceError):
    status = 409
    default_code = "conflict"


class Invalid(ServiceError):
    """Well-formed JSON whose meaning is refused (wrong shape for the task, out of range...)."""

    status = 422
    default_code = "invalid_request"


class TooMany(ServiceError):
    status = 429
    default_code = "too_many_requests"


class Unavailable(ServiceError):
    """Not now: the caller should retry (e.g. a key not fetched yet, shutting down)."""

    status = 503
    default_code = "unavailable"
