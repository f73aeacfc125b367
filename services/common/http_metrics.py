"""Per-route HTTP metrics of every service (issue 26, "What an operator looks at"): request
rate, errors and latency by route, measured by ``prometheus-fastapi-instrumentator``'s ASGI
middleware and recorded on the service's own registry.

Two series per app (``<prefix>`` = ``privbandit_<service>_``):

- ``<prefix>http_requests_total{handler, method, status}``: requests answered, by route
  template, method and exact status code (rate: ``rate(...[5m])``; errors: ``status=~"5.."``);
- ``<prefix>http_request_duration_seconds{handler, method}``: time from the request's arrival
  until its response headers are sent (a model stream counts the time to open it, not how long
  it stays open).

Labels are bounded whatever clients send (an attacker must not blow up the label set): the
handler is one of the app's route templates (``/v1/tasks/{task}/model``), never a raw path —
a path no route matches, or one the library reports raw (its trailing-slash case), is
``none``; a method outside the standard ones is ``other``; status codes are the few the
services answer with.

The metrics are created without a registry when the app is built (``build_app``) and registered
on the runtime's ``ServiceMetrics`` registry for each lifespan (``register``), so that
``/metrics`` shows them with the service's own metrics and several apps in one process keep
their series apart.
"""

from __future__ import annotations

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_fastapi_instrumentator import Instrumentator
from prometheus_fastapi_instrumentator.metrics import Info

# Seconds, from a cached GET (well under a millisecond) to a large batch post (seconds).
HTTP_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# RFC 9110 §9 methods (and PATCH); anything else a client sends is recorded as ``other``.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE",
                     "CONNECT"})
UNMATCHED = "none"
OTHER_METHOD = "other"


class HttpMetrics:
    """One app's HTTP metrics (see the module docstring)."""

    def __init__(self, service: str) -> None:
        prefix = f"privbandit_{service}_"
        self.requests = Counter(
            prefix + "http_requests", "HTTP requests answered, by route template, method and "
            "status code", ["handler", "method", "status"], registry=None)
        self.seconds = Histogram(
            prefix + "http_request_duration_seconds", "Time from a request's arrival until "
            "its response headers are sent, by route template and method",
            ["handler", "method"], buckets=HTTP_SECONDS, registry=None)
        self._templates: frozenset[str] | None = None
        self._app: FastAPI | None = None

    def instrument(self, app: FastAPI) -> None:
        """Add the instrumentator's middleware to ``app`` (call it after the app's other
        middleware, so that it is the outermost and sees every answer, 413s and 429s
        included)."""
        self._app = app
        # The library's own default metrics (and their registry) are not used: ``observe``
        # is the only instrumentation, so the throw-away registry stays empty.
        Instrumentator(
            should_group_status_codes=False,
            should_ignore_untemplated=False,
            should_group_untemplated=True,
            should_instrument_requests_inprogress=False,
            registry=CollectorRegistry(auto_describe=False),
        ).add(self.observe).instrument(app)

    def templates(self) -> frozenset[str]:
        """The app's route templates (read once, at the first request: routes are all added
        before an app serves)."""
        if self._templates is None:
            routes = self._app.routes if self._app is not None else []
            self._templates = frozenset(
                path for route in routes if isinstance(path := getattr(route, "path", None), str)
            )
        return self._templates

    def labels(self, handler: str, method: str) -> tuple[str, str]:
        """Bounded labels: a known route template or ``none``, a standard method or
        ``other``."""
        return (handler if handler in self.templates() else UNMATCHED,
                method if method in METHODS else OTHER_METHOD)

    def observe(self, info: Info) -> None:
        handler, method = self.labels(info.modified_handler, info.method)
        self.requests.labels(handler, method, info.modified_status).inc()
        # Zero when no response started (the app raised): then the whole time.
        seconds = info.modified_duration_without_streaming or info.modified_duration
        self.seconds.labels(handler, method).observe(seconds)

    def register(self, registry: CollectorRegistry | None) -> None:
        """Show these metrics on ``registry`` (a runtime's, new for each lifespan: nothing to
        unregister, the old registry goes with its runtime)."""
        if registry is not None:
            registry.register(self.requests)
            registry.register(self.seconds)
