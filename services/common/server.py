"""uvicorn's set-up, the same for every service: the connection settings (``Settings.connections``:
header-read timeout, keep-alive idle timeout, connection limit) on uvicorn's h11 protocol
(issue 26 item 4).

uvicorn has ``timeout_keep_alive`` (idle time between requests) and ``limit_concurrency`` (past
it a request is answered 503), but nothing bounds the time a client takes to send a request
head: its keep-alive timer is armed only after a response and cancelled by the first byte
received, and a new connection has no timer at all, so a client that connects and sends a
partial request line or headers (slowloris) holds a socket and memory for as long as it likes;
1,000 such connections were never closed. A request-start timeout was proposed upstream and not
merged (Kludex/uvicorn#1685, from #157), and an ASGI middleware cannot help: the app is called
only once the head is complete. Hypercorn has a read timeout, but swapping servers changes far
more than this. Hence ``HeadTimeoutProtocol``: uvicorn's own h11 protocol, which closes a
connection whose request head is not complete ``header_timeout`` seconds after the connection
opened or after the head's first byte arrived. It also stamps each request with the number of
requests the server has read and not answered, for admission control
(``services.common.admission``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import h11
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from privbandit.services.common.admission import BACKLOG
from privbandit.shared.settings import Connections

log = logging.getLogger(__name__)


class HeadTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on the request head: ``header_timeout`` seconds
    from the moment the connection opened (a new connection) or the first byte of a request head
    arrived (a kept-alive one), after which a connection still waiting for the rest of its head
    is closed without an answer (as Go's ``ReadHeaderTimeout`` does). The body and the response
    are not timed: a slow consumer of a model stream is the stream's business. Idle time
    between requests stays uvicorn's ``timeout_keep_alive``.

    ``header_timeout`` is a class attribute: uvicorn builds a protocol per connection with
    fixed arguments, so ``with_header_timeout`` makes a subclass carrying the setting."""

    header_timeout: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None

    @classmethod
    def with_header_timeout(cls, seconds: float) -> type[HeadTimeoutProtocol]:
        return type(cls.__name__, (cls,), {"header_timeout": seconds})

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn narrows BaseTransport the same way
        super().connection_made(transport)
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        # uvicorn cancels its keep-alive timer on any byte: from here on only the head timer
        # bounds a connection that never completes its request head.
        super().data_received(data)
        if self.cycle is not cycle and self.cycle is not None:
            # A request was read; its task (in ``server_state.tasks``) has not started yet.
            # Admission control sheds by this number (``services.common.admission``).
            scope = cast(dict[str, Any], self.cycle.scope)
            scope.setdefault("extensions", {})[BACKLOG] = len(self.server_state.tasks)
        if self._awaiting_head():
            if self._head_timer is None:
                self._arm_head_timer()
        else:
            self._cancel_head_timer()

    def on_response_complete(self) -> None:
        # Between requests the keep-alive timer (idle timeout) rules; a byte of the next head
        # arms the head timer again (``data_received``).
        self._cancel_head_timer()
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def _awaiting_head(self) -> bool:
        return self.conn.their_state is h11.IDLE and not self.transport.is_closing()

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._awaiting_head() or (self.cycle is not None
                                         and not self.cycle.response_complete):
            return
        log.debug("%s: request head not complete after %g s; connection closed",
                  self.client or "a client", self.header_timeout)
        try:
            self.conn.send(h11.ConnectionClosed())
        except h11.LocalProtocolError:
            pass
        self.transport.close()


def server_config(
    app: FastAPI,
    host: str,
    port: int,
    connections: Connections,
    *,
    log_level: str,
    access_log: bool,
    graceful_timeout: int,
) -> uvicorn.Config:
    """A uvicorn configuration for a service app: its address, the connection settings
    (``HeadTimeoutProtocol`` for the header timeout, ``timeout_keep_alive`` for the idle one,
    ``limit_concurrency`` for the connection limit) and a graceful shutdown of
    ``graceful_timeout`` whole seconds."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level.lower(),
        # uvicorn's records go to the root logger's one handler (``services.common.logs``): as
        # JSON too when asked, with the service's name and the request id.
        log_config=None,
        access_log=access_log,
        timeout_graceful_shutdown=graceful_timeout,
        http=HeadTimeoutProtocol.with_header_timeout(connections.header_timeout),
        timeout_keep_alive=connections.idle_timeout,
        # Counts open connections (and requests in flight): past it uvicorn answers 503 to a
        # request, before the app sees it.
        limit_concurrency=connections.max_connections,
    )
