"""In-process tests of the device service: every endpoint and error case, the outbox under a
shuffler outage and across a device restart, model following, and the encrypted report contents.

The analyzer is the real app (its lifespan running, real SQLite and HPKE keys under tmp_path),
reached through an ASGI transport. The shuffler is either a recording fake (to inspect exactly what
the device uploads and to simulate outages) or, where available, the real shuffler app.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from services.analyzer.app import create_app as create_analyzer
from services.device import cache as device_cache
from services.device import create_app as create_device
from services.device import outbox as device_outbox
from services.shuffler.app import create_app as create_shuffler
from shared.core.policies import randomizer_for
from shared.crypto.hpke import unpack_report
from shared.crypto.keystore import HpkeKeyStore, PaillierKeyStore
from shared.crypto.paillier import PaillierEncryptor, decode_ciphertexts, decrypt_sum
from shared.crypto.slots import pack, unpack
from shared.protocol.messages import EncryptedReport, ReportUpload
from shared.protocol.secure_sum import EncryptedCounts, PaillierConfig, SecureSumUpload
from shared.settings import Settings
from tests.helpers import (
    PAILLIER_TEST_BITS,
    assert_same_state,
    auth,
    central_task,
    counted,
    error,
    eventually,
    ldp_task,
    make_settings,
    reference_state,
    report_maker,
    running,
    secure_sum_ready,
    secure_sum_task,
    shuffle_task,
)

D, K = 3, 4  # the conftest tasks' dimensions


@pytest.fixture(autouse=True)
def fast_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    # The ASGI transport cannot stream, so the device polls; poll fast in tests.
    monkeypatch.setattr(device_cache, "POLL_INTERVAL", 0.02)
    monkeypatch.setattr(device_cache, "RETRY_MAX", 0.05)


# ---------------------------------------------------------------------------------------------
# A recording fake shuffler


@dataclass
class FakeShuffler:
    """Accepts ReportUploads and SecureSumUploads like the real shuffler (202 ReportsAccepted);
    can be made to fail. Records the raw body of every attempt."""

    status: int = 202  # what to answer: 202, or e.g. 503 to simulate an outage
    uploads: list[tuple[str, list[EncryptedReport]]] = field(default_factory=list)
    counts: list[tuple[str, list[EncryptedCounts]]] = field(default_factory=list)
    bodies: list[tuple[str, bytes]] = field(default_factory=list)  # (path, body) per attempt
    attempts: int = 0

    def app(self) -> FastAPI:
        app = FastAPI()
        routes = (("reports", ReportUpload, self.uploads),
                  ("encrypted-counts", SecureSumUpload, self.counts))
        for endpoint, model, sink in routes:
            app.add_api_route(f"/v1/tasks/{{task}}/{endpoint}", self._handler(model, sink),
                              methods=["POST"])
        return app

    def _handler(self, model: type[ReportUpload] | type[SecureSumUpload], sink: list) -> Any:
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
) -> AsyncIterator[Stack]:
    """Real analyzer + fake shuffler + device, all in-process with their lifespans running."""
    shuffler = shuffler if shuffler is not None else FakeShuffler()
    analyzer_app = create_analyzer(settings, paillier_key_bits=PAILLIER_TEST_BITS)
    async with running(analyzer_app) as analyzer:
        a_transport: httpx.AsyncBaseTransport = (
            httpx.ASGITransport(app=analyzer_app) if analyzer_up else DeadTransport()
        )
        app = device_app(settings, a_transport, httpx.ASGITransport(app=shuffler.app()))
        async with running(app) as device:
            if wait_ready:
                await eventually(lambda: _ok(device.get("/healthz")), what="device ready")
            yield Stack(device, analyzer, settings, shuffler, app)


def device_app(
    settings: Settings,
    analyzer: httpx.AsyncBaseTransport,
    shuffler: httpx.AsyncBaseTransport,
) -> FastAPI:
    """A device app for tests: it accepts the analyzer's small test Paillier keys and keeps a
    small pool of precomputed randomness."""
    return create_device(
        settings, analyzer_transport=analyzer, shuffler_transport=shuffler,
        paillier_min_bits=PAILLIER_TEST_BITS, paillier_pool=16,
    )


async def _ok(coro: Any) -> bool:
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


# ---------------------------------------------------------------------------------------------
# decide


async def test_health_status_and_decide(settings: Settings) -> None:
    rng = np.random.default_rng(1)
    async with stack(settings) as s:
        health = (await s.device.get("/healthz")).json()
        assert health["status"] == "ok"
        st = await status(s.device)
        assert st == {
            "tasks": {"shuf": 0, "loc": 0, "cen": 0},
            "feedbacks": 0,
            "outbox_pending": 0,
            "uploaded": 0,
            "dropped": 0,
        }
        for task in ("shuf", "loc", "cen"):
            out = await decide(s.device, task, features(rng))
            assert re.fullmatch(r"[0-9a-f]{32}", out["decision_id"])
            assert 0 <= out["action"] < K
            assert out["model_version"] == 0


async def test_decide_picks_the_models_argmax(settings: Settings) -> None:
    # Version 0: θ̃ = 0, so the index is β‖x‖_{V⁻¹} with V = λI: the longest vector wins.
    async with stack(settings) as s:
        feats = [[0.1, 0.0, 0.0], [0.0, 0.9, 0.0], [0.0, 0.0, 0.5], [0.3, 0.3, 0.3]]
        assert (await decide(s.device, "cen", feats))["action"] == 1


async def test_decide_ids_are_unique(settings: Settings) -> None:
    rng = np.random.default_rng(2)
    async with stack(settings) as s:
        ids = {(await decide(s.device, "cen", features(rng)))["decision_id"] for _ in range(50)}
        assert len(ids) == 50


async def test_decide_works_without_the_analyzer(settings: Settings) -> None:
    """No network round trip: with the analyzer unreachable, decide still answers (version 0)
    while feedback, which needs the analyzer's key, is refused without changing state."""
    rng = np.random.default_rng(3)
    async with stack(settings, analyzer_up=False, wait_ready=False) as s:
        health = await s.device.get("/healthz")
        error(health, 503, "starting")
        out = await decide(s.device, "shuf", features(rng))
        assert out["model_version"] == 0
        resp = await s.device.post(
            "/v1/tasks/shuf/feedback", json={"decision_id": out["decision_id"], "reward": 1.0}
        )
        error(resp, 503, "no_hpke_key")
        assert (await status(s.device))["feedbacks"] == 0


