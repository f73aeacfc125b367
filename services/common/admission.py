"""Admission control: a bound on the requests a service works on at once (issue 26 item 3).

A service on a small machine that takes every request queues without bound: at 200 concurrent
clients the device answered decide in 13.5 s at the median and 45 s at worst, and nothing told a
client to back off. Past its throughput, a request admitted later only waits longer, so beyond
a bound of requests in flight (admitted, not yet answered) the next one is refused at once with
503 ``overloaded`` and a ``Retry-After`` — before its body is read, a dependency resolved or a
handler called — and counted (``privbandit_<service>_requests_shed_total``). The clients of the
project (the demo driver, the device's outbox, the shuffler's delivery) retry a 503 after at
least its Retry-After.

What counts is every request the server has read and not answered, not only those the app is
working on: a decide is answered in one step of the event loop, so the app holds it only while
it runs, and under load the requests waiting for their turn are in the loop's queue. Counting
only the app's requests, the device at 200 users shed mostly feedbacks (which wait for a commit)
and admitted the queued decides: decide p99 115–118 ms against 61–74 ms with the server's count
(docs/benchmarks/load.md, "Overload", runs alternated). The server's protocol
(``services.common.server.HeadTimeoutProtocol``) stamps each request with that number, itself
included, as it is read (``scope["extensions"][BACKLOG]``); a request whose number exceeds the
bound is shed when its turn comes, at the cost of its 503 only. Exempt requests (long-lived model
streams) are in the server's number too: those in progress are subtracted. Without the stamp (an
app served by another server, tests over ``httpx.ASGITransport``) the bound applies to the
requests in the app.

One event loop per service process: the counters need no lock (``__call__`` runs on the loop).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from privbandit.services.common.errors import Overloaded
from privbandit.shared.protocol.messages import ErrorBody

# Never shed: an orchestrator's liveness probe and the metrics that show the overload must
# answer precisely when the service is busiest; both are cheap.
ALWAYS_ADMITTED = frozenset({"/healthz", "/metrics"})

# ``scope["extensions"][BACKLOG]``: the requests the server had read and not answered when it read
# this one, itself included (set by ``services.common.server.HeadTimeoutProtocol``).
BACKLOG = "privbandit.backlog"

# Called with the refused request's scope (e.g. to count it).
ShedHook = Callable[[Scope], None]


class AdmissionMiddleware:
    """At most ``limit`` HTTP requests in flight through ``app``; one more is answered 503
    ``overloaded`` with ``Retry-After: retry_after`` without calling ``app``, and
    ``on_shed(scope)`` is called. Requests whose path is in ``exempt`` or ends with one of
    ``exempt_suffixes`` (e.g. long-lived streams with a bound of their own) pass uncounted."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limit: int,
        retry_after: int,
        exempt: Collection[str] = ALWAYS_ADMITTED,
        exempt_suffixes: tuple[str, ...] = (),
        on_shed: ShedHook | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError("the in-flight limit must be at least 1")
        self.app = app
        self.limit = limit
        self.retry_after = retry_after
        self.exempt = frozenset(exempt)
        self.exempt_suffixes = exempt_suffixes
        self.on_shed = on_shed
        # The refusal, rendered once: under overload most answers are this one, and each costs
        # the loop time the admitted requests wait for.
        body = ErrorBody(
            code=Overloaded.default_code,
            message=f"the service is at its bound of {limit} requests in flight; retry after "
                    f"{retry_after} s").model_dump_json().encode()
        self._refusal_start: Message = {
            "type": "http.response.start", "status": Overloaded.status,
            "headers": [(b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"retry-after", str(retry_after).encode())],
        }
        self._refusal_body: Message = {"type": "http.response.body", "body": body}
        self.in_flight = 0  # admitted requests, not yet answered
        self.exempt_in_flight = 0  # exempt requests (e.g. streams) in progress
        self.shed = 0

    def _exempt(self, path: str) -> bool:
        return path in self.exempt or (bool(self.exempt_suffixes)
                                       and path.endswith(self.exempt_suffixes))

    def over(self, scope: Scope) -> bool:
        """Whether admitting this request would exceed the bound: the app holds ``limit``
        requests, or the server had more than ``limit`` unanswered non-exempt requests, this one
        included, when it read it."""
        if self.in_flight >= self.limit:
            return True
        backlog = scope.get("extensions", {}).get(BACKLOG)
        return backlog is not None and backlog - self.exempt_in_flight > self.limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._exempt(scope["path"]):
            self.exempt_in_flight += 1
            try:
                await self.app(scope, receive, send)
            finally:
                self.exempt_in_flight -= 1
            return
        if self.over(scope):
            self.shed += 1
            if self.on_shed is not None:
                self.on_shed(scope)
            await send(self._refusal_start)
            await send(self._refusal_body)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
