"""``services.common.server.HeadTimeoutProtocol`` in-process: every request read is stamped with
the number of requests the server has read and not answered (admission control sheds by it), and
the head timer runs only while a request head is incomplete. The real-socket behaviour (partial
heads closed, the connection limit) is in ``tests/e2e/test_connections.py``."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from starlette.types import Receive, Scope, Send
from uvicorn.server import ServerState

from privbandit.services.common.admission import BACKLOG
from privbandit.services.common.server import HeadTimeoutProtocol


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 1), "peername": ("127.0.0.1", 2)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def test_requests_are_stamped_with_the_unanswered_count_and_heads_are_timed() -> None:
    seen: list[Scope] = []
    release = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope)
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    config = uvicorn.Config(app, http=HeadTimeoutProtocol.with_header_timeout(3600),
                            log_level="warning")
    config.load()
    state = ServerState()
    protocols = []
    for _ in range(3):
        proto = config.http_protocol_class(  # type: ignore[call-arg]  # uvicorn's own call
            config=config, server_state=state, app_state={})
        assert isinstance(proto, HeadTimeoutProtocol)
        proto.connection_made(Transport())
        assert proto._head_timer is not None  # a new connection: its head is timed
        protocols.append(proto)
    protocols[0].data_received(b"GET /a HTTP/1.1\r\nHost: x\r\n")
    assert protocols[0]._head_timer is not None  # still incomplete
    for proto in protocols:
        proto.data_received(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"[
            len(b"GET /a HTTP/1.1\r\nHost: x\r\n") if proto is protocols[0] else 0:])
        assert proto._head_timer is None  # complete: no longer timed
    await asyncio.sleep(0)
    assert [scope["extensions"][BACKLOG] for scope in seen] == [1, 2, 3]
    release.set()
    for _ in range(10):
        await asyncio.sleep(0)
    assert not state.tasks
    for proto in protocols:
        assert proto.transport.written.startswith(b"HTTP/1.1 200")  # type: ignore[attr-defined]  # our Transport
        proto.connection_lost(None)
        assert proto._head_timer is None
