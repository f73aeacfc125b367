"""Prometheus metrics of one shuffler app (own registry, so several apps can share a process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class ShufflerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.reports_accepted = Counter(
            "privbandit_shuffler_reports_accepted", "Reports made durable", ["task"], registry=r
        )
        self.reports_duplicate = Counter(
            "privbandit_shuffler_reports_duplicate", "Identical ciphertexts dropped", ["task"],
            registry=r,
        )
        self.batches_formed = Counter(
            "privbandit_shuffler_batches_formed", "Batches formed", ["task"], registry=r
        )
        self.batches_acknowledged = Counter(
            "privbandit_shuffler_batches_acknowledged", "Batches acknowledged by the analyzer",
            ["task"], registry=r,
        )
        self.forward_failures = Counter(
            "privbandit_shuffler_forward_failures",
            "Failed attempts to deliver a batch (retried)", ["task", "reason"], registry=r,
        )
        self.pending = Gauge(
            "privbandit_shuffler_pending_reports", "Reports waiting for a batch to fill", ["task"],
            registry=r,
        )
        self.commit_group = Histogram(
            "privbandit_shuffler_commit_group_uploads", "Uploads made durable per commit",
            registry=r, buckets=(1, 2, 4, 8, 16, 32, 64, 128),
        )
        self.sum_seconds = Histogram(
            "privbandit_shuffler_batch_sum_seconds",
            "Time to multiply one secure-sum batch's ciphertexts into its encrypted sum",
            registry=r, buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
        )
        self.commit_seconds = Histogram(
            "privbandit_shuffler_commit_seconds", "Time of one group commit", registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
        )
