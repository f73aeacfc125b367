"""The durable outbox: a shuffler outage or a device restart loses nothing, permanently refused
reports are dead-lettered, and a retry re-sends the identical bytes."""

from __future__ import annotations

import httpx
import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from privbandit.services.analyzer.app import create_app as create_analyzer
from privbandit.shared.protocol.messages import ReportUpload
from privbandit.shared.settings import Settings
from tests.helpers import eventually, running

from .support import (
    FakeShuffler,
    Stack,
    delivered,
    device_app,
    give_feedbacks,
    ok,
    outbox_empty,
    stack,
    status,
)


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
        await eventually(lambda: delivered(s, 50), timeout=15, what="drain after outage")
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
        await eventually(lambda: outbox_empty(s), what="dead-lettering")
        metrics = (await s.device.get("/metrics")).text
        assert "privbandit_device_dead_letters 3.0" in metrics
        assert (await status(s.device))["uploaded"] == 0


async def test_outbox_survives_a_device_restart(settings: Settings) -> None:
    rng = np.random.default_rng(11)
    down = FakeShuffler(status=503)
    async with stack(settings, down) as s:
        await give_feedbacks(s, "cen", 12, rng)
        assert (await status(s.device))["outbox_pending"] == 12
    up = FakeShuffler()
    async with stack(settings, up) as s:
        await eventually(lambda: delivered(s, 12), what="upload after restart")
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
            await eventually(lambda: ok(device.get("/healthz")), what="ready")
            s = Stack(device, device, settings, FakeShuffler(), dev)
            await give_feedbacks(s, "cen", 1, rng)
            await eventually(lambda: outbox_empty(s), what="delivery")
    assert len(seen) == 2 and seen[0] == seen[1]
