"""The services' logs and request ids (issue 45 item 9).

Logs: one line per record, as text (the default) or, with ``log_format = "json"``
(``PRIVBANDIT_LOG_FORMAT=json``), one JSON object per line (python-json-logger): ``time``,
``level``, ``logger``, ``message``, ``service`` and ``request_id``, for a log collector to index.

Request ids: every service app reads the ``X-Request-ID`` header of a request (a UUID4; any
other value is replaced by a fresh one, so a client cannot write arbitrary text into the logs),
makes one when there is none, answers with it and puts it on every log record written while the
request is handled (asgi-correlation-id's middleware and context variable). The services' HTTP
clients send the id of the request being handled with each call they make for it
(``request_id_hook``), so a call from device to shuffler, or shuffler to analyzer, is one id in
both services' logs. A call made outside any request (the device's background uploads, the
shuffler's batch deliveries) gets an id of its own, logged by the caller at debug level.

Deliberately not carried *across* the shuffle: the shuffler's deliveries to the analyzer never
carry the id of a device's upload, even when a delivery is started while an upload is handled
(``propagate=False`` on the shuffler's analyzer client). An id that ran from a device's upload to
the batch it ended up in would link a report to its sender in the logs of the two parties the
shuffle model keeps apart (spec: the analyzer sees only shuffled, unlinkable batches).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable

import httpx
from asgi_correlation_id import CorrelationIdFilter, CorrelationIdMiddleware, correlation_id
from pythonjsonlogger.json import JsonFormatter

REQUEST_ID = "X-Request-ID"
TEXT_FORMAT = "%(asctime)s %(service)s %(name)s %(levelname)s [%(correlation_id)s] %(message)s"
JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(message)s %(service)s %(correlation_id)s"

log = logging.getLogger(__name__)

__all__ = ["REQUEST_ID", "CorrelationIdMiddleware", "current_request_id", "request_id_hook",
           "setup_logging"]


class _ServiceFilter(logging.Filter):
    """Names the service on every record (several services may share one log collector)."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def filter(self, record: logging.LogRecord) -> bool:
        record.service = self.service
        return True


def setup_logging(service: str, level: str, fmt: str = "text") -> logging.Handler:
    """Log records of ``level`` and above to stderr, as ``fmt`` (``text`` or ``json``), each
    with the service's name and the id of the request being handled (``-`` outside one); the
    handler installed on the root logger."""
    handler = logging.StreamHandler()
    handler.addFilter(CorrelationIdFilter(default_value="-"))
    handler.addFilter(_ServiceFilter(service))
    if fmt == "json":
        handler.setFormatter(JsonFormatter(
            JSON_FIELDS, rename_fields={"asctime": "time", "levelname": "level", "name": "logger",
                                        "correlation_id": "request_id"}))
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # httpx logs every request at INFO: one line per upload, poll or batch delivery is noise,
    # and costs time.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return handler


def current_request_id() -> str | None:
    """The id of the request being handled in this context, if any."""
    return correlation_id.get()


def request_id_hook(*, propagate: bool = True) -> Callable[[httpx.Request], Awaitable[None]]:
    """An httpx request hook that sends an ``X-Request-ID`` with every call: the id of the
    request being handled (``propagate``), else a fresh UUID4 (logged at debug level, so that
    the caller's log names the id the callee's log shows)."""

    async def hook(request: httpx.Request) -> None:
        if REQUEST_ID in request.headers:
            return
        rid = current_request_id() if propagate else None
        if rid is None:
            rid = uuid.uuid4().hex
            log.debug("%s %s as request %s", request.method, request.url.path, rid)
        request.headers[REQUEST_ID] = rid

    return hook
