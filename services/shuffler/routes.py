"""HTTP routes of the shuffler (spec §4): HTTP only; the work is in ``intake`` and ``runtime``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.concurrency import run_in_threadpool

from privbandit.services.common.body import body_openapi, json_response, parse_body
from privbandit.services.common.deps import get_runtime, lookup_task, runtime_of
from privbandit.services.common.health import health
from privbandit.services.common.web import error_responses
from privbandit.services.shuffler.runtime import ShufflerRuntime
from privbandit.services.shuffler.store import AcceptResult
from privbandit.services.shuffler.tasks import TaskSpec
from privbandit.services.shuffler.transports import TRANSPORTS
from privbandit.services.shuffler.transports.base import ShufflerTransport
from privbandit.shared.protocol.messages import ReportsAccepted, ShufflerStatus

router = APIRouter()

RuntimeDep = Annotated[ShufflerRuntime, Depends(get_runtime)]

ERRORS = error_responses(404, 409, 413, 422, 429, 503)

# The uploads a browser client makes (issue 41: HPKE reports and Prio3 reports; no Paillier
# in the browser). Opened to ``browser_origins`` by CORS, nothing else.
BROWSER_ROUTES: dict[str, tuple[str, ...]] = {
    "/v1/tasks/{task}/reports": ("POST",),
    "/v1/tasks/{task}/prio3-reports": ("POST",),
}


@router.get("/healthz", responses=error_responses(503))
async def healthz(runtime: RuntimeDep) -> Response:
    """200 once intake and delivery run and any Paillier key is fetched; 503 while starting."""
    return health("shuffler", runtime.readiness, runtime.health())


@router.get("/v1/status")
async def status(runtime: RuntimeDep) -> ShufflerStatus:
    return await run_in_threadpool(runtime.status)


@router.get("/metrics")
async def metrics(runtime: RuntimeDep) -> Response:
    await run_in_threadpool(runtime.status)  # refreshes the pending gauges
    return runtime.metrics.response()


def _accepted(result: AcceptResult) -> Response:
    body = ReportsAccepted(accepted=result.accepted, duplicates=result.duplicates,
                           refused=result.refused)
    return json_response(body, 202)


async def _upload(
    task: str, request: Request, parse: Callable[[Request], Awaitable[Any]]
) -> tuple[Any, TaskSpec, ShufflerRuntime]:
    """An upload route's body, task and runtime, read without FastAPI dependencies
    (``runtime_of``) and in the order the dependencies had: a malformed body is refused before
    an unknown task."""
    upload = await parse(request)
    runtime: ShufflerRuntime = runtime_of(request)
    return upload, lookup_task(runtime.tasks, task, "shuffler"), runtime


def add_upload_route(transport: type[ShufflerTransport]) -> None:
    """``POST /v1/tasks/{task}/<endpoint>``: a device's upload of the transport's reports,
    parsed as its route's ``upload`` message and accepted by intake (409 for a task of another
    transport)."""
    route = transport.route
    parse = parse_body(route.upload)
    name = transport.name

    async def post(task: str, request: Request) -> Response:
        upload, spec, runtime = await _upload(task, request, parse)
        return _accepted(await runtime.intake.accept(name, spec, upload.reports))

    router.add_api_route(
        f"/v1/tasks/{{task}}/{route.endpoint}", post, methods=["POST"], status_code=202,
        name=f"post_{route.endpoint.replace('-', '_')}", description=route.summary,
        responses=ERRORS, openapi_extra=body_openapi(route.upload),
    )


for _transport in TRANSPORTS.values():
    add_upload_route(_transport)
