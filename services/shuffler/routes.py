"""HTTP routes of the shuffler (spec §4): HTTP only; the work is in ``intake`` and ``runtime``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

from fastapi import APIRouter, Depends, Request, Response
from fastapi.concurrency import run_in_threadpool

from services.common.body import body_openapi, json_response, parse_body
from services.common.deps import get_runtime, lookup_task, runtime_of
from services.common.health import health
from services.common.web import error_responses
from services.shuffler.runtime import ShufflerRuntime
from services.shuffler.store import AcceptResult
from services.shuffler.tasks import TaskSpec
from shared.protocol.messages import ReportsAccepted, ReportUpload, ShufflerStatus
from shared.protocol.secure_sum import SecureSumUpload

router = APIRouter()

RuntimeDep = Annotated[ShufflerRuntime, Depends(get_runtime)]
U = TypeVar("U", ReportUpload, SecureSumUpload)
_REPORTS_BODY = parse_body(ReportUpload)
_COUNTS_BODY = parse_body(SecureSumUpload)

ERRORS = error_responses(404, 409, 413, 422, 429, 503)


@router.get("/healthz", responses=error_responses(503))
async def healthz(runtime: RuntimeDep) -> Response:
    """200 once intake and delivery run and any secure-sum key is fetched; 503 while starting."""
    return health("shuffler", runtime.readiness, runtime.health())


@router.get("/v1/status")
async def status(runtime: RuntimeDep) -> ShufflerStatus:
    return await run_in_threadpool(runtime.status)


@router.get("/metrics")
async def metrics(runtime: RuntimeDep) -> Response:
    await run_in_threadpool(runtime.status)  # refreshes the pending gauges
    return runtime.metrics.response()


def _accepted(result: AcceptResult) -> Response:
    body = ReportsAccepted(accepted=result.accepted, duplicates=result.duplicates)
    return json_response(body, 202)


async def _upload(
    task: str, request: Request, parse: Callable[[Request], Awaitable[U]]
) -> tuple[U, TaskSpec, ShufflerRuntime]:
    """An upload route's body, task and runtime, read without FastAPI dependencies
    (``runtime_of``) and in the order the dependencies had: a malformed body is refused before
    an unknown task."""
    upload = await parse(request)
    runtime: ShufflerRuntime = runtime_of(request)
    return upload, lookup_task(runtime.tasks, task, "shuffler"), runtime


@router.post("/v1/tasks/{task}/reports", status_code=202, responses=ERRORS,
             openapi_extra=body_openapi(ReportUpload))
async def post_reports(task: str, request: Request) -> Response:
    """Accept ciphertexts; 202 only once they are durable. Identical ciphertexts are dropped."""
    upload, spec, runtime = await _upload(task, request, _REPORTS_BODY)
    return _accepted(await runtime.intake.accept_reports(spec, upload.reports))


@router.post("/v1/tasks/{task}/encrypted-counts", status_code=202, responses=ERRORS,
             openapi_extra=body_openapi(SecureSumUpload))
async def post_encrypted_counts(task: str, request: Request) -> Response:
    """Accept Paillier-encrypted counts of a secure-sum task; 202 only once they are durable.
    Identical ciphertexts are dropped. Each batch of l is released only as its encrypted sum."""
    upload, spec, runtime = await _upload(task, request, _COUNTS_BODY)
    return _accepted(await runtime.intake.accept_counts(spec, upload.reports))
