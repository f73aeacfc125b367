"""The device's HTTP API (spec §4): decide, feedback, status, health, metrics."""

from __future__ import annotations

import secrets
import time

import numpy as np
from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.device.app import ApiError, DeviceDep, error_response
from services.device.store import DecisionNotFound, DecisionUsed
from shared.crypto import pack_report, seal
from shared.protocol import (
    DecideRequest,
    DecideResponse,
    DeviceStatus,
    ErrorBody,
    FeedbackRequest,
    FeedbackResponse,
)

router = APIRouter()

_ERRORS = {
    404: {"model": ErrorBody, "description": "unknown task or decision"},
    409: {"model": ErrorBody, "description": "feedback already given for this decision"},
    422: {"model": ErrorBody, "description": "malformed request"},
}


@router.post(
    "/v1/tasks/{task}/decide",
    response_model=DecideResponse,
    responses={k: v for k, v in _ERRORS.items() if k != 409},
)
async def decide(task: str, body: DecideRequest, device: DeviceDep) -> DecideResponse:
    """Choose an arm for K per-arm feature vectors with the cached model (no network round trip).

    Only the chosen arm's vector is kept, on this device, until the feedback arrives.
    """
    started = time.perf_counter()
    cfg = device.task(task)
    d, K, L = cfg.policy.d, cfg.K, cfg.policy.L
    feats = body.features
    if len(feats) != K:
        raise ApiError(422, "wrong_arms", f"task {task} has K = {K} arms, got {len(feats)} rows")
    for i, row in enumerate(feats):
        if len(row) != d:
            raise ApiError(
                422, "wrong_dimension", f"task {task} has d = {d}; row {i} has {len(row)}"
            )
    X = np.asarray(feats, dtype=float)
    if not np.isfinite(X).all():  # the schema already forbids NaN/inf; keep numpy honest too
        raise ApiError(422, "not_finite", "features must be finite numbers")
    with np.errstate(over="ignore"):
        norms = np.linalg.norm(X, axis=1)
    bad = np.flatnonzero(~(norms <= L * (1 + 1e-9)))
    if bad.size:
        raise ApiError(
            422, "feature_norm",
            f"every feature vector must satisfy ||x|| <= L = {L}; row {int(bad[0])} has "
            f"||x|| = {float(norms[bad[0]]):.6g}",
        )
    model = device.cache.model(task)
    action = int(model.decide(X[None])[0])
    decision_id = secrets.token_hex(16)
    await device.store.add_decision(decision_id, task, X[action])
    device.metrics.decisions.labels(task).inc()
    device.metrics.decide_seconds.observe(time.perf_counter() - started)
    return DecideResponse(decision_id=decision_id, action=action, model_version=model.version)


@router.post(
    "/v1/tasks/{task}/feedback",
    status_code=202,
    response_model=FeedbackResponse,
    responses={
        **_ERRORS,
        501: {"model": ErrorBody, "description": "the task's aggregation is not supported"},
        503: {"model": ErrorBody, "description": "no HPKE key yet"},
    },
)
async def feedback(task: str, body: FeedbackRequest, device: DeviceDep) -> FeedbackResponse:
    """Randomise (x, r) locally, seal it to the analyzer and queue it durably for the shuffler.

    202 means the sealed report is in the device's durable outbox; it reaches the shuffler in the
    background. The decision's feature vector is erased in the same transaction.
    """
    cfg = device.task(task)
    if cfg.aggregation != "reports":
        # Secure summation needs additively homomorphic encryption of the randomized counts,
        # which this device does not implement; refuse before touching any state.
        raise ApiError(
            501, "unsupported_aggregation",
            f"task {task} uses {cfg.aggregation} aggregation; this device sends HPKE reports only",
        )
    hpke, public_key = device.cache.hpke, device.cache.hpke_public_key
    if hpke is None or public_key is None:
        raise ApiError(503, "no_hpke_key", "the analyzer's HPKE key is not known yet; retry soon")
    try:
        x = await device.store.get_decision(body.decision_id, task)
    except DecisionNotFound:
        raise ApiError(
            404, "unknown_decision", f"no open decision {body.decision_id} for task {task}"
        ) from None
    except DecisionUsed:
        raise ApiError(
            409, "decision_used", f"feedback for decision {body.decision_id} was already given"
        ) from None
    randomizer = device.randomizers[task]
    try:
        row = randomizer.randomize(x[None, :], np.array([body.reward]), device.rng)[0]
        _, plaintext = pack_report(randomizer.to_bytes(row))
    except ValueError as exc:  # cannot happen for a vector accepted by decide; stay a 4xx anyway
        raise ApiError(422, "invalid_report", str(exc)) from None
    report = seal(public_key, hpke.key_id, task, plaintext)
    try:
        await device.store.complete_feedback(body.decision_id, task, report.model_dump_json())
    except DecisionUsed:  # a concurrent feedback for the same decision won the race
        raise ApiError(
            409, "decision_used", f"feedback for decision {body.decision_id} was already given"
        ) from None
    except DecisionNotFound:
        raise ApiError(
            404, "unknown_decision", f"no open decision {body.decision_id} for task {task}"
        ) from None
    device.uploader.wake()
    device.metrics.feedbacks.labels(task).inc()
    return FeedbackResponse(queued=True, outbox_pending=device.store.counters.outbox_pending)


@router.get("/v1/status", response_model=DeviceStatus)
async def status(device: DeviceDep) -> DeviceStatus:
    c = device.store.counters
    return DeviceStatus(
        tasks=device.cache.versions(),
        feedbacks=c.feedbacks,
        outbox_pending=c.outbox_pending,
        uploaded=c.uploaded,
    )


@router.get("/healthz")
async def healthz(device: DeviceDep) -> Response:
    """200 once the analyzer's key and every task's model are cached; 503 while starting."""
    if not device.cache.ready:
        return error_response(
            503, "starting", "waiting for the analyzer: " + ", ".join(device.cache.missing())
        )
    return JSONResponse(
        {
            "status": "ok",
            "service": "device",
            "models": device.cache.versions(),
            "streaming": sorted(device.cache.streaming),
            "outbox_pending": device.store.counters.outbox_pending,
            "last_upload_error": device.uploader.last_error,
        }
    )


@router.get("/metrics")
async def metrics(device: DeviceDep) -> Response:
    return Response(generate_latest(device.metrics.registry), media_type=CONTENT_TYPE_LATEST)