BAD_DECIDE = [
    pytest.param("nope", {"features": [[0.1] * D] * K}, 404, "unknown_task", id="unknown-task"),
    pytest.param("Bad_Id!", {"features": [[0.1] * D] * K}, 404, "unknown_task", id="bad-task-id"),
    pytest.param("cen", {"features": [[0.1] * D] * (K - 1)}, 422, "wrong_arms", id="too-few-arms"),
    pytest.param("cen", {"features": [[0.1] * D] * (K + 1)}, 422, "wrong_arms", id="too-many"),
    pytest.param("cen", {"features": [[0.1] * (D + 1)] * K}, 422, "wrong_dimension", id="d+1"),
    pytest.param("cen", {"features": [[0.1] * D] * (K - 1) + [[0.1]]}, 422, "wrong_dimension",
                 id="ragged"),
    pytest.param("cen", {"features": [[0.1] * D] * (K - 1) + [[1.0, 1.0, 0.0]]}, 422,
                 "feature_norm", id="norm>L"),
    pytest.param("cen", {"features": [[0.1] * D] * (K - 1) + [[1e200, 1e200, 0.0]]}, 422,
                 "feature_norm", id="norm-overflow"),
    pytest.param("cen", {"features": [["a", 0.1, 0.1]] + [[0.1] * D] * (K - 1)}, 422,
                 "invalid_request", id="string"),
    pytest.param("cen", {"features": [[True, 0.1, 0.1]] + [[0.1] * D] * (K - 1)}, 422,
                 "invalid_request", id="bool"),
    pytest.param("cen", {"features": [0.1] * K}, 422, "invalid_request", id="flat"),
    pytest.param("cen", {"features": []}, 422, "invalid_request", id="empty"),
    pytest.param("cen", {}, 422, "invalid_request", id="missing"),
    pytest.param("cen", {"features": [[0.1] * D] * K, "user": "x"}, 422, "invalid_request",
                 id="extra-field"),
    pytest.param("cen", [1, 2], 422, "invalid_request", id="not-an-object"),
]


@pytest.mark.parametrize(("task", "body", "code", "err"), BAD_DECIDE)
async def test_decide_rejects(settings: Settings, task: str, body: Any, code: int, err: str):
    async with stack(settings) as s:
        before = await status(s.device)
        error(await s.device.post(f"/v1/tasks/{task}/decide", json=body), code, err)
        assert await status(s.device) == before


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
async def test_decide_rejects_non_finite(settings: Settings, literal: str) -> None:
    row = "[0.1, 0.1, 0.1]"
    body = '{"features": [[' + literal + ", 0.1, 0.1], " + ", ".join([row] * (K - 1)) + "]}"
    async with stack(settings) as s:
        resp = await s.device.post(
            "/v1/tasks/cen/decide", content=body, headers={"Content-Type": "application/json"}
        )
        error(resp, 422)


async def test_malformed_bodies_and_routes(settings: Settings) -> None:
    async with stack(settings) as s:
        headers = {"Content-Type": "application/json"}
        error(await s.device.post("/v1/tasks/cen/decide", content=b"{not json",
                                         headers=headers), 422)
        error(await s.device.post("/v1/tasks/cen/decide", content=b"\xff\xfe",
                                         headers=headers), 422)
        huge = b'{"features": [' + b"0," * (3 * 1024 * 1024) + b"0]}"
        error(await s.device.post("/v1/tasks/cen/decide", content=huge, headers=headers),
                     413, "body_too_large")
        error(await s.device.get("/v1/nothing-here"), 404)
        error(await s.device.get("/v1/tasks/cen/decide"), 405)
        assert (await status(s.device))["feedbacks"] == 0


