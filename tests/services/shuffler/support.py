"""What the shuffler tests share: its tasks, a recording fake analyzer (serving the HPKE config
of a test key store), a transport that fails on demand, and small status helpers."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from privbandit.services.shuffler.app import create_app as create_shuffler
from privbandit.shared.crypto.keystore import HpkeKeyStore
from privbandit.shared.protocol.messages import BatchUpload
from privbandit.shared.settings import Settings
from tests.helpers import ldp_task, make_settings, queue_status, shuffle_task

SHUF = shuffle_task()  # l = 5
BIG = shuffle_task("big", l=20)
LOC = ldp_task()  # l = 1


@dataclass
class FakeAnalyzer:
    """Serves the HPKE config of ``keys`` (which the shuffler needs before it takes reports),
    records every batch delivery exactly as received and acknowledges it (or fails)."""

    keys: HpkeKeyStore
    status: int = 200
    deliveries: list[tuple[str, dict[str, str], dict]] = field(default_factory=list)
    hpke_gets: int = 0  # GET /v1/hpke-config requests served or refused
    hpke_down: bool = False  # answer them 503
    retry_after: str | None = None  # the Retry-After of a failing delivery's answer
    delivered_at: list[float] = field(default_factory=list)  # time.monotonic() of each

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/hpke-config")
        async def hpke_config() -> JSONResponse:
            self.hpke_gets += 1
            if self.hpke_down:
                return JSONResponse({"code": "unavailable", "message": "down"}, 503)
            return JSONResponse(self.keys.hpke_config().model_dump())

        @app.post("/v1/tasks/{task}/batches")
        async def batches(task: str, request: Request) -> JSONResponse:
            raw = json.loads(await request.body())
            self.deliveries.append((task, dict(request.headers), raw))
            self.delivered_at.append(time.monotonic())
            if self.status != 200:
                headers = {"Retry-After": self.retry_after} if self.retry_after else None
                return JSONResponse({"code": "nope", "message": "failing"}, self.status,
                                    headers=headers)
            upload = BatchUpload.model_validate(raw)
            ack = {
                "batch_id": upload.batch_id, "replayed": False, "counted": len(upload.reports),
                "rejected": 0, "duplicates": 0, "model_version": 0,
            }
            return JSONResponse(ack)

        return app

    def batches(self, task: str | None = None) -> list[BatchUpload]:
        return [BatchUpload.model_validate(raw) for t, _, raw in self.deliveries
                if task is None or t == task]



def shuffler_app(settings: Settings, fake: FakeAnalyzer) -> FastAPI:
    """A shuffler delivering to the fake analyzer."""
    return create_shuffler(settings, analyzer_transport=httpx.ASGITransport(fake.app()))


def settings_for(tmp_path: Path, **kw: object) -> Settings:
    return make_settings(tmp_path / "data", tasks=[SHUF, BIG, LOC], **kw)


async def acked(client: httpx.AsyncClient, task: str, n: int) -> bool:
    return (await queue_status(client, task)).batches_acknowledged >= n



