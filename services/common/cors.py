"""Cross-origin access for browsers (issue 41): the routes a browser client needs, and only
for the origins the deployment lists (``Settings.browser_origins``; none by default).

A browser refuses a page's cross-origin ``fetch`` unless the answer carries
``Access-Control-Allow-Origin`` for the page's origin, and asks first with a preflight
``OPTIONS`` for anything beyond a simple GET (a JSON POST, an ``If-None-Match`` header). Other
clients ignore CORS entirely: it protects the *visitor's* browser from pages it did not mean to
trust, it is not an access control of the service. So nothing changes for them here: no route
answers differently without an ``Origin`` header, and no header the service sent before is
taken away.

What is granted, and why no more:

- only the listed origins, exactly (no wildcard, no ``null``): a page of another site cannot
  read a model stream or upload reports in its visitors' names;
- no credentials (``Access-Control-Allow-Credentials`` is never sent): a browser client needs no
  cookie or HTTP authentication, and the shuffler's bearer token must never be usable from a
  page;
- only the paths in ``routes`` (path templates like ``/v1/tasks/{task}/model``), each with the
  methods it has: the analyzer's ``/status`` page, ``/metrics`` and the shuffler's batch routes
  answer a preflight with no CORS headers (the browser then refuses);
- request headers ``Content-Type`` (a JSON upload), ``If-None-Match`` (the model's ETag poll) and
  ``Last-Event-ID`` (an ``EventSource`` reconnecting); response headers ``ETag`` and
  ``Retry-After`` readable by the page.

Built on Starlette's ``CORSMiddleware`` (the maintained implementation of the preflight rules),
applied to the listed paths only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

ALLOWED_HEADERS = ("Content-Type", "If-None-Match", "Last-Event-ID")
EXPOSED_HEADERS = ("ETag", "Retry-After")
# How long a browser may cache a preflight's answer (seconds).
PREFLIGHT_MAX_AGE = 600


def template_pattern(template: str) -> str:
    """The regular expression of one path template: ``{name}`` matches one path segment."""
    parts = re.split(r"(\{[a-z_]+\})", template)
    return "".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts)


class BrowserCORS:
    """Starlette's ``CORSMiddleware`` for the paths of ``routes`` (template → its methods),
    for exactly ``origins``; any other path goes to ``app`` untouched."""

    def __init__(self, app: ASGIApp, *, origins: Sequence[str],
                 routes: dict[str, tuple[str, ...]]) -> None:
        self.app = app
        # One CORS middleware per method set, so a preflight for a method a path does not have
        # is refused (400, without CORS headers) as Starlette refuses any disallowed method.
        by_methods: dict[tuple[str, ...], list[str]] = {}
        for template, methods in routes.items():
            by_methods.setdefault(tuple(sorted(methods)), []).append(template_pattern(template))
        self.matchers: list[tuple[re.Pattern[str], ASGIApp]] = [
            (re.compile("(?:" + "|".join(patterns) + ")"),
             CORSMiddleware(app, allow_origins=list(origins), allow_methods=list(methods),
                            allow_headers=list(ALLOWED_HEADERS),
                            expose_headers=list(EXPOSED_HEADERS),
                            allow_credentials=False, max_age=PREFLIGHT_MAX_AGE))
            for methods, patterns in by_methods.items()
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            for pattern, cors in self.matchers:
                if pattern.fullmatch(path):
                    await cors(scope, receive, send)
                    return
        await self.app(scope, receive, send)
