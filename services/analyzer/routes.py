"""HTTP routes of the analyzer (spec §4)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse
from pydantic import BaseModel
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import AppStatus
from starlette.types import Receive, Scope, Send

from privbandit.services.analyzer import status
from privbandit.services.analyzer.auth import require_shuffler
from privbandit.services.analyzer.errors import TooManyStreams
from privbandit.services.analyzer.runtime import AnalyzerRuntime
from privbandit.services.analyzer.tasks import TaskRuntime
from privbandit.services.analyzer.transports import TRANSPORTS
from privbandit.services.analyzer.transports.base import AnalyzerTransport
from privbandit.services.common.deps import get_runtime, task_dependency
from privbandit.services.common.health import health
from privbandit.services.common.http_client import service_client
from privbandit.services.common.web import error_responses
from privbandit.shared.protocol.messages import (
    AnyModelMessage,
    BatchAck,
    HpkeConfig,
    PrivacyReport,
    TaskInfo,
)

log = logging.getLogger(__name__)

router = APIRouter()

RuntimeDep = Annotated[AnalyzerRuntime, Depends(get_runtime)]
TaskDep = Annotated[TaskRuntime, Depends(task_dependency("analyzer"))]


ERRORS = error_responses(401, 404, 409, 413, 422)
# The status page's wait for another service: one that does not answer by then is shown so.
PEER_TIMEOUT = 1.0

# What a browser client reads (issue 41; docs/web-client.md): the public configuration, the
# model (poll and stream) and the ledger. Opened to ``browser_origins`` by CORS, nothing else.
BROWSER_ROUTES: dict[str, tuple[str, ...]] = {
    "/v1/hpke-config": ("GET",),
    "/v1/tasks/{task}": ("GET",),
    "/v1/tasks/{task}/model": ("GET",),
    "/v1/tasks/{task}/model/stream": ("GET",),
    "/v1/tasks/{task}/privacy": ("GET",),
}


@router.get("/healthz", responses=error_responses(503))
async def healthz(runtime: RuntimeDep) -> Response:
    """200 once the keys and tasks are loaded and batch ingest runs; 503 ``starting`` before
    (and while stopping)."""
    return health("analyzer", runtime.readiness, {"tasks": sorted(runtime.tasks)})


@router.get("/metrics")
async def metrics(runtime: RuntimeDep) -> Response:
    # In a worker thread: the per-task gauges read the ledgers (``status.TaskCollector``).
    return await run_in_threadpool(runtime.metrics.response)


@router.get("/status", response_class=HTMLResponse)
async def status_page(
    runtime: RuntimeDep,
    refresh: Annotated[int, Query(ge=0, le=3600, description="seconds between the page's "
                                  "reloads; 0: never")] = 10,
) -> HTMLResponse:
    """Read-only HTML status page for an operator: readiness, the other services' health, each
    task's model version, batches, reports counted, refused, queued and pending at the shuffler,
    its last batch, and its privacy ledger. No scripts and no external assets
    (``services.analyzer.status``)."""
    settings = runtime.settings
    async with service_client(settings.analyzer.url, PEER_TIMEOUT) as client:
        tasks, others = await asyncio.gather(run_in_threadpool(status.snapshot, runtime),
                                             status.peers(settings, client))
    page = status.render(tasks, runtime.readiness.missing(), others=others, refresh=refresh)
    return HTMLResponse(page, headers={"Content-Security-Policy": status.CSP,
                                       "Cache-Control": "no-store",
                                       "X-Content-Type-Options": "nosniff"})


@router.get("/v1/hpke-config")
async def hpke_config(runtime: RuntimeDep) -> HpkeConfig:
    return runtime.keys.hpke_config()


@router.get("/v1/tasks/{task}", responses=ERRORS)
async def get_task_info(rt: TaskDep) -> TaskInfo:
    return rt.info()


def _etag_matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    for candidate in if_none_match.split(","):
        candidate = candidate.strip()
        if candidate == "*":
            return True
        if candidate.startswith("W/"):
            candidate = candidate[2:]
        if candidate == etag:
            return True
    return False


@router.get(
    "/v1/tasks/{task}/model",
    response_model=AnyModelMessage,
    responses={**ERRORS, 304: {"description": "not modified"}},
)
async def get_model(
    rt: TaskDep, if_none_match: Annotated[str | None, Header()] = None
) -> Response:
    """The task's published model: (θ̃, V, β) for a linear task, an ``ArmModelMessage`` for a
    multi-armed one, with its version as ETag; 304 (no body) when ``If-None-Match`` names it. The
    body is serialised once per publication (``TaskRuntime.published_json``)."""
    etag = rt.etag
    if _etag_matches(if_none_match, etag):
        return Response(status_code=304, headers={"ETag": etag})
    return Response(rt.published_json(), media_type="application/json",
                    headers={"ETag": etag, "Cache-Control": "no-cache"})


# The streams end by one path only: ``request_shutdown`` closes the feeds (``server.Server``),
# and each generator returns. sse-starlette's own drain would also cancel every stream of the
# event loop once any uvicorn server whose signal handler it finds is stopping (several apps
# share a loop in tests and embeddings), so it is off.
AppStatus.enable_automatic_graceful_drain = False  # = disable_automatic_graceful_drain()

# The first pause (milliseconds) an EventSource client takes before reconnecting a dropped stream
# (the device's cache doubles it from there, ``services.device.cache``).
STREAM_RETRY_MS = 2000


def _keepalive() -> ServerSentEvent:
    return ServerSentEvent(comment="keep-alive", sep="\n")


class _SlotStream(EventSourceResponse):
    """sse-starlette's event stream holding one of the analyzer's stream slots (and counted in
    its task's ``sse_clients`` gauge): both released when the response ends, however it ends
    (finished, client gone, cancelled, failed) — even before its generator has started, which
    the generator's own ``finally`` would not see."""

    def __init__(self, content: AsyncIterator[ServerSentEvent], *, ping: float,
                 on_close: Callable[[], None]) -> None:
        # ``sep``: "\n", the bytes the analyzer always sent; ``Cache-Control: no-cache`` as
        # before (the library's default is no-store); it adds ``X-Accel-Buffering: no``.
        super().__init__(content, headers={"Cache-Control": "no-cache"}, ping=ping, sep="\n",
                         ping_message_factory=_keepalive)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


@router.get("/v1/tasks/{task}/model/stream", responses={**ERRORS, **error_responses(503)})
async def stream_model(
    rt: TaskDep, runtime: RuntimeDep,
    last_event_id: Annotated[str | None, Header(
        description="the id (model version) of the last event a reconnecting client received: "
                    "that model is not sent again")] = None,
) -> EventSourceResponse:
    """Server-Sent Events (sse-starlette): a ``retry:`` hint, then the current model on connect
    (unless ``Last-Event-ID`` names it: the client holds it), then every new version, and a
    keep-alive comment every ``sse_keepalive`` seconds. Each event's ``id`` is its model version.

    At most ``limits.model_streams`` streams are open at once (all tasks); one more is refused
    with 503 ``too_many_streams`` and a Retry-After: poll ``GET /v1/tasks/{task}/model`` with
    ``If-None-Match`` meanwhile."""
    slots = runtime.streams
    if not slots.acquire():
        runtime.metrics.streams_refused.labels(rt.id).inc()
        raise TooManyStreams(
            f"{slots.limit} model streams are open (limits.model_streams); poll "
            f"GET /v1/tasks/{rt.id}/model with If-None-Match, or retry the stream later",
            runtime.settings.limits.retry_after,
        )
    feed = rt.feed
    keepalive = runtime.sse_keepalive
    gauge = runtime.metrics.sse_clients.labels(rt.id)
    gauge.inc()

    def closed() -> None:
        gauge.dec()
        slots.release()

    async def events() -> AsyncIterator[ServerSentEvent]:
        # Reconnect hint for EventSource clients (milliseconds).
        yield ServerSentEvent(retry=STREAM_RETRY_MS, sep="\n")
        # A reconnecting client's last version: not sent again (a lower current version,
        # after the analyzer lost its state, differs and is sent).
        sent = (int(last_event_id) if last_event_id and last_event_id.isdigit()
                and len(last_event_id) <= 19 else -1)
        # Ends when the feed closes (service shutdown, ``request_shutdown``): the response
        # then finishes cleanly and the server's graceful stop can complete.
        while not feed.closed:
            current = feed.current
            if current.version != sent:
                sent = current.version
                yield ServerSentEvent(current.model_dump_json(), event="model",
                                      id=str(current.version), sep="\n")
                continue
            await feed.wait(keepalive)

    return _SlotStream(events(), ping=keepalive, on_close=closed)


def add_batch_route(transport: AnalyzerTransport) -> None:
    """``POST /v1/tasks/{task}/<endpoint>``: what the shuffler forwards for the transport's
    tasks, parsed as its ``upload`` message and submitted to the task's decoder (which refuses
    another transport's upload with 409)."""

    async def post(upload: BaseModel, rt: TaskDep, runtime: RuntimeDep) -> BatchAck:
        return await runtime.submit(rt, upload)

    # The body's model is the transport's (the annotation FastAPI parses the body with).
    post.__annotations__ = {**post.__annotations__, "upload": transport.upload}
    router.add_api_route(
        f"/v1/tasks/{{task}}/{transport.endpoint}", post, methods=["POST"],
        name=f"post_{transport.endpoint.replace('-', '_')}", description=transport.summary,
        responses={**ERRORS, **error_responses(503)}, dependencies=[Depends(require_shuffler)],
    )


for _transport in TRANSPORTS.values():
    add_batch_route(_transport)
    _transport.add_routes(router)  # e.g. the public parameters devices fetch


@router.get("/v1/tasks/{task}/privacy", responses=ERRORS)
async def get_privacy(rt: TaskDep, runtime: RuntimeDep) -> PrivacyReport:
    ledger = await run_in_threadpool(runtime.ledger, rt)
    per_person = await run_in_threadpool(runtime.person, rt, ledger)
    return PrivacyReport(
        task=rt.id,
        ledger=ledger,
        per_person=per_person,
        reports_counted=rt.reports_counted,
        reports_refused=rt.reports_refused,
        batches=rt.batches,
        model_version=rt.published.version,
    )
