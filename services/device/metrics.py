"""Prometheus metrics of one device app (its own CollectorRegistry, so apps in one process —
tests, or several devices — never share or clash on counters)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from privbandit.services.common.metrics import GROUP_SIZES, ServiceMetrics
from privbandit.services.device.transports.paillier import TaskKey


class Versioned(Protocol):
    """Any published model of any policy family: the metrics read only its version."""

    @property
    def version(self) -> int: ...


class DeviceMetrics(ServiceMetrics):
    def __init__(self) -> None:
        super().__init__("device")
        task = ["task"]
        self.decisions = self.counter("decisions", "Decisions answered", task)
        self.feedbacks = self.counter("feedbacks", "Feedbacks turned into queued reports", task)
        self.withheld = self.counter(
            "feedbacks_withheld", "Feedbacks accepted whose person had reached the task's bound "
            "(no report made)", task)
        self.rejected = self.counter("requests_rejected", "Requests answered with a 4xx", ["code"])
        self.uploads = self.counter(
            "upload_events",
            "Outbox events: uploaded, dead_lettered, dropped (reports), failures (attempts)",
            ["event"],
        )
        self.model_version = self.gauge("model_version", "Cached model version", task)
        self.model_updates = self.counter("model_updates", "Models installed", ["task", "source"])
        self.commit_group = self.histogram(
            "commit_group_ops", "Store operations (feedbacks, outbox reads and deletions) made "
            "durable per commit", GROUP_SIZES)
        self.decide_seconds = self.histogram(
            "decide_seconds", "Time to answer a decide request",
            (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5),
        )
        self.outbox_pending = self.gauge(
            "outbox_pending", "Sealed reports not yet accepted by the shuffler")
        self.dead_letters = self.gauge(
            "dead_letters", "Reports the shuffler refused permanently")
        self.dropped = self.gauge(
            "dropped_reports",
            "Secure-sum reports dropped: encrypted under a Paillier key the analyzer no longer has",
        )
        self.paillier_pool = self.gauge(
            "paillier_pool", "Precomputed Paillier obfuscators r^n mod n²", task)
        self.paillier_fallbacks = self.gauge(
            "paillier_fallbacks",
            "Encryptions that found the pool empty and computed r^n on the request path "
            "(current key)", task,
        )
        self.paillier_key = self.gauge("paillier_key_id", "Paillier key id in use", task)
        self.paillier_computed = self.gauge(
            "paillier_computed",
            "Obfuscators r^n mod n² computed for the pool in the background (current key)", task)

    def bind_store(
        self, pending: Callable[[], float], dead: Callable[[], float], dropped: Callable[[], float]
    ) -> None:
        """Read the outbox gauges from the store's committed counters at scrape time."""
        self.outbox_pending.set_function(pending)
        self.dead_letters.set_function(dead)
        self.dropped.set_function(dropped)

    def on_paillier_key(self, task: str, key: TaskKey) -> None:
        """A (new) Paillier key for a task: read its pool at scrape time."""
        enc = key.encryptor
        self.paillier_key.labels(task).set(key.key_id)
        self.paillier_pool.labels(task).set_function(lambda: enc.pool_size)
        self.paillier_fallbacks.labels(task).set_function(lambda: enc.fallbacks)
        refiller = key.refiller
        self.paillier_computed.labels(task).set_function(lambda: refiller.computed)

    def on_model(self, task: str, model: Versioned, source: str) -> None:
        self.model_version.labels(task).set(model.version)
        self.model_updates.labels(task, source).inc()

    def on_upload(self, event: str, n: int) -> None:
        self.uploads.labels(event).inc(n)
