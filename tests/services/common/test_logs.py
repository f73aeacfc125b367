"""The services' logs and request ids (``services.common.logs``): JSON lines on request, an
``X-Request-ID`` adopted or made by every app, sent by the services' HTTP clients, carried
through the real device, shuffler and analyzer apps on each hop and never across the shuffle;
each service process names itself."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi import APIRouter, FastAPI
from setproctitle import getproctitle, setproctitle

from privbandit.services.analyzer.app import create_app as create_analyzer
from privbandit.services.common.app import build_app
from privbandit.services.common.cli import name_process
from privbandit.services.common.http_client import service_client
from privbandit.services.common.logs import REQUEST_ID, current_request_id, setup_logging
from privbandit.services.shuffler.app import create_app as create_shuffler
from tests.helpers import PAILLIER_TEST_BITS, eventually, make_settings, running, shuffle_task
from tests.services.device.support import device_app, features, ok

log = logging.getLogger("tests.request-ids")


@asynccontextmanager
async def nothing() -> AsyncIterator[object]:
    yield object()


class Recording(httpx.AsyncBaseTransport):
    """An ASGI transport that keeps every request and response it carried. It runs the app in
    a task of its own, as a server would: ``httpx.ASGITransport`` runs it in the caller's
    context, where the callee's request id would overwrite the caller's."""

    def __init__(self, app: FastAPI) -> None:
        self.inner = httpx.ASGITransport(app=app)
        self.exchanges: list[tuple[httpx.Request, httpx.Response]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await asyncio.create_task(self.inner.handle_async_request(request))
        self.exchanges.append((request, response))
        return response


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


def test_json_lines_name_the_service_and_the_request(restore_logging: None) -> None:
    handler = setup_logging("probe", "info", "json")
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(out := io.StringIO())
    log.info("outside a request")
    log.debug("below the level")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == 1
    (line,) = lines
    assert {k: line[k] for k in ("level", "logger", "message", "service", "request_id")} == {
        "level": "INFO", "logger": "tests.request-ids", "message": "outside a request",
        "service": "probe", "request_id": "-"}
    assert "time" in line


def test_text_lines_carry_the_request_id_too(restore_logging: None) -> None:
    handler = setup_logging("probe", "info")
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(out := io.StringIO())
    log.warning("plain")
    assert " probe tests.request-ids WARNING [-] plain" in out.getvalue()


def test_a_service_names_itself_in_ps() -> None:
    before = getproctitle()
    try:
        name_process("shuffler", "0.0.0.0", 8702)
        assert getproctitle() == "privbandit-shuffler 0.0.0.0:8702"
        assert Path("/proc/self/cmdline").read_bytes().startswith(b"privbandit-shuffler")
    finally:
        setproctitle(before)


async def test_an_app_adopts_a_uuid_id_replaces_any_other_and_propagates_it(
    tmp_path: Path,
) -> None:
    """A service app answers with the request's id (a fresh one when absent or not a UUID4, so a
    client cannot write arbitrary text into the logs); a call its handler makes through a
    service client carries the same id, one that does not propagate (the shuffler's to the
    analyzer) carries its own."""
    seen: dict[str, str | None] = {}
    callee_router = APIRouter()

    @callee_router.get("/echo")
    async def echo() -> dict[str, str | None]:
        return {"id": current_request_id()}

    callee = build_app("callee", make_settings(tmp_path / "c"), router=callee_router,
                       runtime=nothing, max_body=64)
    caller_router = APIRouter()

    @caller_router.get("/call")
    async def call() -> dict[str, str | None]:
        for name, propagate in (("carried", True), ("own", False)):
            async with service_client("http://callee", 5.0, Recording(callee),
                                      propagate=propagate) as client:
                seen[name] = (await client.get("/echo")).json()["id"]
        seen["caller"] = current_request_id()
        return {}

    caller = build_app("caller", make_settings(tmp_path / "a"), router=caller_router,
                       runtime=nothing, max_body=64)
    async with running(caller) as client:
        rid = uuid.uuid4().hex
        resp = await client.get("/call", headers={REQUEST_ID: rid})
        assert resp.status_code == 200 and resp.headers[REQUEST_ID] == rid
        assert seen["caller"] == seen["carried"] == rid
        assert seen["own"] is not None and seen["own"] != rid
        uuid.UUID(seen["own"], version=4)
        forged = await client.get("/call", headers={REQUEST_ID: "evil\nINFO forged line"})
        fresh = forged.headers[REQUEST_ID]
        assert fresh != "evil\nINFO forged line" and uuid.UUID(fresh).version == 4
        assert seen["caller"] == seen["carried"] == fresh


async def test_every_hop_through_the_real_apps_carries_an_id_and_the_shuffle_cuts_it(
    tmp_path: Path,
) -> None:
    """Device → shuffler → analyzer in-process: each upload and each batch delivery carries an
    ``X-Request-ID`` that the receiving app adopts (it answers with the same id); the device's
    calls to the analyzer carry one too; no id of a device upload reaches the analyzer (the
    deliveries run outside the uploads' requests, and the shuffler's analyzer client would not
    pass one on anyway: ``propagate=False``, tested above)."""
    settings = make_settings(tmp_path, tasks=[shuffle_task(l=2)])
    analyzer = create_analyzer(settings, paillier_key_bits=PAILLIER_TEST_BITS)
    to_analyzer = Recording(analyzer)
    async with running(analyzer):
        shuffler = create_shuffler(settings, analyzer_transport=to_analyzer)
        to_shuffler = Recording(shuffler)
        device_to_analyzer = Recording(analyzer)
        async with running(shuffler), running(
                device_app(settings, device_to_analyzer, to_shuffler)) as device:
            await eventually(lambda: ok(device.get("/healthz")), what="device ready")
            rng = np.random.default_rng(0)
            for _ in range(4):
                resp = await device.post("/v1/tasks/shuf/decide",
                                         json={"features": features(rng)})
                did = resp.json()["decision_id"]
                resp = await device.post("/v1/tasks/shuf/feedback",
                                         json={"decision_id": did, "reward": 1.0})
                assert resp.status_code == 202, resp.text

            def batches() -> list[tuple[httpx.Request, httpx.Response]]:
                return [(q, r) for q, r in to_analyzer.exchanges
                        if q.method == "POST" and q.url.path.endswith("/batches")]

            async def delivered() -> bool:
                return len(batches()) >= 2

            await eventually(delivered, what="two batches delivered")
    uploads = [(q, r) for q, r in to_shuffler.exchanges if q.method == "POST"]
    assert uploads
    hops = uploads + batches() + device_to_analyzer.exchanges
    for request, response in hops:
        rid = request.headers[REQUEST_ID]
        assert uuid.UUID(rid).version == 4
        assert response.headers[REQUEST_ID] == rid, request.url
    upload_ids = {q.headers[REQUEST_ID] for q, _ in uploads}
    analyzer_ids = {q.headers[REQUEST_ID] for q, _ in to_analyzer.exchanges}
    assert not upload_ids & analyzer_ids
