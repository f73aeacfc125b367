"""Prometheus metrics of one shuffler app (own registry, so several apps can share a process)."""

from __future__ import annotations

from privbandit.services.common.metrics import GROUP_SIZES, SECONDS, ServiceMetrics, TxMetrics


class ShufflerMetrics(ServiceMetrics):
    def __init__(self) -> None:
        super().__init__("shuffler")
        task = ["task"]
        self.reports_accepted = self.counter("reports_accepted", "Reports made durable", task)
        self.reports_duplicate = self.counter(
            "reports_duplicate", "Identical ciphertexts dropped", task)
        self.reports_refused_stale_key = self.counter(
            "reports_refused_stale_key",
            "Accepted Paillier reports dropped: under a Paillier key the analyzer no longer has",
            task)
        self.batches_formed = self.counter("batches_formed", "Batches formed", task)
        self.batches_acknowledged = self.counter(
            "batches_acknowledged", "Batches acknowledged by the analyzer", task)
        self.batches_quarantined = self.counter(
            "batches_quarantined",
            "Batches the analyzer acknowledged as quarantined (refused whole, none counted)", task)
        self.forward_failures = self.counter(
            "forward_failures", "Failed attempts to deliver a batch (retried)", ["task", "reason"])
        self.pending = self.gauge("pending_reports", "Reports waiting for a batch to fill", task)
        self.stored = self.gauge(
            "stored_reports",
            "Reports stored and not yet acknowledged by the analyzer (pending or in a batch in "
            "flight); uploads are refused with 429 queue_full at limits.shuffler_reports", task)
        self.uploads_refused = self.counter(
            "uploads_refused", "Uploads refused before anything was stored, by reason",
            ["task", "reason"])
        self.commit_group = self.histogram(
            "commit_group_uploads", "Uploads made durable per commit", GROUP_SIZES)
        self.sum_seconds = self.histogram(
            "batch_sum_seconds",
            "Time to multiply one Paillier batch's ciphertexts into its encrypted sum", SECONDS)
        self.commit_seconds = self.histogram("commit_seconds", "Time of one group commit", SECONDS)
        # The PostgreSQL store's transactions (none on SQLite).
        self.transactions = TxMetrics(self)
