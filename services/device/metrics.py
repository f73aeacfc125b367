"""Prometheus metrics of one device app (its own CollectorRegistry, so apps in one process —
tests, or several devices — never share or clash on counters)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.device.secure_sum import TaskKey
from shared.core.policies import Model


class DeviceMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.decisions = Counter(
            "privbandit_device_decisions", "Decisions answered", ["task"], registry=r
        )
        self.feedbacks = Counter(
            "privbandit_device_feedbacks", "Feedbacks turned into queued reports", ["task"],
            registry=r,
        )
        self.rejected = Counter(
            "privbandit_device_requests_rejected", "Requests answered with a 4xx", ["code"],
            registry=r,
        )
        self.uploads = Counter(
            "privbandit_device_upload_events",
            "Outbox events: uploaded, dead_lettered, dropped (reports), failures (attempts)",
            ["event"], registry=r,
        )
        self.model_version = Gauge(
            "privbandit_device_model_version", "Cached model version", ["task"], registry=r
        )
        self.model_updates = Counter(
            "privbandit_device_model_updates", "Models installed", ["task", "source"], registry=r
        )
        self.decide_seconds = Histogram(
            "privbandit_device_decide_seconds", "Time to answer a decide request",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5), registry=r,
        )
        self.outbox_pending = Gauge(
            "privbandit_device_outbox_pending", "Sealed reports not yet accepted by the shuffler",
            registry=r,
        )
        self.dead_letters = Gauge(
            "privbandit_device_dead_letters", "Reports the shuffler refused permanently",
            registry=r,
        )
        self.dropped = Gauge(
            "privbandit_device_dropped_reports",
            "Secure-sum reports dropped: encrypted under a Paillier key the analyzer no longer has",
            registry=r,
        )
        self.paillier_pool = Gauge(
            "privbandit_device_paillier_pool", "Precomputed Paillier obfuscators r^n mod n²",
            ["task"], registry=r,
        )
        self.paillier_fallbacks = Gauge(
            "privbandit_device_paillier_fallbacks",
            "Encryptions that found the pool empty and computed r^n on the request path "
            "(current key)", ["task"], registry=r,
        )
        self.paillier_key = Gauge(
            "privbandit_device_paillier_key_id", "Paillier key id in use", ["task"], registry=r
        )

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

    def on_model(self, task: str, model: Model, source: str) -> None:
        self.model_version.labels(task).set(model.version)
        self.model_updates.labels(task, source).inc()

    def on_upload(self, event: str, n: int) -> None:
        self.uploads.labels(event).inc(n)
