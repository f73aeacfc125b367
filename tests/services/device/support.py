"""What the device tests share: a recording fake shuffler, dead and switchable peers, and a
``stack`` of the real analyzer, a shuffler (fake by default) and the device, all in-process with
their lifespans running; request helpers; the secure-sum task and its expected counts.

The analyzer is the real app (its lifespan running, real SQLite and HPKE keys under tmp_path),
reached through an ASGI transport. The shuffler is either a recording fake (to inspect exactly what
the device uploads and to simulate outages) or, where available, the real shuffler app.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from privbandit.services.analyzer.app import create_app as create_analyzer
from privbandit.services.device import create_app as create_device
from privbandit.shared.core.policies import randomizer_for
from privbandit.shared.crypto.keystore import PaillierKeyStore
from privbandit.shared.crypto.paillier import decode_ciphertexts, decrypt_sum
from privbandit.shared.protocol.messages import EncryptedReport, ReportUpload
from privbandit.shared.protocol.paillier import EncryptedCounts, PaillierUpload
from privbandit.shared.settings import Settings
from tests.helpers import (
    PAILLIER_TEST_BITS,
    eventually,
    make_settings,
    running,
    secure_sum_task,
    shuffle_task,
)

D, K = 3, 4  # the conftest tasks' dimensions


# ---------------------------------------------------------------------------------------------
# A recording fake shuffler


@dataclass
class FakeShuffler:
    """Accepts ReportUploads and PaillierUploads like the real shuffler (202 ReportsAccepted);
    can be made to fail. Records the raw body of every attempt."""

    status: int = 202  # what to answer: 202, or e.g. 503 to simulate an outage
    uploads: list[tuple[str, list[EncryptedReport]]] = field(default_factory=list)
    counts: list[tuple[str, list[EncryptedCounts]]] = field(default_factory=list)
    bodies: list[tuple[str, bytes]] = field(default_factory=list)  # (path, body) per attempt
    attempts: int = 0

    def app(self) -> FastAPI:
        app = FastAPI()
        routes = (("reports", ReportUpload, self.uploads),
                  ("encrypted-counts", PaillierUpload, self.counts))
        for endpoint, model, sink in routes:
            app.add_api_route(f"/v1/tasks/{{task}}/{endpoint}", self._handler(model, sink),
                              methods=["POST"])
        return app

    def _handler(self, model: type[ReportUpload] | type[PaillierUpload], sink: list) -> Any:
        async def handle(task: str, request: Request) -> JSONResponse:
            self.attempts += 1
            body = await request.body()
            self.bodies.append((request.url.path, body))
            if self.status != 202:
                return JSONResponse({"code": "down", "message": "outage"}, status_code=self.status)
            upload = model.model_validate_json(body)
            sink.append((task, list(upload.reports)))
            return JSONResponse({"accepted": len(upload.reports), "duplicates": 0}, 202)

        return handle

    def reports(self, task: str | None = None) -> list[EncryptedReport]:
        return [r for t, rs in self.uploads for r in rs if task is None or t == task]

    def encrypted(self, task: str | None = None) -> list[EncryptedCounts]:
        return [r for t, rs in self.counts for r in rs if task is None or t == task]


class DeadTransport(httpx.AsyncBaseTransport):
    """A peer that is down: every request fails to connect."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)


@dataclass
class Stack:
    device: httpx.AsyncClient
    analyzer: httpx.AsyncClient
    settings: Settings
    shuffler: FakeShuffler
    app: FastAPI


@asynccontextmanager
async def stack(
    settings: Settings,
    shuffler: FakeShuffler | None = None,
    *,
    analyzer_up: bool = True,
    wait_ready: bool = True,
    **options: bool,
) -> AsyncIterator[Stack]:
    """Real analyzer + fake shuffler + device, all in-process with their lifespans running;
    ``options``: the device's start options (``init``, ``forget_persons``)."""
    shuffler = shuffler if shuffler is not None else FakeShuffler()
    analyzer_app = create_analyzer(settings, paillier_key_bits=PAILLIER_TEST_BITS)
    async with running(analyzer_app) as analyzer:
        a_transport: httpx.AsyncBaseTransport = (
            httpx.ASGITransport(app=analyzer_app) if analyzer_up else DeadTransport()
        )
        app = device_app(settings, a_transport, httpx.ASGITransport(app=shuffler.app()),
                         **options)
        async with running(app) as device:
            if wait_ready:
                await eventually(lambda: ok(device.get("/healthz")), what="device ready")
            yield Stack(device, analyzer, settings, shuffler, app)


