"""Batch-fed policies with determinant-based rare switching (SBLB and ddp-linucb).

The shuffler (or the secure sum) releases one statistic per batch of exactly l reports; the
analyzer adds it to its noisy (G̃, ũ), forms the candidate (Ṽ, θ̃, β) and publishes when
det Ṽ ≥ (1 + η) det Ṽ_last (Garcelon et al. Alg. 1's switching rule; the fixed schedule of their
Alg. 4 publishes after every batch).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any, ClassVar

import numpy as np

from privbandit.shared.core.confidence import logdet_pd
from privbandit.shared.core.policies.linear import (
    ConfigT,
    NoisyStatisticsPolicy,
    StatisticsRandomizerT,
    proxy_of,
)
from privbandit.shared.core.randomizers.base import BatchNoising


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
        stat = self.randomizer.sufficient(rows)
        if isinstance(self.randomizer, BatchNoising):
            # the aggregators' noise, added to the sum (ddp-linucb)
            stat = stat + self.randomizer.batch_noise(self.rng)
        self.ingest_statistic(stat, rows.shape[0])
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

    def _add_public(self, G: np.ndarray, u: np.ndarray) -> None:
        """A public warm start (``LinearPolicy.warm_start``): exact statistics added to
        (G̃, ũ), which carry no noise yet (no batch ingested), and the candidate published."""
        self.G, self.u = self.G + G, self.u + u
        cand = self.candidate()
        if cand is not None:
            V, theta, beta = cand
            self._publish(theta, V, beta)
            self._logdet_published = logdet_pd(V)

    def _must_publish(self) -> bool:
        """Publish the candidate whatever det Ṽ did (Alg. 4: after every batch)."""
        return self.publish_every_batch

    def _extra_state(self) -> dict[str, Any]:
        return {**super()._extra_state(), "logdet_published": self._logdet_published}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        super()._load_extra_state(state)
        self._logdet_published = float(state["logdet_published"])


class ScheduledBatchPolicy(BatchedNoisyPolicy[ConfigT, StatisticsRandomizerT]):
    """A batched policy whose batch k has length l_k = ``config.schedule.size(k)`` and whose
    device randomizer depends on the length of the batch it is sized for (``ddp-linucb``: Skellam
    shares; ``sblb``: ε0). The randomizer a device uses is the one for the batch announced with the
    model it decided with (``randomizer``, moved on after every batch); lengths never decrease, so
    a report landing in a later batch finds a batch at least as long as it was sized for.

    Noise calibration (``regularizer = "noise"``, issue 22): σ_t² is the per-entry noise proxy
    actually accumulated — Σ over the batches ingested of reports × that batch's per-report proxy
    (for ddp-linucb the per-batch central variance; for sblb the LDP variance at that batch's ε0),
    never a function of T. The typical size of the symmetric noise matrix is Ῡ_t = 2σ_t√d
    (semicircle law), of the vector noise χ̄_t = σ_t√d; c_t = λ + κ Ῡ_t (κ = ``noise_ridge``),
    Ṽ = eigen-clip(G̃ + c_t I, λ), and β is Shariff–Sheffet Prop. 4 with these typical sizes in
    place of high-probability bounds: ρ_min = max(c_t − Ῡ_t, λ), ρ_max = c_t + Ῡ_t.
    Post-processing; no coverage guarantee — the simulator measures coverage.

    Batch weights (``batch_weight_power`` p, issue 22; p = 0, every batch alike, is the default
    and the papers'): the estimate is formed from Σ_j a_j (G̃_j, ũ_j) with a_j = (l_j / l_ref)^p,
    l_ref the longest batch so far. Why: batch j's sums are G_j θ + (h_j − H_j θ) with
    G_j ≈ l_j Σ_j (information growing with its length) but noise (h_j, H_j) of one batch's
    variance σ_b² whatever its length. In one direction, Σ_j a_j u_j / Σ_j a_j g_j has variance
    σ_b² Σ_j a_j² / (Σ_j a_j g_j)², minimal at a_j ∝ g_j (the matched filter / generalised least
    squares weight), i.e. p = 1 when every user of every batch carries the same information; the
    first batch, played uniformly before any model, carries more per user (≈ 2.5× in the weak
    directions on ``linear``) than the later greedy ones, hence p < 1 in practice. Equal weights
    (p = 0) give the k-th model the noise of k batches at full weight: the early, short batches'
    noise stays in every later model. The noise proxies follow (Σ_j a_j² × batch j's noise), so
    the ridge and the width are sized for the noise actually left. Post-processing of the batch
    sums: privacy unchanged."""

    def __init__(self, config: Any, rng: np.random.Generator | None = None) -> None:
        self.schedule = config.schedule
        self._randomizers: dict[int, StatisticsRandomizerT] = {}
        self.batches = 0  # batches ingested so far: the next one has length schedule.size(batches)
        self.reports_by_size: dict[int, int] = {}  # reports ingested, by their batch's length
        super().__init__(config, rng)

    @abstractmethod
    def _randomizer_of_size(self, size: int) -> StatisticsRandomizerT:
        """A new device randomizer for a batch of ``size`` reports."""

    def randomizer_for(self, size: int) -> StatisticsRandomizerT:
        """The device randomizer of a batch of ``size`` reports (cached)."""
        if size not in self._randomizers:
            self._randomizers[size] = self._randomizer_of_size(size)
        return self._randomizers[size]

    def _make_randomizer(self) -> StatisticsRandomizerT:
        return self.randomizer_for(self.schedule.size(0))

    @property
    def batch_size(self) -> int:
        """Length of the next batch (the one the current model's users fill)."""
        return self.schedule.size(self.batches)

    @property
    def announced_batch_size(self) -> int | None:
        """l_b, published with the model (``Model.batch_size``) for a growing schedule: the
        length the reports of the model's users are sized for (ddp-linucb: their Skellam share;
        sblb: their ε0). None for a fixed schedule (one length, the task's)."""
        return None if self.schedule.is_fixed else self.batch_size

    def _must_publish(self) -> bool:
        """A growing schedule publishes when the next batch's length differs from the one the
        current model announced, whatever det Ṽ did: the devices learn the new length (and size
        their noise for it) with the next model instead of keeping the old one until det grows.
        While the batches grow det Ṽ grows by far more than 1 + η per batch anyway (each batch
        adds at least as much data as all before it at growth ≥ 2), so the simulator's trajectory
        barely changes (docs/benchmarks/ddp-linucb.md, issue 22)."""
        if self.schedule.is_fixed:
            return super()._must_publish()
        announced = self.model.batch_size or self.schedule.size(0)
        return super()._must_publish() or announced != self.batch_size

    @property
    def weight_power(self) -> float:
        """p of the batch weights a_j = (l_j / l_ref)^p (class docstring); 0: every batch alike."""
        return float(getattr(self.config, "batch_weight_power", 0.0))

    @property
    def weight_reference(self) -> int:
        """l_ref: the longest batch ingested so far (weight 1); 0 before the first."""
        return max(self.reports_by_size, default=0)

    def batch_weight(self, size: int) -> float:
        """a(l) = (l / l_ref)^p of a batch of length l ≤ l_ref (1 for p = 0 or l ≥ l_ref)."""
        ref = self.weight_reference
        if self.weight_power == 0.0 or ref == 0 or size >= ref:
            return 1.0
        return float((size / ref) ** self.weight_power)

    def _accumulate(self, stat: np.ndarray, n: int) -> bool:
        """Add one batch and move the schedule on: the next batch's randomizer is the one the
        devices deciding with the next model use. With batch weights (p > 0) a batch longer than
        every earlier one becomes the new reference: the sums so far are rescaled by
        (l_ref / l)^p first, so (G̃, ũ) always hold Σ_j a_j (G̃_j, ũ_j) with a_j = (l_j / l_ref)^p."""
        size = self.batch_size
        ref = self.weight_reference
        rescale = (ref / size) ** self.weight_power if 0 < ref < size else 1.0
        kept = self.G, self.u
        self.G, self.u = self.G * rescale, self.u * rescale
        ok = super()._accumulate(stat, n)
        if ok:
            self.reports_by_size[size] = self.reports_by_size.get(size, 0) + n
        else:  # nothing was added: the old reference and sums stay
            self.G, self.u = kept
        self.batches += 1
        self.randomizer = self.randomizer_for(self.batch_size)
        return ok

    def noise_proxy(self, t: int, kind: str) -> float:
        """Σ over the batches so far of a_j² × reports × that batch's per-report proxy (a_j = 1
        unless batches are weighted); reports beyond those ingested (t > reports) count at the
        next batch's proxy and weight 1. For a fixed schedule this is exactly t × one report's
        proxy."""
        counts = dict(self.reports_by_size)
        pending = t - self.reports
        total = 0.0
        for size, n in counts.items():
            r = self.randomizer_for(size)
            total += self.batch_weight(size) ** 2 * n * proxy_of(r, kind)
        if pending:
            total += pending * proxy_of(self.randomizer_for(self.batch_size), kind)
        return total

    def _extra_state(self) -> dict[str, Any]:
        state = super()._extra_state()
        if not self.schedule.is_fixed:  # a fixed schedule's state is what it always was
            state["batches"] = self.batches
            state["reports_by_size"] = {str(k): v for k, v in self.reports_by_size.items()}
        return state

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        super()._load_extra_state(state)
        if "batches" in state:
            self.batches = int(state["batches"])
            self.reports_by_size = {int(k): int(v) for k, v in state["reports_by_size"].items()}
        else:  # fixed schedule: every report was in a batch of the one length
            self.batches = self.reports // self.schedule.first
            self.reports_by_size = {self.schedule.first: self.reports} if self.reports else {}
        self.randomizer = self.randomizer_for(self.batch_size)