# ---------------------------------------------------------------------------------------------
# feedback


async def test_feedback_queues_a_sealed_report_with_only_the_estimators_inputs(
    settings: Settings,
) -> None:
    """Central mode sends raw (x, r) inside HPKE: decrypting the uploaded report with the
    analyzer's key gives exactly the chosen arm's features and the reward, behind a fresh
    16-byte report id and nothing else."""
    rng = np.random.default_rng(4)
    async with stack(settings) as s:
        feats = features(rng)
        out = await decide(s.device, "cen", feats)
        resp = await s.device.post(
            "/v1/tasks/cen/feedback", json={"decision_id": out["decision_id"], "reward": 0.75}
        )
        assert resp.status_code == 202, resp.text
        assert resp.json()["queued"] is True
        await eventually(lambda: _delivered(s, 1), what="upload")
        (report,) = s.shuffler.reports("cen")
        keys = HpkeKeyStore(Path(settings.data_dir) / "analyzer")
        plaintext = keys.open("cen", report)
        rand = randomizer_for(central_task().policy)
        report_id, row_bytes = unpack_report(plaintext, 8 * rand.width)
        assert len(report_id) == 16
        row = rand.from_bytes(row_bytes)
        np.testing.assert_array_equal(row[:D], np.asarray(feats[out["action"]]))
        assert row[D] == 0.75
        # The ciphertext is bound to its task: it does not open as another task's report.
        with pytest.raises(Exception, match="authentication"):
            keys.open("loc", report)
        st = await status(s.device)
        assert st["feedbacks"] == 1 and st["uploaded"] == 1 and st["outbox_pending"] == 0


async def _delivered(s: Stack, n: int) -> bool:
    return len(s.shuffler.reports()) >= n and (await status(s.device))["outbox_pending"] == 0


async def test_randomized_reports_for_noisy_tasks(settings: Settings) -> None:
    """ldp and shuffle tasks send the randomizer's output, not the raw data."""
    rng = np.random.default_rng(5)
    async with stack(settings) as s:
        for task in ("loc", "shuf"):
            out = await decide(s.device, task, features(rng))
            resp = await s.device.post(
                f"/v1/tasks/{task}/feedback", json={"decision_id": out["decision_id"], "reward": 1}
            )
            assert resp.status_code == 202, resp.text
        await eventually(lambda: _delivered(s, 2), what="upload")
        keys = HpkeKeyStore(Path(settings.data_dir) / "analyzer")
        for task, cfg in (("loc", ldp_task()), ("shuf", shuffle_task())):
            (report,) = s.shuffler.reports(task)
            rand = randomizer_for(cfg.policy)
            width = len(rand.to_bytes(np.zeros(rand.width)))
            _, row_bytes = unpack_report(keys.open(task, report), width)
            row = rand.from_bytes(row_bytes)
            assert row.shape == (rand.width,)
            if task == "shuf":
                assert set(np.unique(row)) <= {0.0, 1.0}


async def test_feedback_errors_change_nothing(settings: Settings) -> None:
    rng = np.random.default_rng(6)
    async with stack(settings) as s:
        out = await decide(s.device, "cen", features(rng))
        did = out["decision_id"]
        before = await status(s.device)
        cases = [
            ("cen", {"decision_id": "0" * 32, "reward": 1.0}, 404, "unknown_decision"),
            ("loc", {"decision_id": did, "reward": 1.0}, 404, "unknown_decision"),  # other task
            ("nope", {"decision_id": did, "reward": 1.0}, 404, "unknown_task"),
            ("cen", {"decision_id": did, "reward": 1.5}, 422, "invalid_request"),
            ("cen", {"decision_id": did, "reward": -0.1}, 422, "invalid_request"),
            ("cen", {"decision_id": did, "reward": "1"}, 422, "invalid_request"),
            ("cen", {"decision_id": did}, 422, "invalid_request"),
            ("cen", {"decision_id": did.upper(), "reward": 1.0}, 422, "invalid_request"),
            ("cen", {"decision_id": did[:-1], "reward": 1.0}, 422, "invalid_request"),
            ("cen", {"decision_id": did, "reward": 1.0, "x": 1}, 422, "invalid_request"),
        ]
        for task, body, code, err in cases:
            resp = await s.device.post(f"/v1/tasks/{task}/feedback", json=body)
            error(resp, code, err)
        nan = '{"decision_id": "' + did + '", "reward": NaN}'
        resp = await s.device.post("/v1/tasks/cen/feedback", content=nan,
                                   headers={"Content-Type": "application/json"})
        error(resp, 422)
        assert await status(s.device) == before
        # The decision is still open: a valid feedback now succeeds, a second one is a conflict.
        ok = await s.device.post("/v1/tasks/cen/feedback", json={"decision_id": did, "reward": 1})
        assert ok.status_code == 202, ok.text
        again = await s.device.post("/v1/tasks/cen/feedback", json={"decision_id": did,
                                                                    "reward": 0})
        error(again, 409, "decision_used")
        assert (await status(s.device))["feedbacks"] == 1


