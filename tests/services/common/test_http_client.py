"""The services' HTTP client (``services.common.http_client``) against a raw TCP server that
misbehaves in each way the network or a hostile peer can: every failure is an
``httpx.TransportError`` (what the uploader, the forwarder and the fetchers retry on), and a
good answer reads as httpx's."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from privbandit.services.common.http_client import ServiceTransport, service_client
from tests.helpers import patience

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _head(reader: asyncio.StreamReader) -> None:
    await reader.readuntil(b"\r\n\r\n")


async def ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    body = b'{"ok":true}'
    while True:  # keep-alive: one answer per request head
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        await writer.drain()


def answers(data: bytes) -> Handler:
    """A peer that reads the request head, sends ``data`` and hangs up."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _head(reader)
        writer.write(data)
        await writer.drain()
        writer.close()

    return handler


MISBEHAVING = {
    "garbage": answers(b"this is not HTTP at all\r\n\r\n"),
    "hang-up": answers(b""),
    "truncated": answers(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789"),
}


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _head(reader)
    await asyncio.sleep(3600)


async def serve(handler: Handler) -> AsyncIterator[str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


def refused_url() -> str:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


async def test_a_good_answer_reads_as_httpx() -> None:
    async for url in serve(ok):
        async with service_client(url, patience(10)) as client:
            assert isinstance(client._transport, ServiceTransport)
            for _ in range(3):  # the connection is kept and reused
                resp = await client.post("/v1/x", json={"a": 1})
                assert resp.status_code == 200 and resp.json() == {"ok": True}


@pytest.mark.parametrize("name", sorted(MISBEHAVING))
async def test_a_misbehaving_peer_is_a_transport_error(name: str) -> None:
    async for url in serve(MISBEHAVING[name]):
        async with service_client(url, patience(10)) as client:
            with pytest.raises(httpx.TransportError):
                resp = await client.post("/v1/x", json={"a": 1})
                resp.raise_for_status()


async def test_a_silent_peer_times_out_as_httpx() -> None:
    async for url in serve(silent):
        async with service_client(url, 0.2) as client:
            with pytest.raises(httpx.TimeoutException):
                await client.post("/v1/x", json={"a": 1})


async def test_nobody_listening_is_a_transport_error() -> None:
    # (httpx_aiohttp 0.2 names a refused connection ConnectTimeout rather than ConnectError;
    # the services retry on either.)
    async with service_client(refused_url(), patience(10)) as client:
        with pytest.raises((httpx.ConnectError, httpx.ConnectTimeout)):
            await client.get("/healthz")


async def test_an_injected_transport_is_used_as_given() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(204)

    mock = httpx.MockTransport(answer)
    async with service_client("http://test", 1.0, mock) as client:
        assert client._transport is mock
        assert (await client.get("/")).status_code == 204
