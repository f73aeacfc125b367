"""The floor of the load tests: bare FastAPI endpoints that parse the same bodies as the services
(the same pydantic messages) and answer at once — no storage, no crypto, no policy.

``uvicorn load.bare:app`` serves, on the services' paths:
- ``POST /v1/tasks/{task}/reports``: a ``ReportUpload`` → 202 ``ReportsAccepted``;
- ``GET /v1/tasks/{task}/model``: a fixed ``ModelMessage`` with its ``ETag``; 304 on a match;
- ``POST /v1/tasks/{task}/decide``: a ``DecideRequest`` → ``DecideResponse`` (argmax of a fixed
  linear score, so it does the same arithmetic a cached-model decision does, minus the ellipsoid);
- ``POST /v1/tasks/{task}/feedback``: a ``FeedbackRequest`` → 202 ``FeedbackResponse``.
"""

from __future__ import annotations

import base64
import secrets

import numpy as np
from fastapi import FastAPI, Header, Response

from privbandit.shared.protocol.messages import (
    DecideRequest,
    DecideResponse,
    FeedbackRequest,
    FeedbackResponse,
    ModelMessage,
    ReportsAccepted,
    ReportUpload,
)

app = FastAPI(title="privbandit load floor")
D = 5
MODEL = ModelMessage(task="bare", version=7, theta=[0.1] * D, V=np.eye(D).tolist(), beta=1.0,
                     reports=0)
ETAG = f'"{MODEL.version}"'


@app.post("/v1/tasks/{task}/reports", status_code=202)
async def reports(task: str, body: ReportUpload) -> ReportsAccepted:
    return ReportsAccepted(accepted=len(body.reports), duplicates=0)


@app.get("/v1/tasks/{task}/model")
async def model(task: str, if_none_match: str | None = Header(None)) -> Response:
    if if_none_match == ETAG:
        return Response(status_code=304, headers={"ETag": ETAG})
    return Response(MODEL.model_dump_json(), media_type="application/json",
                    headers={"ETag": ETAG})


@app.post("/v1/tasks/{task}/decide")
async def decide(task: str, body: DecideRequest) -> DecideResponse:
    x = np.asarray(body.features)
    action = int(np.argmax(x @ np.asarray(MODEL.theta[: x.shape[1]])))
    # An id as long as the device's (it seals the chosen d-vector: 29 + 8d bytes), so that
    # both answer the same number of bytes.
    decision_id = base64.urlsafe_b64encode(secrets.token_bytes(29 + 8 * x.shape[1]))
    return DecideResponse(decision_id=decision_id.rstrip(b"=").decode(), action=action,
                          model_version=MODEL.version)


@app.post("/v1/tasks/{task}/feedback", status_code=202)
async def feedback(task: str, body: FeedbackRequest) -> FeedbackResponse:
    return FeedbackResponse(queued=True, outbox_pending=0)


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}