async def test_concurrent_double_feedback_counts_once(settings: Settings) -> None:
    rng = np.random.default_rng(7)
    async with stack(settings) as s:
        for _ in range(5):
            did = (await decide(s.device, "cen", features(rng)))["decision_id"]
            body = {"decision_id": did, "reward": 0.5}
            results = await asyncio.gather(
                *(s.device.post("/v1/tasks/cen/feedback", json=body) for _ in range(4))
            )
            codes = sorted(r.status_code for r in results)
            assert codes == [202, 409, 409, 409], codes
        await eventually(lambda: _delivered(s, 5), what="uploads")
        assert len(s.shuffler.reports()) == 5
        assert (await status(s.device))["feedbacks"] == 5


async def test_decision_vector_is_erased_after_feedback(settings: Settings) -> None:
    import sqlite3

    rng = np.random.default_rng(8)
    async with stack(settings) as s:
        did = (await decide(s.device, "cen", features(rng)))["decision_id"]
        db = Path(settings.data_dir) / "device" / "device.sqlite3"
        with sqlite3.connect(db) as conn:
            (x,) = conn.execute("SELECT x FROM decisions WHERE id = ?", (did,)).fetchone()
            assert x is not None and len(x) == 8 * D
        resp = await s.device.post("/v1/tasks/cen/feedback", json={"decision_id": did,
                                                                   "reward": 0})
        assert resp.status_code == 202
        with sqlite3.connect(db) as conn:
            (x,) = conn.execute("SELECT x FROM decisions WHERE id = ?", (did,)).fetchone()
            assert x is None


# ---------------------------------------------------------------------------------------------
# outbox: outages and restarts


async def give_feedbacks(s: Stack, task: str, n: int, rng: np.random.Generator) -> None:
    for _ in range(n):
        did = (await decide(s.device, task, features(rng)))["decision_id"]
        resp = await s.device.post(f"/v1/tasks/{task}/feedback",
                                   json={"decision_id": did, "reward": float(rng.uniform())})
        assert resp.status_code == 202, resp.text


async def test_shuffler_outage_loses_nothing(settings: Settings) -> None:
    rng = np.random.default_rng(9)
    shuffler = FakeShuffler(status=503)
    async with stack(settings, shuffler) as s:
        await give_feedbacks(s, "cen", 30, rng)
        await give_feedbacks(s, "loc", 20, rng)
        await eventually(lambda: _attempted(shuffler), what="a failed attempt")
        st = await status(s.device)
        assert st["feedbacks"] == 50 and st["outbox_pending"] == 50 and st["uploaded"] == 0
        assert shuffler.reports() == []
        shuffler.status = 202  # the shuffler comes back
        await eventually(lambda: _delivered(s, 50), timeout=15, what="drain after outage")
        st = await status(s.device)
        assert st["uploaded"] == 50 and st["outbox_pending"] == 0
        cts = [r.ct for r in shuffler.reports()]
        assert len(cts) == len(set(cts)) == 50
        assert len(shuffler.reports("cen")) == 30 and len(shuffler.reports("loc")) == 20
        # Uploads are batched (one task per upload, at most 100 per upload).
        assert all(len(rs) <= 100 and len({t}) == 1 for t, rs in shuffler.uploads)


async def _attempted(shuffler: FakeShuffler) -> bool:
    return shuffler.attempts > 0


async def test_permanently_refused_reports_are_dead_lettered(settings: Settings) -> None:
    rng = np.random.default_rng(10)
    shuffler = FakeShuffler(status=422)
    async with stack(settings, shuffler) as s:
        await give_feedbacks(s, "cen", 3, rng)
        await eventually(lambda: _outbox_empty(s), what="dead-lettering")
        metrics = (await s.device.get("/metrics")).text
        assert "privbandit_device_dead_letters 3.0" in metrics
        assert (await status(s.device))["uploaded"] == 0


async def _outbox_empty(s: Stack) -> bool:
    return (await status(s.device))["outbox_pending"] == 0


async def test_outbox_survives_a_device_restart(settings: Settings) -> None:
    rng = np.random.default_rng(11)
    down = FakeShuffler(status=503)
    async with stack(settings, down) as s:
        await give_feedbacks(s, "cen", 12, rng)
        assert (await status(s.device))["outbox_pending"] == 12
    up = FakeShuffler()
    async with stack(settings, up) as s:
        await eventually(lambda: _delivered(s, 12), what="upload after restart")
        st = await status(s.device)
        assert st["feedbacks"] == 12 and st["uploaded"] == 12
        assert len(up.reports("cen")) == 12


