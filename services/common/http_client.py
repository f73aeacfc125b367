"""The HTTP client a service uses to call another (device → shuffler uploads, shuffler →
analyzer deliveries): httpx's API over aiohttp's connection pool.

httpx's own pool (httpcore over anyio) costs several times aiohttp's CPU per request on loopback,
and these calls are per report or per batch: the shuffler spent most of its CPU in httpcore
delivering batches (docs/benchmarks/test-suite.md). ``httpx_aiohttp.AiohttpTransport`` (the aiohttp
transport of one of httpx's maintainers) keeps the httpx API that the services and their tests
are written against: responses, errors, and injected transports (a test passes
``httpx.ASGITransport`` or a mock, and that is used instead).

Errors: ``AiohttpTransport`` maps aiohttp's connection, timeout and payload errors to httpx's
``TransportError`` kinds and lets any other aiohttp error through; ``ServiceTransport`` maps
those too (a malformed answer is an ``httpx.RemoteProtocolError``), so a caller that retries on
``httpx.TransportError`` retries on everything the network can do to it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from privbandit.services.common.logs import request_id_hook


class ServiceTransport(AiohttpTransport):
    """``AiohttpTransport`` whose every aiohttp error is an ``httpx.TransportError``."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await super().handle_async_request(request)
        except aiohttp.ClientError as exc:
            raise httpx.RemoteProtocolError(f"{type(exc).__name__}: {exc}",
                                            request=request) from exc
        response.stream = _MappedStream(response.stream, request)
        return response


class _MappedStream(httpx.AsyncByteStream):
    """A response body whose aiohttp errors while reading are httpx's."""

    def __init__(self, inner: httpx.AsyncByteStream | httpx.SyncByteStream,
                 request: httpx.Request) -> None:
        assert isinstance(inner, httpx.AsyncByteStream)
        self.inner = inner
        self.request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.inner:
                yield chunk
        except aiohttp.ClientError as exc:
            raise httpx.ReadError(f"{type(exc).__name__}: {exc}", request=self.request) from exc

    async def aclose(self) -> None:
        await self.inner.aclose()


def service_client(
    base_url: str, timeout: float, transport: httpx.AsyncBaseTransport | None = None,
    *, propagate: bool = True,
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for ``base_url`` with ``timeout`` seconds for connecting and
    each read; over aiohttp unless a ``transport`` is given (tests). Every call carries an
    ``X-Request-ID``: the handled request's when ``propagate``, else its own
    (``services.common.logs``)."""
    return httpx.AsyncClient(base_url=base_url, timeout=timeout,
                             transport=transport if transport is not None
                             else ServiceTransport(),
                             event_hooks={"request": [request_id_hook(propagate=propagate)]})
