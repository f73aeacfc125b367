"""HTTP plumbing shared by the analyzer, the shuffler and the device: API errors as ``ErrorBody``
JSON and request-body limits.

Every error leaves a service as ``{"code": ..., "message": ...}`` (spec §4), including FastAPI's
own request-validation 422s, Starlette's 404/405, the 413 of the body-size limit and (logged) 500s
for anything unexpected.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from privbandit.services.common.errors import ServiceError, StoreUnavailable
from privbandit.shared.protocol.messages import ErrorBody

log = logging.getLogger(__name__)

BODY_TOO_LARGE = "body_too_large"

# Codes for errors raised by the framework rather than by our routes.
_DEFAULT_CODES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: BODY_TOO_LARGE,
    415: "unsupported_media_type",
    422: "invalid_request",
    500: "internal_error",
    503: "unavailable",
}

# Called with (request, status, code) for every error response (e.g. to count rejections).
ErrorHook = Callable[[Request, int, str], None]


class ApiError(StarletteHTTPException):
    """An HTTP error with a machine-readable ``code`` and a human ``message``."""

    def __init__(
        self, status_code: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(status_code=status_code, detail=message, headers=headers)
        self.code = code


def error_response(
    status_code: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    body = ErrorBody(code=code, message=message)
    return JSONResponse(body.model_dump(), status_code=status_code, headers=headers)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """A route's ``responses=`` for OpenAPI: each status documented as an ``ErrorBody``."""
    return {status: {"model": ErrorBody} for status in statuses}


def describe_errors(errors: list[dict[str, Any]], limit: int = 5) -> str:
    """A short human summary of pydantic errors; never echoes the (possibly huge) input."""
    parts = []
    for err in errors[:limit]:
        loc = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    more = len(errors) - limit
    if more > 0:
        parts.append(f"... and {more} more")
    return "; ".join(parts) or "invalid request"


# Seconds a client is asked to wait when the database is unreachable (a dropped connection is
# replaced at the next transaction; a restarting server takes seconds).
STORE_RETRY_AFTER = 2


def store_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the PostgreSQL server could not be reached or its connection was lost
    (psycopg's ``OperationalError`` or ``InterfaceError``, once ``run_tx``'s retries are spent):
    a condition to retry later (503 + Retry-After), not a fault of the service (500). psycopg is
    looked up, not imported: a service on SQLite never loads it, and cannot raise its errors."""
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(exc, psycopg.OperationalError
                                              | psycopg.InterfaceError)


def install_error_handlers(app: FastAPI, *, on_error: ErrorHook | None = None) -> None:
    """Render every error as ``ErrorBody`` JSON. ``on_error(request, status, code)`` sees every
    error response this installs (e.g. to count rejections)."""

    def respond(
        request: Request, status: int, code: str, message: str,
        headers: dict[str, str] | None = None,
    ) -> JSONResponse:
        if on_error is not None:
            on_error(request, status, code)
        return error_response(status, code, message, headers)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = getattr(exc, "code", None) or _DEFAULT_CODES.get(exc.status_code, "error")
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return respond(request, exc.status_code, code, message, getattr(exc, "headers", None))

    async def service_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ServiceError)
        return respond(request, exc.status, exc.code, exc.message, exc.headers)

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return respond(request, 422, "invalid_request", describe_errors(list(exc.errors())))

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        if store_unreachable(exc):
            log.warning("%s %s: the database is unreachable (%s); answered 503", request.method,
                        request.url.path, exc)
            return respond(request, StoreUnavailable.status, StoreUnavailable.default_code,
                           "the service's database is unreachable; retry later",
                           {"Retry-After": str(STORE_RETRY_AFTER)})
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return respond(request, 500, "internal_error", "internal error (logged on the server)")

    app.add_exception_handler(ServiceError, service_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, unexpected)


def report_json_bytes(ct_bytes: int) -> int:
    """Upper bound on the JSON size of one ``EncryptedReport`` whose ciphertext is ``ct_bytes``
    long (base64 expansion plus field names), doubled to tolerate pretty-printed clients."""
    b64 = 4 * ((ct_bytes + 2) // 3)
    return 2 * (b64 + 128 + 64)


class BodyLimitMiddleware:
    """Refuse request bodies above ``max_bytes`` with 413 ``body_too_large`` (as ``ErrorBody``),
    from the Content-Length header when present and while streaming otherwise, before parsing.

    ``max_bytes`` may be a function, evaluated per request (the shuffler's limit for Paillier
    uploads is known only once the analyzer's Paillier key is)."""

    def __init__(self, app: ASGIApp, max_bytes: int | Callable[[], int]) -> None:
        self.app = app
        self._max_bytes = max_bytes

    @property
    def max_bytes(self) -> int:
        limit = self._max_bytes
        return limit() if callable(limit) else limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes = self.max_bytes
        message = f"request body exceeds {max_bytes} bytes"
        length = Headers(scope=scope).get("content-length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            await error_response(413, BODY_TOO_LARGE, message)(scope, receive, send)
            return
        total = 0

        async def limited_receive() -> Message:
            nonlocal total
            msg = await receive()
            if msg["type"] == "http.request":
                total += len(msg.get("body", b""))
                if total > max_bytes:
                    # An HTTPException: FastAPI re-raises it from body parsing to our handler.
                    raise ApiError(413, BODY_TOO_LARGE, message)
            return msg

        await self.app(scope, limited_receive, send)