async def test_lost_acknowledgement_resends_identical_bytes(settings: Settings) -> None:
    """If the shuffler stored an upload but its 202 was lost, the device re-sends the very same
    ciphertexts (which the shuffler and the analyzer recognise), never fresh ones."""
    rng = np.random.default_rng(12)
    seen: list[list[str]] = []
    fail_first = {"left": 1}

    app = FastAPI()

    @app.post("/v1/tasks/{task}/reports")
    async def reports(task: str, request: Request) -> JSONResponse:
        upload = ReportUpload.model_validate_json(await request.body())
        seen.append([r.ct for r in upload.reports])
        if fail_first["left"]:
            fail_first["left"] -= 1
            return JSONResponse({"code": "x", "message": "lost"}, status_code=500)
        return JSONResponse({"accepted": len(upload.reports), "duplicates": 0}, 202)

    analyzer_app = create_analyzer(settings)
    async with running(analyzer_app):
        dev = device_app(settings, httpx.ASGITransport(app=analyzer_app),
                         httpx.ASGITransport(app=app))
        async with running(dev) as device:
            await eventually(lambda: _ok(device.get("/healthz")), what="ready")
            s = Stack(device, device, settings, FakeShuffler(), dev)
            await give_feedbacks(s, "cen", 1, rng)
            await eventually(lambda: _outbox_empty(s), what="delivery")
    assert len(seen) == 2 and seen[0] == seen[1]


# ---------------------------------------------------------------------------------------------
# model following


async def test_device_follows_new_models(settings: Settings) -> None:
    """Batches posted to the analyzer publish new models; the device picks them up (by ETag
    polling here, since an in-process transport cannot stream) and decides with them."""
    async with stack(settings) as s:
        hpke = (await s.analyzer.get("/v1/hpke-config")).json()
        from shared.protocol.messages import HpkeConfig

        make = report_maker(HpkeConfig.model_validate(hpke), seed=3)
        cfg = central_task()
        for i in range(40):
            body = {"batch_id": f"{i:032x}",
                    "reports": [r.model_dump() for r in make(cfg, 1)]}
            resp = await s.analyzer.post("/v1/tasks/cen/batches", json=body, headers=auth())
            assert resp.status_code == 200, resp.text
        target = (await s.analyzer.get("/v1/tasks/cen/model")).json()["version"]
        assert target > 0
        await eventually(lambda: _version_is(s, "cen", target), what="model update")
        out = await decide(s.device, "cen", features(np.random.default_rng(0)))
        assert out["model_version"] == target
        metrics = (await s.device.get("/metrics")).text
        assert f'privbandit_device_model_version{{task="cen"}} {float(target)}' in metrics


async def _version_is(s: Stack, task: str, version: int) -> bool:
    return (await status(s.device))["tasks"][task] == version


async def test_metrics(settings: Settings) -> None:
    rng = np.random.default_rng(13)
    async with stack(settings) as s:
        await give_feedbacks(s, "loc", 3, rng)
        await s.device.post("/v1/tasks/nope/decide", json={"features": [[0.0] * D] * K})
        await eventually(lambda: _outbox_empty(s), what="delivery")
        text = (await s.device.get("/metrics")).text
        assert 'privbandit_device_decisions_total{task="loc"} 3.0' in text
        assert 'privbandit_device_feedbacks_total{task="loc"} 3.0' in text
        assert 'privbandit_device_requests_rejected_total{code="unknown_task"} 1.0' in text
        assert 'privbandit_device_upload_events_total{event="uploaded"} 3.0' in text
        # Two apps in one process keep separate registries.
        other = create_device(make_settings(Path(settings.data_dir).parent / "other"))
        async with running(other) as c2:
            text2 = (await c2.get("/metrics")).text
            assert 'privbandit_device_decisions_total{task="loc"}' not in text2


async def test_status_is_json_of_the_protocol_message(settings: Settings) -> None:
    """``/v1/status`` is exactly the protocol's ``DeviceStatus`` (including ``dropped``)."""
    async with stack(settings) as s:
        body = (await s.device.get("/v1/status")).json()
        from shared.protocol.messages import DeviceStatus

        status = DeviceStatus.model_validate_json(json.dumps(body))
        assert status.dropped == 0 and set(body) == set(DeviceStatus.model_fields)


# ---------------------------------------------------------------------------------------------
# secure-sum: Paillier-encrypted counts instead of HPKE reports

SUM = secure_sum_task("sum", l=10)  # sblb-fixed, d = 3: c = 9 counts in 0..1, l = 10


def secure_settings(tmp_path: Path, name: str = "data") -> Settings:
    return make_settings(tmp_path / name, tasks=[SUM, shuffle_task()])


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


