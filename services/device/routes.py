"""The device's HTTP API (spec §4): decide, feedback, status, health, metrics. HTTP only; the
work is in ``decisions`` and ``runtime``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

from privbandit.services.common.body import body_openapi, json_response, parse_body
from privbandit.services.common.deps import get_runtime, runtime_of
from privbandit.services.common.health import health
from privbandit.services.device import decisions
from privbandit.services.device.runtime import DeviceRuntime
from privbandit.shared.protocol.messages import (
    DecideRequest,
    DecideResponse,
    DeviceStatus,
    ErrorBody,
    FeedbackRequest,
    FeedbackResponse,
)

router = APIRouter()

RuntimeDep = Annotated[DeviceRuntime, Depends(get_runtime)]
_DECIDE_BODY = parse_body(DecideRequest)
_FEEDBACK_BODY = parse_body(FeedbackRequest)

_ERRORS: dict[int | str, dict[str, Any]] = {  # FastAPI's ``responses`` type
    404: {"model": ErrorBody, "description": "unknown task or decision"},
    409: {"model": ErrorBody, "description": "feedback already given for this decision"},
    422: {"model": ErrorBody, "description": "malformed request"},
}


@router.post(
    "/v1/tasks/{task}/decide",
    response_model=DecideResponse,
    responses={k: v for k, v in _ERRORS.items() if k != 409},
    openapi_extra=body_openapi(DecideRequest),
)
async def decide(task: str, request: Request) -> Response:
    """Choose an arm for K per-arm feature vectors with the cached model (no network round trip).

    Only the chosen arm's vector is kept, on this device, until the feedback arrives.
    """
    body = await _DECIDE_BODY(request)  # the body and runtime without dependencies (runtime_of)
    return json_response(await decisions.decide(runtime_of(request), task, body.features))


@router.post(
    "/v1/tasks/{task}/feedback",
    status_code=202,
    response_model=FeedbackResponse,
    responses={
        **_ERRORS,
        429: {"model": ErrorBody, "description": "the outbox is full (Retry-After); nothing "
              "was stored, the decision stays open"},
        503: {"model": ErrorBody, "description": "the analyzer's key is not known yet"},
    },
    openapi_extra=body_openapi(FeedbackRequest),
)
async def feedback(task: str, request: Request) -> Response:
    """Randomise (x, r) locally, encrypt it to the analyzer and queue it durably for the shuffler.

    A ``reports`` task seals the randomized report with HPKE; a ``paillier`` task encrypts only
    its coordinate counts under the analyzer's Paillier key (the shuffler will add them up).
    202 means the encrypted report is in the device's durable outbox; it reaches the shuffler in
    the background. The decision's feature vector is erased in the same transaction. No network
    round trip happens here: the keys come from the background fetchers.
    """
    body = await _FEEDBACK_BODY(request)  # as in ``decide``
    return json_response(await decisions.give_feedback(
        runtime_of(request), task, body.decision_id, body.reward, body.epsilon, body.losses,
        body.user), 202)


@router.get("/v1/status", response_model=DeviceStatus)
async def status(runtime: RuntimeDep) -> DeviceStatus:
    c = runtime.store.counters
    return DeviceStatus(
        tasks=runtime.cache.versions(),
        feedbacks=c.feedbacks,
        outbox_pending=c.outbox_pending,
        uploaded=c.uploaded,
        dropped=c.dropped,
        withheld=c.withheld,
    )


@router.get("/healthz", responses={503: {"model": ErrorBody}})
async def healthz(runtime: RuntimeDep) -> Response:
    """200 once the analyzer's keys and every task's model are cached; 503 while starting."""
    return health("device", runtime.readiness, runtime.health())


@router.get("/metrics")
async def metrics(runtime: RuntimeDep) -> Response:
    return runtime.metrics.response()
