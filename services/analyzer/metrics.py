"""Prometheus metrics of one analyzer app (own registry, so several apps can share a process)."""

from __future__ import annotations

from privbandit.services.common.metrics import ServiceMetrics, TxMetrics

# Seconds to ingest one group: up to 20,000 HPKE reports can take seconds.
INGEST_SECONDS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# Batches per group commit, up to ``ingest.MAX_GROUP_BATCHES``.
GROUP_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class AnalyzerMetrics(ServiceMetrics):
    def __init__(self) -> None:
        super().__init__("analyzer")
        task = ["task"]
        self.batches = self.counter("batches", "Batches received", ["task", "outcome"])
        self.reports_counted = self.counter(
            "reports_counted", "Reports counted into the model", task
        )
        self.reports_rejected = self.counter(
            "reports_rejected", "Reports that failed decryption or validation", task
        )
        self.reports_duplicate = self.counter(
            "reports_duplicate", "Reports dropped because their report id was already counted",
            task,
        )
        self.reports_quarantined = self.counter(
            "reports_quarantined",
            "Reports refused with their whole Paillier batch (sum out of range, bad "
            "ciphertext, tag or digest, or a report id repeated or already counted)", task,
        )
        self.updates_skipped = self.counter(
            "updates_skipped",
            "Model updates the policy skipped because a statistic or a solve was unusable "
            "(the published model stays; the next batch tries again)", task,
        )
        self.ingest_seconds = self.histogram(
            "batch_ingest_seconds",
            "Time to decrypt, validate, aggregate and commit one batch (or one group of batches "
            "that waited together)", INGEST_SECONDS, task,
        )
        self.group_batches = self.histogram(
            "group_batches", "Batches committed per transaction", GROUP_BATCHES, task
        )
        self.model_version = self.gauge(
            "model_version", "Current published model version", task
        )
        self.sse_clients = self.gauge("sse_clients", "Open model-stream connections", task)
        self.streams_open = self.gauge(
            "model_streams_open", "Open model streams, all tasks (bounded by "
            "limits.model_streams)")
        self.streams_refused = self.counter(
            "model_streams_refused", "Model streams refused with 503 too_many_streams", task)
        # The PostgreSQL store's transactions (none on SQLite).
        self.transactions = TxMetrics(self)