async def test_secure_sum_feedback_sends_exactly_the_packed_randomized_counts(
    tmp_path: Path,
) -> None:
    """Feedback for a secure-sum task: the shuffler receives ``EncryptedCounts`` at
    /encrypted-counts which, decrypted with the analyzer's Paillier key, are exactly the packed
    counts of the report the task's randomizer made from (x, r); the HPKE task beside it still
    sends HPKE reports."""
    settings = secure_settings(tmp_path)
    rng = np.random.default_rng(20)
    async with stack(settings) as s:
        config = PaillierConfig.model_validate_json(
            (await s.analyzer.get("/v1/tasks/sum/secure-sum")).content)
        s.app.state.device.rng = np.random.default_rng(99)  # reproducible for this check only
        chosen = await secure_feedbacks(s, 4, rng)
        await give_feedbacks(s, "shuf", 1, rng)
        await eventually(lambda: _outbox_empty(s), what="delivery")
        sent = s.shuffler.encrypted("sum")
        assert len(sent) == 4 and s.shuffler.encrypted("shuf") == []
        assert [t for t, _ in s.shuffler.uploads] == ["shuf"]
        assert {path for path, _ in s.shuffler.bodies} == {
            "/v1/tasks/sum/encrypted-counts", "/v1/tasks/shuf/reports"}
        keys = PaillierKeyStore(Path(settings.data_dir) / "analyzer", PAILLIER_TEST_BITS,
                                allow_small=True)
        want = expected_counts(chosen, seed=99)
        assert want.shape == (4, 9) and want.min() >= 0 and want.max() <= 1
        for report, counts in zip(sent, want, strict=True):
            assert report.key_id == config.key_id == keys.key_id
            plain = decrypt_report(keys, report)
            assert plain == pack(counts, SUM.batch_size, 1, keys.key_bits)
            np.testing.assert_array_equal(
                unpack(plain, 9, SUM.batch_size, 1, keys.key_bits, n_reports=1), counts)
        # Fresh randomness per report: no two ciphertexts alike, even for equal counts.
        assert len({r.ct for r in sent}) == 4
        st = await status(s.device)
        assert (st["feedbacks"], st["uploaded"], st["outbox_pending"], st["dropped"]) == (
            5, 5, 0, 0)
        health = (await s.device.get("/healthz")).json()
        assert health["paillier_keys"] == {"sum": config.key_id}
        metrics = (await s.device.get("/metrics")).text
        assert f'privbandit_device_paillier_key_id{{task="sum"}} {float(config.key_id)}' in metrics
        assert 'privbandit_device_paillier_pool{task="sum"}' in metrics


async def test_secure_sum_through_the_real_shuffler_and_analyzer(tmp_path: Path) -> None:
    """Device → real shuffler → real analyzer: one batch of l = 10 secure-sum reports is counted
    once, and the analyzer's SBLB state equals SBLB fed the device's randomized rows."""
    settings = secure_settings(tmp_path)
    rng = np.random.default_rng(21)
    a_app = create_analyzer(settings, paillier_key_bits=PAILLIER_TEST_BITS)
    async with running(a_app) as analyzer:
        s_app = create_shuffler(settings, analyzer_transport=httpx.ASGITransport(a_app))
        async with running(s_app) as shuffler:
            await eventually(lambda: secure_sum_ready(shuffler), what="shuffler key")
            app = device_app(settings, httpx.ASGITransport(a_app), httpx.ASGITransport(s_app))
            async with running(app) as device:
                await eventually(lambda: _ok(device.get("/healthz")), what="device ready")
                s = Stack(device, analyzer, settings, FakeShuffler(), app)
                app.state.device.rng = np.random.default_rng(7)
                chosen = await secure_feedbacks(s, 12, rng)
                await eventually(lambda: counted(analyzer, "sum", 10), what="batch counted")
                await eventually(lambda: _outbox_empty(s), what="delivery")
                queue = (await shuffler.get("/v1/status")).json()["tasks"]
                q = next(t for t in queue if t["task"] == "sum")
                assert (q["accepted"], q["pending"], q["batches_acknowledged"]) == (12, 2, 1)
                # The shuffler batches the oldest l reports, and the device uploads in feedback
                # order, so the batch is the first 10 reports (permuted, which a sum ignores).
                rand = randomizer_for(SUM.policy)
                rows_rng = np.random.default_rng(7)
                rows = np.asarray([rand.randomize(x[None, :], np.array([r]), rows_rng)[0]
                                   for x, r in chosen])
                assert_same_state(a_app.state.runtime.tasks["sum"].policy.get_state(),
                                  reference_state(SUM, [rows[:10]]))


