"""Prometheus metrics the same way in every service: one registry per app (so several apps in one
process, as in the tests, never share or clash on counters), metric names prefixed
``privbandit_<service>_``, and the ``/metrics`` exposition."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

# Histogram buckets (seconds) for work that takes about a millisecond to a second.
SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
# Histogram buckets for group sizes (items per commit).
GROUP_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)


class ServiceMetrics:
    """A service's own registry; subclasses declare their metrics with ``counter``, ``gauge``
    and ``histogram`` (the name without its ``privbandit_<service>_`` prefix)."""

    def __init__(self, service: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.prefix = f"privbandit_{service}_"
        # The process's CPU seconds, resident memory, open and maximum file descriptors and start
        # time (``process_*``, Linux /proc): on this registry, the one ``/metrics`` exposes, not on
        # prometheus_client's default registry, which no service serves.
        ProcessCollector(registry=self.registry)
        # Every service sheds the same way (``services.common.admission``).
        self.requests_shed = self.counter(
            "requests_shed", "Requests refused with 503 overloaded, before any work, at the "
            "bound of requests in flight (limits.<service>_requests)")

    def counter(self, name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(self.prefix + name, doc, list(labels), registry=self.registry)

    def gauge(self, name: str, doc: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(self.prefix + name, doc, list(labels), registry=self.registry)

    def histogram(
        self, name: str, doc: str, buckets: Sequence[float], labels: Sequence[str] = ()
    ) -> Histogram:
        return Histogram(self.prefix + name, doc, list(labels), registry=self.registry,
                         buckets=tuple(buckets))

    def response(self) -> Response:
        """The ``/metrics`` answer: every metric in the text exposition format."""
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


class TxMetrics:
    """A store's PostgreSQL transactions (``services.common.pg.Database.run_tx``):
    ``db_transactions_total{name, outcome}`` (``ok``, ``failed``, and ``retried`` per attempt
    run again after a serialisation failure, a deadlock or a dropped connection) and
    ``db_transaction_seconds{name}`` (a call, its retries included)."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self.transactions = metrics.counter(
            "db_transactions", "PostgreSQL transactions by name and outcome (ok, retried, failed)",
            ["name", "outcome"])
        self.seconds = metrics.histogram(
            "db_transaction_seconds", "Time of one PostgreSQL transaction, retries included",
            SECONDS, ["name"])
