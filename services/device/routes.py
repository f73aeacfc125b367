"""The device's HTTP API (spec §4): decide, feedback, status, health, metrics."""

from __future__ import annotations

import asyncio
import secrets
import time

import numpy as np
from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.common.web import ApiError, error_response
from services.device.app import DeviceDep
from services.device.store import REPORTS, SECURE_SUM, DecisionNotFound, DecisionUsed
from shared.crypto.hpke import pack_report, seal
from shared.protocol.messages import (
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


def _decision_error(exc: Exception, task: str, decision_id: str) -> ApiError:
    if isinstance(exc, DecisionUsed):
        return ApiError(
            409, "decision_used", f"feedback for decision {decision_id} was already given"
        )
    return ApiError(404, "unknown_decision", f"no open decision {decision_id} for task {task}")


@router.post(
    "/v1/tasks/{task}/feedback",
    status_code=202,
    response_model=FeedbackResponse,
    responses={
        **_ERRORS,
        503: {"model": ErrorBody, "description": "the analyzer's key is not known yet"},
    },
)
async def feedback(task: str, body: FeedbackRequest, device: DeviceDep) -> FeedbackResponse:
    """Randomise (x, r) locally, encrypt it to the analyzer and queue it durably for the shuffler.

    A ``reports`` task seals the randomized report with HPKE; a ``secure-sum`` task encrypts only
    its coordinate counts under the analyzer's Paillier key (the shuffler will add them up).
    202 means the encrypted report is in the device's durable outbox; it reaches the shuffler in
    the background. The decision's feature vector is erased in the same transaction. No network
    round trip happens here: the keys come from the background fetchers.
    """
    cfg = device.task(task)
    secure = cfg.aggregation == "secure-sum"
    key = device.keys.get(task) if secure else None
    hpke, public_key = device.cache.hpke, device.cache.hpke_public_key
    if secure and key is None:
        raise ApiError(
            503, "no_paillier_key",
            f"the analyzer's Paillier key for task {task} is not known yet; retry soon",
        )
    if not secure and (hpke is None or public_key is None):
        raise ApiError(503, "no_hpke_key", "the analyzer's HPKE key is not known yet; retry soon")
    try:
        x = await device.store.get_decision(body.decision_id, task)
    except (DecisionNotFound, DecisionUsed) as exc:
        raise _decision_error(exc, task, body.decision_id) from None
    randomizer = device.randomizers[task]
    try:
        row = randomizer.randomize(x[None, :], np.array([body.reward]), device.rng)[0]
        if key is not None:
            # The 0/1 randomizer's per-coordinate counts (0..m) are all the sum needs.
            counts = randomizer.counts(row[None, :])[0]  # type: ignore[attr-defined]
            if key.encrypt_inline_ok():  # one multiplication mod n² per plaintext
                wire = key.encrypt(counts)
            else:  # pool exhausted: r^n mod n² (~10 ms) must not stall the event loop
                wire = await asyncio.to_thread(key.encrypt_in_thread, counts)
            report_json, transport, key_id = wire.model_dump_json(), SECURE_SUM, wire.key_id
        else:
            assert hpke is not None and public_key is not None
            _, plaintext = pack_report(randomizer.to_bytes(row))
            report = seal(public_key, hpke.key_id, task, plaintext)
            report_json, transport, key_id = report.model_dump_json(), REPORTS, None
    except ValueError as exc:  # cannot happen for a vector accepted by decide; stay a 4xx anyway
        raise ApiError(422, "invalid_report", str(exc)) from None
    try:
        await device.store.complete_feedback(
            body.decision_id, task, report_json, transport=transport, key_id=key_id
        )
    except (DecisionNotFound, DecisionUsed) as exc:  # a concurrent feedback won the race
        raise _decision_error(exc, task, body.decision_id) from None
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
        dropped=c.dropped,
    )


@router.get("/healthz")
async def healthz(device: DeviceDep) -> Response:
    """200 once the analyzer's keys and every task's model are cached; 503 while starting."""
    if not device.ready:
        return error_response(
            503, "starting", "waiting for the analyzer: " + ", ".join(device.missing())
        )
    return JSONResponse(
        {
            "status": "ok",
            "service": "device",
            "models": device.cache.versions(),
            "streaming": sorted(device.cache.streaming),
            "outbox_pending": device.store.counters.outbox_pending,
            "dropped": device.store.counters.dropped,
            "paillier_keys": {t: k.key_id for t in device.keys.tasks
                              if (k := device.keys.get(t)) is not None},
            "last_upload_error": device.uploader.last_error,
        }
    )


@router.get("/metrics")
async def metrics(device: DeviceDep) -> Response:
    return Response(generate_latest(device.metrics.registry), media_type=CONTENT_TYPE_LATEST)