async def test_secure_sum_outage_and_restart_resend_identical_bytes(tmp_path: Path) -> None:
    """While the shuffler is down the encrypted counts wait in the outbox; every retry, also
    after a device restart, sends the very bytes encrypted at feedback time (a re-encryption
    would be a different ciphertext, which the shuffler would add to a sum a second time)."""
    settings = secure_settings(tmp_path)
    rng = np.random.default_rng(22)
    down = FakeShuffler(status=503)
    async with stack(settings, down) as s:
        await secure_feedbacks(s, 3, rng)
        await eventually(lambda: _full_attempts(down, 2), what="two failed attempts with all 3")
        st = await status(s.device)
        assert (st["feedbacks"], st["outbox_pending"], st["uploaded"]) == (3, 3, 0)
    tried = [SecureSumUpload.model_validate_json(body).reports for _, body in down.bodies]
    # Every attempt sent stored ciphertexts: 3 distinct ones in all, each re-sent unchanged.
    assert len({r.ct for reports in tried for r in reports}) == 3
    full = [body for _, body in down.bodies if len(SecureSumUpload.model_validate_json(body)
                                                   .reports) == 3]
    assert len(full) >= 2 and len(set(full)) == 1  # retries are byte-identical
    up = FakeShuffler()
    async with stack(settings, up) as s:
        await eventually(lambda: _outbox_empty(s), what="delivery after restart")
        assert [body for _, body in up.bodies] == [full[0]]
        assert up.encrypted("sum") == SecureSumUpload.model_validate_json(full[0]).reports
        st = await status(s.device)
        assert (st["feedbacks"], st["outbox_pending"], st["uploaded"]) == (3, 0, 3)


async def _full_attempts(shuffler: FakeShuffler, n: int) -> bool:
    sizes = [len(SecureSumUpload.model_validate_json(b).reports) for _, b in shuffler.bodies]
    return sizes.count(3) >= n


async def test_secure_sum_feedback_waits_for_the_paillier_key(tmp_path: Path) -> None:
    """Without the analyzer's Paillier config the device cannot encrypt: feedback for a
    secure-sum task is refused with 503 and the decision stays open; decide still works."""
    settings = secure_settings(tmp_path)
    rng = np.random.default_rng(23)
    async with stack(settings, analyzer_up=False, wait_ready=False) as s:
        health = error(await s.device.get("/healthz"), 503, "starting")
        assert "paillier-config:sum" in health.message
        did = (await decide(s.device, "sum", features(rng)))["decision_id"]
        resp = await s.device.post("/v1/tasks/sum/feedback",
                                   json={"decision_id": did, "reward": 1.0})
        error(resp, 503, "no_paillier_key")
        st = await status(s.device)
        assert (st["feedbacks"], st["outbox_pending"]) == (0, 0)
        db = Path(settings.data_dir) / "device" / "device.sqlite3"
        with sqlite3.connect(db) as conn:
            (x,) = conn.execute("SELECT x FROM decisions WHERE id = ?", (did,)).fetchone()
        assert x is not None  # not consumed


class Switch(httpx.AsyncBaseTransport):
    """A transport whose target can be changed: the device's analyzer being redeployed."""

    def __init__(self, target: httpx.AsyncBaseTransport) -> None:
        self.target = target

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.target.handle_async_request(request)


