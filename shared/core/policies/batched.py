"""Batch-fed policies with determinant-based rare switching (SBLB and ddp-linucb).

The shuffler (or the secure sum) releases one statistic per batch of exactly l reports; the
analyzer adds it to its noisy (G̃, ũ), forms the candidate (Ṽ, θ̃, β) and publishes when
det Ṽ ≥ (1 + η) det Ṽ_last (Garcelon et al. Alg. 1's switching rule; the fixed schedule of their
Alg. 4 publishes after every batch).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from shared.core.confidence import logdet_pd
from shared.core.policies.linear import ConfigT, NoisyStatisticsPolicy, StatisticsRandomizerT


class BatchedNoisyPolicy(NoisyStatisticsPolicy[ConfigT, StatisticsRandomizerT]):
    """Ingests whole batches; publishes on det growth by 1 + ``config.eta`` (or every batch)."""

    publish_every_batch: ClassVar[bool] = False

    def __init__(self, config: Any, rng: np.random.Generator | None = None) -> None:
        super().__init__(config, rng)
        self._logdet_published = logdet_pd(self.model.V)

    @property
    def batch_size(self) -> int:
        return self.config.batch_size  # type: ignore[attr-defined]  # SBLB's, ddp-linucb's l

    def window(self) -> int:
        return self.batch_size

    def ingest(self, rows: np.ndarray) -> int:
        """One shuffled batch of report rows (all consumed)."""
        rows = np.asarray(rows)
        self.ingest_statistic(self.randomizer.sufficient(rows), rows.shape[0])
        return rows.shape[0]

    def ingest_statistic(self, stat: np.ndarray, n: int) -> None:
        """One batch given only its sum (what the secure sum releases)."""
        if n < 1:
            raise ValueError("a batch holds at least one report")
        if not self._accumulate(stat, n):
            return
        cand = self.candidate()
        if cand is None:
            return
        V, theta, beta = cand
        logdet = logdet_pd(V)
        eta = self.config.eta  # type: ignore[attr-defined]  # SBLB's, ddp-linucb's η
        if self._must_publish() or logdet >= self._logdet_published + math.log1p(eta):
            self._publish(theta, V, beta)
            self._logdet_published = logdet

    def _must_publish(self) -> bool:
        """Publish the candidate whatever det Ṽ did (Alg. 4: after every batch)."""
        return self.publish_every_batch

    def _extra_state(self) -> dict[str, Any]:
        return {**super()._extra_state(), "logdet_published": self._logdet_published}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        super()._load_extra_state(state)
        self._logdet_published = float(state["logdet_published"])
