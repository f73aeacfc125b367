"""Admission control (``services.common.admission``, issue 26 item 3): beyond the bound of
requests in flight a request is answered 503 ``overloaded`` with Retry-After before the handler
runs; answered requests free their slots; health and metrics are never shed; every service app
carries the bound of its settings and counts what it sheds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from privbandit.services.common.admission import BACKLOG, AdmissionMiddleware
from privbandit.shared.settings import Limits
from tests.helpers import error, make_settings, patience


class Gate:
    """An ASGI app whose requests wait until released; it counts the calls it received."""

    def __init__(self) -> None:
        self.calls = 0
        self.open = asyncio.Event()
        self.entered = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        self.entered.set()
        if scope["path"] not in ("/healthz", "/metrics"):
            await self.open.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def wait_until(condition: object, seconds: float = 5.0) -> None:
    async with asyncio.timeout(patience(seconds)):
        while not condition():  # type: ignore[operator]  # a callable, typed loosely for brevity
            await asyncio.sleep(0.001)


async def test_a_request_beyond_the_bound_is_refused_before_the_handler() -> None:
    gate = Gate()
    shed: list[str] = []
    middleware = AdmissionMiddleware(gate, limit=2, retry_after=7,
                                     on_shed=lambda scope: shed.append(scope["path"]))
    transport = httpx.ASGITransport(app=middleware)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        held = [asyncio.create_task(client.post("/work", content=b"x")) for _ in range(2)]
        await wait_until(lambda: gate.calls == 2 and middleware.in_flight == 2)

        refused = await client.post("/work", content=b"x" * 1000)
        body = error(refused, 503, "overloaded")
        assert refused.headers["retry-after"] == "7"
        assert "2 requests in flight" in body.message
        assert gate.calls == 2  # the handler never saw it
        assert shed == ["/work"] and middleware.shed == 1

        # Health and metrics are admitted (and not counted) while the bound is reached.
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/metrics")).status_code == 200
        assert middleware.in_flight == 2 and gate.calls == 4

        gate.open.set()
        assert [r.status_code for r in await asyncio.gather(*held)] == [200, 200]
        assert middleware.in_flight == 0
        # Answered requests freed their slots: the next ones are admitted again.
        again = await asyncio.gather(*(client.post("/work") for _ in range(2)))
        assert [r.status_code for r in again] == [200, 200]
        assert middleware.shed == 1 and gate.calls == 6


async def test_a_failing_handler_frees_its_slot() -> None:
    async def boom(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("boom")

    middleware = AdmissionMiddleware(boom, limit=1, retry_after=1)
    for _ in range(3):
        with pytest.raises(RuntimeError):
            await middleware({"type": "http", "path": "/x"}, None, None)  # type: ignore[arg-type]  # boom reads neither
    assert middleware.in_flight == 0 and middleware.shed == 0


async def test_exempt_suffixes_are_not_counted() -> None:
    gate = Gate()
    middleware = AdmissionMiddleware(gate, limit=1, retry_after=1,
                                     exempt_suffixes=("/model/stream",))
    transport = httpx.ASGITransport(app=middleware)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        streams = [asyncio.create_task(client.get(f"/v1/tasks/{t}/model/stream"))
                   for t in ("a", "b")]
        await wait_until(lambda: gate.calls == 2)
        assert middleware.in_flight == 0
        held = asyncio.create_task(client.get("/v1/tasks/a"))
        await wait_until(lambda: middleware.in_flight == 1)
        error(await client.get("/v1/tasks/b"), 503, "overloaded")
        gate.open.set()
        await asyncio.gather(held, *streams)


def test_every_service_has_a_bound_and_others_none() -> None:
    limits = Limits()
    assert all(isinstance(limits.requests(s), int) for s in ("device", "shuffler", "analyzer"))
    assert limits.requests("probe") is None
    assert Limits(device_requests=3).requests("device") == 3


async def test_a_device_app_sheds_beyond_its_setting_and_counts_it(tmp_path: Path) -> None:
    """The device app built from its settings carries the bound, and its ``/metrics`` counts
    the shed requests (``privbandit_device_requests_shed_total``)."""
    from privbandit.services.device.app import create_app
    from tests.helpers import running

    settings = make_settings(tmp_path, limits={"device_requests": 1, "retry_after": 4})
    app = create_app(settings)
    # The stack Starlette would build at the first request, built now to reach the middleware.
    app.middleware_stack = app.build_middleware_stack()
    admission = app.middleware_stack
    while not isinstance(admission, AdmissionMiddleware):
        admission = admission.app  # type: ignore[attr-defined]  # each middleware wraps .app
    assert admission.limit == 1 and admission.retry_after == 4
    async with running(app) as client:
        # One request in flight (held by the admission counter as a stuck handler would).
        admission.in_flight = 1
        r = await client.post("/v1/tasks/loc/decide", json={})
        assert error(r, 503, "overloaded") and r.headers["retry-after"] == "4"
        metrics = (await client.get("/metrics")).text
        assert "privbandit_device_requests_shed_total 1.0" in metrics
        admission.in_flight = 0
        # Admitted again: the handler answers (and refuses the empty body itself).
        error(await client.post("/v1/tasks/loc/decide", json={}), 422, "missing_features")


async def test_requests_queued_ahead_count_as_the_server_stamped_them() -> None:
    """A request the server read with more than ``limit`` unanswered requests (itself included)
    is shed although the app holds none: the queue is in the event loop, not in the app. Exempt
    requests in progress (streams) are not counted."""
    streams_end = asyncio.Event()
    handled: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        handled.append(scope["path"])
        if scope["path"].endswith("/model/stream"):
            await streams_end.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    middleware = AdmissionMiddleware(app, limit=3, retry_after=1,
                                     exempt_suffixes=("/model/stream",))

    async def call(path: str, backlog: int) -> int:
        sent: list[dict[str, object]] = []

        async def send(message: dict[str, object]) -> None:
            sent.append(message)

        async def receive() -> dict[str, object]:
            return {"type": "http.request", "body": b"", "more_body": False}

        scope = {"type": "http", "path": path, "method": "POST", "headers": [],
                 "query_string": b"", "extensions": {BACKLOG: backlog}}
        await middleware(scope, receive, send)  # type: ignore[arg-type]  # plain dicts as ASGI messages
        return int(sent[0]["status"])  # type: ignore[call-overload]  # an int by ASGI

    assert await call("/v1/x", 3) == 200
    assert await call("/v1/x", 4) == 503 and handled == ["/v1/x"]
    # Two streams in progress were among the server's four: two requests ahead, admitted.
    streams = [asyncio.create_task(call(f"/v1/tasks/{t}/model/stream", 1)) for t in "ab"]
    await wait_until(lambda: middleware.exempt_in_flight == 2)
    assert await call("/v1/x", 4) == 200
    assert await call("/v1/x", 6) == 503
    streams_end.set()
    assert await asyncio.gather(*streams) == [200, 200]
    assert middleware.exempt_in_flight == 0 and middleware.in_flight == 0 and middleware.shed == 2
