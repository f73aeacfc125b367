"""Prometheus metrics of one analyzer app (own registry, so several apps can share a process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class AnalyzerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.batches = Counter(
            "privbandit_analyzer_batches", "Batches received", ["task", "outcome"], registry=r
        )
        self.reports_counted = Counter(
            "privbandit_analyzer_reports_counted", "Reports counted into the model", ["task"],
            registry=r,
        )
        self.reports_rejected = Counter(
            "privbandit_analyzer_reports_rejected",
            "Reports that failed decryption or validation", ["task"], registry=r,
        )
        self.reports_duplicate = Counter(
            "privbandit_analyzer_reports_duplicate",
            "Reports dropped because their report id was already counted", ["task"], registry=r,
        )
        self.ingest_seconds = Histogram(
            "privbandit_analyzer_batch_ingest_seconds",
            "Time to decrypt, validate, aggregate and commit one batch (or one group of batches "
            "that waited together)", ["task"], registry=r,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.group_batches = Histogram(
            "privbandit_analyzer_group_batches", "Batches committed per transaction", ["task"],
            registry=r, buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
        )
        self.model_version = Gauge(
            "privbandit_analyzer_model_version", "Current published model version", ["task"],
            registry=r,
        )
        self.sse_clients = Gauge(
            "privbandit_analyzer_sse_clients", "Open model-stream connections", ["task"],
            registry=r,
        )