def device_app(
    settings: Settings,
    analyzer: httpx.AsyncBaseTransport,
    shuffler: httpx.AsyncBaseTransport,
    **options: bool,
) -> FastAPI:
    """A device app for tests: it accepts the analyzer's small test Paillier keys (and, with
    ``make_settings``, keeps a small pool of precomputed randomness); ``options``: ``init``,
    ``forget_persons``."""
    return create_device(
        settings, analyzer_transport=analyzer, shuffler_transport=shuffler,
        paillier_min_bits=PAILLIER_TEST_BITS, **options,
    )


async def ok(coro: Any) -> bool:
    return (await coro).status_code == 200


def features(rng: np.random.Generator, k: int = K, d: int = D) -> list[list[float]]:
    x = rng.normal(size=(k, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True) * 1.25  # ||x|| = 0.8 <= L = 1
    return x.tolist()


async def decide(client: httpx.AsyncClient, task: str, feats: list[list[float]]) -> dict:
    resp = await client.post(f"/v1/tasks/{task}/decide", json={"features": feats})
    assert resp.status_code == 200, resp.text
    return resp.json()


async def status(client: httpx.AsyncClient) -> dict:
    resp = await client.get("/v1/status")
    assert resp.status_code == 200
    return resp.json()

async def delivered(s: Stack, n: int) -> bool:
    return len(s.shuffler.reports()) >= n and (await status(s.device))["outbox_pending"] == 0



async def give_feedbacks(s: Stack, task: str, n: int, rng: np.random.Generator) -> None:
    for _ in range(n):
        did = (await decide(s.device, task, features(rng)))["decision_id"]
        resp = await s.device.post(f"/v1/tasks/{task}/feedback",
                                   json={"decision_id": did, "reward": float(rng.uniform())})
        assert resp.status_code == 202, resp.text



async def outbox_empty(s: Stack) -> bool:
    return (await status(s.device))["outbox_pending"] == 0



# ---------------------------------------------------------------------------------------------
# secure-sum

SUM = secure_sum_task("sum", l=10)  # sblb-fixed, d = 3: c = 9 counts in 0..1, l = 10


def secure_settings(tmp_path: Path, name: str = "data", **kw: Any) -> Settings:
    return make_settings(tmp_path / name, tasks=[SUM, shuffle_task()], **kw)


def expected_counts(features_and_rewards: list[tuple[np.ndarray, float]], seed: int) -> np.ndarray:
    """The counts the device's randomizer produces for these (x, r), in this order, when its
    generator is ``default_rng(seed)`` (the test seeds the device's generator the same way)."""
    rand = randomizer_for(SUM.policy)
    rng = np.random.default_rng(seed)
    rows = [rand.randomize(x[None, :], np.array([r]), rng)[0] for x, r in features_and_rewards]
    return rand.counts(np.asarray(rows))  # type: ignore[attr-defined]


async def secure_feedbacks(
    s: Stack, n: int, rng: np.random.Generator, task: str = "sum"
) -> list[tuple[np.ndarray, float]]:
    """n decide + feedback rounds, one after the other; the chosen (x, r) of each."""
    out = []
    for _ in range(n):
        feats = features(rng)
        dec = await decide(s.device, task, feats)
        reward = float(rng.integers(0, 2))
        resp = await s.device.post(f"/v1/tasks/{task}/feedback",
                                   json={"decision_id": dec["decision_id"], "reward": reward})
        assert resp.status_code == 202, resp.text
        out.append((np.asarray(feats[dec["action"]]), reward))
    return out


def decrypt_report(keys: PaillierKeyStore, report: EncryptedCounts) -> list[int]:
    lay = keys.layout(9, SUM.batch_size, 1)
    return decrypt_sum(keys.private_key, decode_ciphertexts(report.ct, keys.n, lay.plaintexts))

