"""The bound on open model streams (issue 13), over a real uvicorn server: past
``limits.model_streams`` open streams (all tasks together) a new one is refused with 503
``too_many_streams`` and a Retry-After, counted in a metric; a slot frees as soon as a stream
ends, also when its client just goes away; polling the model is never refused."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import httpx

from privbandit.services.analyzer.app import create_app
from privbandit.services.analyzer.server import build_server
from privbandit.services.device.cache import ModelCache
from privbandit.shared.settings import Limits
from tests.helpers import error, eventually, make_settings, patience
from tests.services.analyzer.support import next_event


@asynccontextmanager
async def serving(tmp_path: Path, limit: int) -> AsyncIterator[str]:
    settings = make_settings(tmp_path / "data", limits=Limits(model_streams=limit, retry_after=5))
    server = build_server(create_app(settings, sse_keepalive=0.2), "127.0.0.1", 0,
                          log_level="warning")
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(patience(20)):
            while not server.started:
                await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        await task


async def open_stream(
    stack: AsyncExitStack, client: httpx.AsyncClient, task: str
) -> AsyncIterator[str]:
    """Open a model stream and read its first model; keep the returned line iterator while the
    stream should stay open (dropping a half-read iterator closes the response)."""
    resp = await stack.enter_async_context(client.stream("GET", f"/v1/tasks/{task}/model/stream"))
    assert resp.status_code == 200
    lines = resp.aiter_lines()
    assert await next_event(lines) == {"retry": "2000"}
    assert (await next_event(lines))["event"] == "model"
    return lines


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no metric {name}")


async def test_streams_beyond_the_cap_are_refused_and_a_slot_frees_when_one_ends(
    tmp_path: Path,
) -> None:
    async with asyncio.timeout(patience(60)), serving(tmp_path, limit=2) as base, \
            httpx.AsyncClient(base_url=base, timeout=patience(10)) as client:
        first, second = AsyncExitStack(), AsyncExitStack()
        held = [await open_stream(first, client, "shuf"),
                await open_stream(second, client, "loc")]  # the cap is per analyzer, all tasks
        resp = await client.get("/v1/tasks/shuf/model/stream")
        error(resp, 503, "too_many_streams")
        assert resp.headers["Retry-After"] == "5"
        # Polling the model still works.
        assert (await client.get("/v1/tasks/shuf/model")).status_code == 200
        text = (await client.get("/metrics")).text
        assert metric(text, 'privbandit_analyzer_model_streams_refused_total{task="shuf"}') == 1
        assert metric(text, "privbandit_analyzer_model_streams_open") == 2
        assert metric(text, 'privbandit_analyzer_sse_clients{task="shuf"}') == 1

        await first.aclose()  # the client goes away: the server notices and frees the slot

        async def admitted() -> bool:
            async with client.stream("GET", "/v1/tasks/shuf/model/stream") as r:
                return r.status_code == 200

        await eventually(admitted, timeout=10, what="a freed stream slot")
        await second.aclose()
        del held

        async def all_closed() -> bool:
            # The slots and each task's gauge of connected clients, released on disconnect.
            text = (await client.get("/metrics")).text
            return (metric(text, "privbandit_analyzer_model_streams_open") == 0
                    and metric(text, 'privbandit_analyzer_sse_clients{task="shuf"}') == 0
                    and metric(text, 'privbandit_analyzer_sse_clients{task="loc"}') == 0)

        await eventually(all_closed, timeout=10, what="every slot released")


async def test_the_cap_holds_under_a_burst_of_connections(tmp_path: Path) -> None:
    async with asyncio.timeout(patience(60)), serving(tmp_path, limit=3) as base, \
            httpx.AsyncClient(base_url=base, timeout=patience(10)) as client, \
            AsyncExitStack() as held:

        async def try_open() -> int:
            resp = await held.enter_async_context(
                client.stream("GET", "/v1/tasks/shuf/model/stream"))
            return resp.status_code

        codes = sorted(await asyncio.gather(*(try_open() for _ in range(10))))
        assert codes == [200] * 3 + [503] * 7


async def test_a_refused_device_waits_the_retry_after_before_its_next_stream(
    tmp_path: Path,
) -> None:
    """The device's model cache, refused a stream (503 ``too_many_streams``, Retry-After 5),
    polls instead and tries the stream again no sooner than the Retry-After — its own schedule
    (jittered around 2 s for a first failure) would come back sooner."""
    async with asyncio.timeout(patience(60)), serving(tmp_path, limit=1) as base, \
            httpx.AsyncClient(base_url=base, timeout=patience(10)) as client, \
            AsyncExitStack() as stack:
        await open_stream(stack, client, "loc")  # the one slot, held
        cache = ModelCache(make_settings(tmp_path / "device"), client)
        following = asyncio.create_task(cache._follow("shuf"))  # noqa: SLF001
        try:
            async def refused() -> bool:
                return "shuf" in cache.stream_pause

            await eventually(refused, timeout=20, what="the stream refused once")
            assert "shuf" not in cache.streaming
            assert 5.0 <= cache.stream_pause["shuf"] <= 30.0
            assert cache.model("shuf").version == 0  # the poll answered meanwhile
        finally:
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