async def test_unknown_key_refetches_the_config_and_drops_what_cannot_be_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real shuffler knows analyzer B's Paillier key; the device starts on analyzer A's.

    1. The shuffler answers 422 unknown_key; the device re-fetches its config, still gets A's
       key (its items are under the current key), so it keeps them and retries later.
    2. The device's analyzer is redeployed as B: the next unknown_key re-fetch brings B's key;
       the reports under A's key can never be counted, so they are dropped and counted as such.
    3. New feedback is encrypted under B's key, accepted, batched and counted by B.
    """
    monkeypatch.setattr(device_outbox, "BACKOFF_MAX", 0.2)
    dev_settings = secure_settings(tmp_path, "device")
    # Two analyzers with different Paillier keys (ids are 8 bits: make sure they differ).
    key_a = PaillierKeyStore(tmp_path / "a" / "analyzer", PAILLIER_TEST_BITS, allow_small=True)
    while True:
        key_b = PaillierKeyStore(tmp_path / "b" / "analyzer", PAILLIER_TEST_BITS,
                                 allow_small=True)
        if key_b.key_id != key_a.key_id:
            break
        key_b.path.unlink()
    a_app = create_analyzer(secure_settings(tmp_path, "a"), paillier_key_bits=PAILLIER_TEST_BITS)
    b_app = create_analyzer(secure_settings(tmp_path, "b"), paillier_key_bits=PAILLIER_TEST_BITS)
    rng = np.random.default_rng(24)
    async with running(a_app) as a_client, running(b_app) as b_client:
        s_app = create_shuffler(dev_settings, analyzer_transport=httpx.ASGITransport(b_app))
        async with running(s_app) as shuffler:
            await eventually(lambda: secure_sum_ready(shuffler), what="shuffler key")
            analyzer = Switch(httpx.ASGITransport(a_app))
            app = device_app(dev_settings, analyzer, httpx.ASGITransport(s_app))
            async with running(app) as device:
                await eventually(lambda: _ok(device.get("/healthz")), what="device ready")
                s = Stack(device, a_client, dev_settings, FakeShuffler(), app)
                keys = app.state.device.keys
                assert keys.get("sum").key_id == key_a.key_id
                await secure_feedbacks(s, 3, rng)
                fetched = keys.fetches
                # 1. refused, re-fetched, same key: kept.
                await eventually(lambda: _fetched_more(keys, fetched + 1), what="re-fetch")
                st = await status(device)
                assert (st["outbox_pending"], st["dropped"]) == (3, 0)
                health = (await device.get("/healthz")).json()
                assert "does not know the analyzer's current Paillier key" in (
                    health["last_upload_error"])
                # 2. the analyzer is redeployed with key B.
                analyzer.target = httpx.ASGITransport(b_app)
                await eventually(lambda: _dropped(device, 3), what="stale reports dropped")
                assert keys.get("sum").key_id == key_b.key_id
                st = await status(device)
                assert (st["feedbacks"], st["outbox_pending"], st["uploaded"]) == (3, 0, 0)
                metrics = (await device.get("/metrics")).text
                assert "privbandit_device_dropped_reports 3.0" in metrics
                assert 'privbandit_device_upload_events_total{event="dropped"} 3.0' in metrics
                # 3. new reports under B's key go through and are counted by B.
                await secure_feedbacks(s, 10, rng)
                await eventually(lambda: counted(b_client, "sum", 10), what="counted by B")
                st = await status(device)
                assert (st["feedbacks"], st["uploaded"], st["dropped"]) == (13, 10, 3)
        assert (await b_client.get("/v1/tasks/sum/privacy")).json()["reports_counted"] == 10
        assert (await a_client.get("/v1/tasks/sum/privacy")).json()["reports_counted"] == 0


async def _fetched_more(keys: Any, n: int) -> bool:
    return keys.fetches >= n


async def _dropped(client: httpx.AsyncClient, n: int) -> bool:
    return (await status(client))["dropped"] >= n


def test_the_device_checks_the_analyzers_secure_sum_parameters() -> None:
    """A config whose layout differs from what the device derives (c, m, l), a task the
    analyzer does not run as secure-sum, or a key below the minimum is refused."""
    from services.device.secure_sum import ConfigMismatch, check_config
    from shared.crypto.paillier import generate_keypair
    from shared.crypto.slots import layout
    from shared.protocol.messages import TaskInfo
    from shared.protocol.secure_sum import paillier_config

    public, _ = generate_keypair(512, allow_small=True)
    info = TaskInfo(id="sum", threat_model="shuffle", algo="sblb-fixed", d=3, K=4,
                    batch_size=10, aggregation="secure-sum", policy=SUM.policy.model_dump())
    good = paillier_config(public.n, layout(9, 10, 1, 512))
    assert check_config(SUM, info, good, 512) == good.layout
    bad = [
        (info, paillier_config(public.n, layout(9, 10, 2, 512)), 512),  # m = 2
        (info, paillier_config(public.n, layout(9, 20, 1, 512)), 512),  # l = 20
        (info, paillier_config(public.n, layout(14, 10, 1, 512)), 512),  # d = 4
        (info, paillier_config(public.n), 512),  # no layout
        (info, good, 2048),  # key too small
        (info.model_copy(update={"aggregation": "reports"}), good, 512),
        (info.model_copy(update={"batch_size": 20}),
         paillier_config(public.n, layout(9, 20, 1, 512)), 512),  # analyzer and device disagree
    ]
    for task_info, config, min_bits in bad:
        with pytest.raises(ConfigMismatch):
            check_config(SUM, task_info, config, min_bits)


async def test_encryption_without_precomputed_randomness_runs_off_the_event_loop() -> None:
    """With the pool empty, a report is still encrypted correctly (r^n computed on the spot, in
    a worker thread that releases the GIL) and counted as a fallback."""
    from services.device.refiller import PoolRefiller
    from services.device.secure_sum import TaskKey
    from shared.crypto.paillier import generate_keypair
    from shared.crypto.slots import layout
    from shared.protocol.secure_sum import paillier_config

    public, private = generate_keypair(512, allow_small=True)
    config = paillier_config(public.n, layout(9, 10, 1, 512))
    assert config.layout is not None
    enc = PaillierEncryptor.from_config(config)
    key = TaskKey(config, config.layout, enc, PoolRefiller(enc, 1))  # refiller never started
    assert not key.encrypt_inline_ok()
    counts = np.array([1, 0, 1, 1, 0, 0, 1, 0, 1])
    report = await asyncio.to_thread(key.encrypt_in_thread, counts)
    assert enc.fallbacks == 1
    (plain,) = decrypt_sum(private, decode_ciphertexts(report.ct, int(public.n), 1))
    np.testing.assert_array_equal(unpack([plain], 9, 10, 1, 512, n_reports=1), counts)
