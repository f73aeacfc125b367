"""Server-Sent Events over a real uvicorn server (httpx's ASGI transport buffers whole bodies),
and ``python -m services.analyzer`` ending its streams on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from privbandit.launcher import free_ports
from privbandit.services.analyzer.app import create_app
from privbandit.services.analyzer.server import build_server
from privbandit.services.device.cache import ModelCache
from privbandit.shared.protocol.messages import ModelMessage
from privbandit.shared.settings import Settings
from tests.helpers import TOKEN, auth, patience, report_maker
from tests.services.analyzer.support import SHUF, batch, hpke_of, next_event


async def test_model_stream_delivers_current_and_new_models(settings: Settings) -> None:
    app = create_app(settings, sse_keepalive=0.2)
    server = build_server(app, "127.0.0.1", 0, log_level="warning")
    serving = asyncio.create_task(server.serve())
    async with asyncio.timeout(patience(20)):
        while not server.started:
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, timeout=patience(10)) as client:
            make = report_maker(await hpke_of(client))
            async with client.stream("GET", "/v1/tasks/shuf/model/stream") as resp:
                assert resp.status_code == 200
                assert resp.headers["content-type"].startswith("text/event-stream")
                # Nothing between the analyzer and a client may hold events back.
                assert resp.headers["cache-control"] == "no-cache"
                assert resp.headers["x-accel-buffering"] == "no"
                lines = resp.aiter_lines()
                assert (await next_event(lines)) == {"retry": "2000"}
                ev = await next_event(lines)
                assert ev["event"] == "model" and ev["id"] == "0"
                assert ModelMessage.model_validate_json(ev["data"]).version == 0
                # Idle: keep-alive comments.
                assert await next_event(lines) == {"comment": "keep-alive"}
                r = await client.post(
                    "/v1/tasks/shuf/batches", json=batch(make(SHUF, 5)), headers=auth()
                )
                assert r.status_code == 200
                ev = await next_event(lines)
                while "comment" in ev:
                    ev = await next_event(lines)
                assert ev["event"] == "model" and ev["id"] == "1"
                msg = ModelMessage.model_validate_json(ev["data"])
                assert msg.version == 1 and msg.reports == 5
                await reconnections_honour_the_last_event_id_and_retry(client, settings)
                # A stop request ends the stream cleanly and the server finishes.
                server.stop()
                with pytest.raises(EOFError):
                    while True:
                        await next_event(lines)
        await serving


async def reconnections_honour_the_last_event_id_and_retry(
    client: httpx.AsyncClient, settings: Settings,
) -> None:
    """With the task at version 1: a client reconnecting with ``Last-Event-ID: 1`` is not sent
    that model again (one with an older id, or a malformed one, is); the device's model cache
    (httpx-sse) keeps the stream's last id and ``retry:`` and sends the id when it reconnects."""
    for last, resent in (("1", False), ("0", True), ("x1", True), ("9" * 40, True)):
        async with client.stream("GET", "/v1/tasks/shuf/model/stream",
                                 headers={"Last-Event-ID": last}) as resp:
            lines = resp.aiter_lines()
            assert (await next_event(lines)) == {"retry": "2000"}
            ev = await next_event(lines)
            assert (ev.get("id") == "1") is resent, (last, ev)
            if not resent:
                assert ev == {"comment": "keep-alive"}
    sent: list[str | None] = []

    async def record(request: httpx.Request) -> None:
        if request.url.path.endswith("/stream"):
            sent.append(request.headers.get("last-event-id"))

    async with httpx.AsyncClient(base_url=str(client.base_url), timeout=patience(10),
                                 event_hooks={"request": [record]}) as device_client:
        cache = ModelCache(settings, device_client)
        for connections in (1, 2):  # a connection, then a reconnection
            following = asyncio.create_task(cache._stream("shuf"))  # noqa: SLF001
            while (len(sent) < connections or "shuf" not in cache.streaming
                   or cache.model("shuf").version != 1 or "shuf" not in cache.last_event_id):
                await asyncio.sleep(0.01)
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
    assert sent == [None, "1"]
    assert cache.last_event_id["shuf"] == "1" and cache.reconnect["shuf"] == 2.0


@pytest.mark.sqlite_only(
    reason="a subprocess's signal handling, independent of the store; run once"
)
async def test_main_serves_and_sigterm_ends_streams(tmp_path: Path) -> None:
    """``python -m services.analyzer``: a stop signal ends open model streams and the process
    exits cleanly (uvicorn would otherwise wait for the never-ending stream)."""
    port = free_ports(1)[0]
    config = tmp_path / "privbandit.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\nshuffler_token = "{TOKEN}"\nlog_level = "warning"\n'
        '[[tasks]]\nid = "shuf"\nthreat_model = "shuffle"\nK = 4\n'
        '[tasks.policy]\nalgo = "sblb"\nd = 3\neps0 = 4.0\nbatch_size = 5\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVBANDIT_")}
    env.update(PRIVBANDIT_CONFIG=str(config), PYTHONPATH=str(Path(__file__).parents[3]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "privbandit.services.analyzer",
         "--host", "127.0.0.1", "--port", str(port)],
        env=env,
    )
    try:
        async with asyncio.timeout(patience(30)), httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", timeout=10
        ) as client:
            while True:
                try:
                    if (await client.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            async with client.stream("GET", "/v1/tasks/shuf/model/stream") as resp:
                lines = resp.aiter_lines()
                await next_event(lines)
                assert (await next_event(lines))["id"] == "0"
                proc.send_signal(signal.SIGTERM)
                with pytest.raises(EOFError):
                    while True:
                        await next_event(lines)
            while proc.poll() is None:
                await asyncio.sleep(0.05)
        # uvicorn re-raises the captured signal after its graceful shutdown has completed.
        assert proc.returncode in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
