"""HTTP routes of the shuffler (spec §4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.common.web import ApiError
from services.shuffler.forwarder import Committer, Forwarder, ShuttingDown
from services.shuffler.metrics import ShufflerMetrics
from services.shuffler.secure_sum import PaillierState
from services.shuffler.store import Store
from shared.crypto.hpke import ENC_BYTES
from shared.protocol.messages import (
    EncryptedReport,
    ErrorBody,
    ReportsAccepted,
    ReportUpload,
    ShufflerStatus,
    TaskQueueStatus,
    b64decode,
)
from shared.protocol.secure_sum import EncryptedCounts, SecureSumUpload
from shared.settings import Settings, TaskConfig


@dataclass(frozen=True)
class TaskSpec:
    """What the shuffler knows of a task: public parameters only."""

    config: TaskConfig
    # Every HPKE report of the task has exactly this ciphertext length; for a secure-sum task an
    # upper bound (the exact length depends on the analyzer's Paillier key).
    ct_bytes: int

    @property
    def id(self) -> str:
        return self.config.id


@dataclass
class ShufflerRuntime:
    settings: Settings
    store: Store
    tasks: dict[str, TaskSpec]
    committer: Committer
    forwarder: Forwarder
    metrics: ShufflerMetrics
    paillier: PaillierState


router = APIRouter()


def get_runtime(request: Request) -> ShufflerRuntime:
    return request.app.state.runtime


RuntimeDep = Annotated[ShufflerRuntime, Depends(get_runtime)]


def get_task(task: str, runtime: RuntimeDep) -> TaskSpec:
    spec = runtime.tasks.get(task)
    if spec is None:
        raise ApiError(404, "unknown_task", f"no task {task[:64]!r} on this shuffler")
    return spec


TaskDep = Annotated[TaskSpec, Depends(get_task)]

ERRORS = {
    404: {"model": ErrorBody},
    409: {"model": ErrorBody},
    413: {"model": ErrorBody},
    422: {"model": ErrorBody},
    503: {"model": ErrorBody},
}


def _wrong_transport(spec: TaskSpec) -> ApiError:
    """409: the upload uses the other shuffle transport than the task is configured with."""
    if spec.config.aggregation == "secure-sum":
        hint = (f"it takes Paillier-encrypted counts (SecureSumUpload) at "
                f"POST /v1/tasks/{spec.id}/encrypted-counts")
    else:
        hint = f"it takes HPKE reports (ReportUpload) at POST /v1/tasks/{spec.id}/reports"
    return ApiError(
        409,
        "aggregation_mismatch",
        f"task {spec.id!r} uses {spec.config.aggregation} aggregation: {hint}; "
        "no report was stored",
    )


@router.get("/healthz")
async def healthz(runtime: RuntimeDep) -> dict[str, object]:
    body: dict[str, object] = {
        "status": "ok", "service": "shuffler", "tasks": sorted(runtime.tasks)
    }
    if runtime.paillier.needed:
        # Secure-sum intake opens once the analyzer's Paillier key is known.
        body["secure_sum_ready"] = runtime.paillier.config is not None
    return body


def _status(runtime: ShufflerRuntime) -> ShufflerStatus:
    out = []
    for spec in runtime.tasks.values():
        c = runtime.store.counts(spec.id)
        runtime.metrics.pending.labels(spec.id).set(c.pending)
        out.append(
            TaskQueueStatus(
                task=spec.id,
                batch_size=spec.config.batch_size,
                pending=c.pending,
                accepted=c.accepted,
                batches_formed=c.batches_formed,
                batches_acknowledged=c.batches_acknowledged,
                batches_in_flight=c.batches_formed - c.batches_acknowledged,
                last_error=runtime.forwarder.last_error.get(spec.id),
            )
        )
    return ShufflerStatus(tasks=out)


@router.get("/v1/status")
async def status(runtime: RuntimeDep) -> ShufflerStatus:
    return await run_in_threadpool(_status, runtime)


@router.get("/metrics")
async def metrics(runtime: RuntimeDep) -> Response:
    await run_in_threadpool(_status, runtime)  # refreshes the pending gauges
    return Response(generate_latest(runtime.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.post("/v1/tasks/{task}/reports", status_code=202, responses=ERRORS)
async def post_reports(upload: ReportUpload, spec: TaskDep, runtime: RuntimeDep) -> JSONResponse:
    """Accept ciphertexts; 202 only once they are durable. Identical ciphertexts are dropped."""
    if spec.config.aggregation != "reports":
        raise _wrong_transport(spec)
    # All reports of a task have one public length; anything else cannot be a report of this
    # task (the analyzer would reject it), and equal lengths leak nothing in the batch.
    for i, report in enumerate(upload.reports):
        enc, ct = len(b64decode(report.enc)), len(b64decode(report.ct))
        if enc != ENC_BYTES or ct != spec.ct_bytes:
            raise ApiError(
                422,
                "bad_report_size",
                f"reports[{i}]: task {spec.id!r} takes enc of {ENC_BYTES} bytes and ct of "
                f"{spec.ct_bytes} bytes, got {enc} and {ct}; no report was stored",
            )
    return await _accept(runtime, spec, upload.reports)


@router.post("/v1/tasks/{task}/encrypted-counts", status_code=202, responses=ERRORS)
async def post_encrypted_counts(
    upload: SecureSumUpload, spec: TaskDep, runtime: RuntimeDep
) -> JSONResponse:
    """Accept Paillier-encrypted counts of a secure-sum task; 202 only once they are durable.
    Identical ciphertexts are dropped. Each batch of l is released only as its encrypted sum."""
    if spec.config.aggregation != "secure-sum":
        raise _wrong_transport(spec)
    # Key id and ciphertexts in Z*_{n²} of the task's length, checked before anything is stored:
    # one bad ciphertext in a batch would make its whole sum undecryptable.
    await run_in_threadpool(runtime.paillier.check_upload, spec.id, upload.reports)
    return await _accept(runtime, spec, upload.reports)


async def _accept(
    runtime: ShufflerRuntime,
    spec: TaskSpec,
    reports: list[EncryptedReport] | list[EncryptedCounts],
) -> JSONResponse:
    """Make checked reports durable (group commit) and answer 202 ``ReportsAccepted``."""
    try:
        result = await runtime.committer.submit(spec.id, reports)
    except ShuttingDown as exc:
        raise ApiError(503, "unavailable", str(exc)) from exc
    except Exception as exc:
        raise ApiError(
            503, "storage_error", "reports could not be stored; retry later (none was accepted)"
        ) from exc
    body = ReportsAccepted(accepted=result.accepted, duplicates=result.duplicates)
    return JSONResponse(body.model_dump(), status_code=202)
