"""``ddp-linucb``: linear UCB on batch sums protected by distributed DP (Skellam shares).

Threat model ``shuffle``, aggregation ``secure-sum``. Each device sends its rounded statistics
z = round(s · (upper(x xᵀ), r x)) plus a Skellam share (``randomizers.skellam``), encrypted;
the shuffler multiplies l ciphertexts; the analyzer decrypts only the batch sum
S = Σ z_i + N, N ~ Sk(≥ μ) per coordinate, and rescales: G̃ = sym(S_G)/s, ũ = S_u/s (unbiased).
The sum is central (ε, δ)-DP for every user of the batch (``accounting.skellam``): the analyzer,
which never sees a report, learns only a DP statistic, like the trusted curator of the central
model, while holding no raw data. This is the distributed-DP design of Kairouz–Liu–Steinke 2021 and
Agarwal–Kairouz–Liu 2021 applied to the linear bandit statistics (cf. Chowdhury & Zhou 2022,
"Distributed differential privacy in multi-armed bandits", for the bandit setting).

Estimator (``NoisyStatisticsPolicy``): after t reports the noise in G̃ is H_t with independent
upper-triangle entries, each a sum of t rounding errors (|e| < 1/s, proxy 1/(4s²)) and t Skellam
shares (variance σ_s²/s² each, sub-Gaussian proxy 1.086 σ_s²/s², ``randomizers.skellam``).

- ``regularizer="paper"`` (the noise-matched rigorous setting): c_t = Υ_t + λ with Υ_t the
  high-probability bound on ‖H_t‖ (``confidence.matrix_noise_bound``, uniform over update times),
  so H_t + c_t I ⪰ λ I w.h.p.; β from Shariff–Sheffet Prop. 4 with ρ_min = c_t − Υ_t,
  ρ_max = c_t + Υ_t and the bound χ_t on ‖h_t‖ (the noise level enters β through S √ρ_max and
  χ/√ρ_min).
- ``regularizer="clip"`` (practical): Ṽ = eigen-clip(G̃ + λI, λ) and the non-private OFUL width;
  post-processing, privacy unchanged, no coverage guarantee.

- ``regularizer="noise"`` (practical, noise-calibrated; issue 22): with σ_t² the per-entry noise
  proxy accumulated so far (Σ over the batches ingested of their reports × share proxy, i.e.
  batches × per-batch central variance μ/s², never a function of T), the typical size of the
  symmetric noise matrix is Ῡ_t = 2σ_t√d (semicircle law) and of the vector noise χ̄_t = σ_t√d.
  c_t = λ + κ Ῡ_t (κ = ``noise_ridge``), Ṽ = eigen-clip(G̃ + c_t I, λ), and β is
  Shariff–Sheffet Prop. 4 with these typical sizes in place of the high-probability bounds:
  ρ_min = max(c_t − Ῡ_t, λ), ρ_max = c_t + Ῡ_t. Post-processing; no coverage guarantee — the
  simulator measures coverage instead.

Batch schedules (``policies.schedule``): batch k has length l_k (fixed, or geometric up to a cap).
Each batch's shares are sized for its own length: σ_s²(l) = μ/⌈γ l⌉ (``randomizer_for``); the
randomizer a device uses is the one for the batch announced with the model it decided with, and
lengths never decrease, so a report landing in a later (larger) batch carries a share at least as
large as that batch needs (⌈γ l⌉ is non-decreasing in l and ``rational_rate`` rounds up). Every
batch is then central (ε, δ)-DP on its own; each user is in exactly one batch (parallel
composition), so the task's guarantee is the worst batch's (``ledger``).

In the services (issue 22) the length travels with the model: a model published after b batches
carries l_b (``announced_batch_size`` → ``ModelMessage.batch_size``), a device sizes its share
for the length carried by the newest model it holds when it reports and states it
(``EncryptedCounts.batch_size``), and the shuffler forms batch k with l_k from its stored count k
of batches formed. The b batches were formed before the model existed, so any report sized from
it lands in a batch k ≥ b with l_k ≥ l_b: a late report (an old model) is over-noised, never
under-noised; the shuffler refuses a report stating a length above its next batch's
(``services.shuffler.store.base``). When the schedule moves to a new length the candidate is
published whatever det Ṽ did (``_must_publish``), so the devices learn the new length with the
next model rather than over-noising until det grows; while the batches grow det Ṽ grows by far
more than 1 + η per batch anyway (each batch at least doubles the data), so the simulator's
trajectory is unchanged in practice.

Publication: determinant-based rare switching (``BatchedNoisyPolicy``), as in SBLB.

Decoding (analyzer, before ``ingest_statistic``): ``shared.crypto.slots.unpack_signed`` with the
bound ``randomizer.sum_bound(n)``, which an honest batch exceeds with probability below 2⁻⁶⁴; a
sum out of range raises before anything reaches the policy, so its state does not change.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from shared.core.accounting.ledger import PrivacyLedger
from shared.core.accounting.skellam import batch_schedule_ledger
from shared.core.confidence import clip_eigenvalues, noisy_ridge_beta, ridge_solve
from shared.core.policies.batched import BatchedNoisyPolicy
from shared.core.policies.config import DDPLinUCBConfig
from shared.core.randomizers.skellam import SkellamRandomizer


class DDPLinUCB(BatchedNoisyPolicy[DDPLinUCBConfig, SkellamRandomizer]):
    algo = "ddp-linucb"
    threat_model = "shuffle"

    def __init__(self, config: DDPLinUCBConfig, rng: np.random.Generator | None = None) -> None:
        self.schedule = config.schedule
        self._randomizers: dict[int, SkellamRandomizer] = {}
        self.batches = 0  # batches ingested so far: the next one has length schedule.size(batches)
        self.reports_by_size: dict[int, int] = {}  # reports ingested, by their batch's length
        super().__init__(config, rng)

    def randomizer_for(self, size: int) -> SkellamRandomizer:
        """The device randomizer of a batch of ``size`` reports (shares sized for that length)."""
        if size not in self._randomizers:
            c = self.config
            self._randomizers[size] = SkellamRandomizer(
                c.d, c.epsilon, c.delta, size, c.honest_fraction, c.scale, c.L
            )
        return self._randomizers[size]

    def _make_randomizer(self) -> SkellamRandomizer:
        return self.randomizer_for(self.schedule.size(0))

    @property
    def batch_size(self) -> int:
        """Length of the next batch (the one the current model's users fill)."""
        return self.schedule.size(self.batches)

    @property
    def announced_batch_size(self) -> int | None:
        """l_b, published with the model (``Model.batch_size``) for a growing schedule."""
        return None if self.schedule.is_fixed else self.batch_size

    def _must_publish(self) -> bool:
        """A growing schedule publishes when the next batch's length differs from the one the
        current model announced (module docstring)."""
        if self.schedule.is_fixed:
            return super()._must_publish()
        announced = self.model.batch_size or self.schedule.size(0)
        return super()._must_publish() or announced != self.batch_size

    def _accumulate(self, stat: np.ndarray, n: int) -> bool:
        """Add one batch and move the schedule on: the next batch's randomizer is the one the
        devices deciding with the next model use. The batch's reports are counted at l_b, the
        length this policy announced for them (the simulator's batch b has exactly that length;
        in the services the shuffler's batch may be longer, and each share was sized for at
        most l_b, so its variance is at least the one counted)."""
        size = self.batch_size
        ok = super()._accumulate(stat, n)
        if ok:
            self.reports_by_size[size] = self.reports_by_size.get(size, 0) + n
        self.batches += 1
        self.randomizer = self.randomizer_for(self.batch_size)
        return ok

    def noise_proxy(self, t: int, kind: str) -> float:
        """Σ over the batches so far of reports × that batch's share proxy; reports beyond those
        ingested (t > reports) count at the next batch's proxy. For a fixed schedule this is
        exactly t × one report's proxy."""
        counts = dict(self.reports_by_size)
        counts[self.batch_size] = counts.get(self.batch_size, 0) + t - self.reports
        total = 0.0
        for size, n in counts.items():
            r = self.randomizer_for(size)
            total += n * (r.matrix_proxy() if kind == "matrix" else r.vector_proxy())
        return total

    def paper_regularizer(self, t: int) -> float:
        """c_t = Υ_t + λ: just enough to keep H_t + c_t I ⪰ λ I with high probability."""
        return self.noise_bound(t) + self.config.lam

    def _candidate(self) -> tuple[np.ndarray, np.ndarray, float]:
        if self.config.regularizer != "noise":
            return super()._candidate()
        cfg, t = self.config, self.reports
        sigma_t = math.sqrt(self.noise_proxy(t, "matrix"))
        upsilon = 2.0 * sigma_t * math.sqrt(cfg.d)
        c = cfg.lam + cfg.noise_ridge * upsilon
        V, clipped = clip_eigenvalues(self.G + c * np.eye(cfg.d), cfg.lam)
        solved = ridge_solve(V, self.u, cfg.lam)
        if clipped:
            self.repairs += 1
        chi = math.sqrt(self.noise_proxy(t, "vector") * cfg.d)
        beta = noisy_ridge_beta(
            t=t, d=cfg.d, L=cfg.L, S=cfg.S, sigma=cfg.reward_sigma,
            rho_min=max(c - upsilon, cfg.lam), rho_max=c + upsilon, chi=chi,
            delta=cfg.failure_prob,
        )
        return solved.V, solved.theta, beta

    def ledger(self, T: int | None = None, aggregation: str = "secure-sum") -> PrivacyLedger:
        """Central (ε, δ) of the batch sums (``accounting.skellam.ddp_ledger``), per batch length
        of the schedule and the worst case over them. Only defined for the secure sum: an
        observer of single reports sees each user's statistics with a 1/⌈γ l⌉ share of the
        noise, which protects nothing."""
        if aggregation != "secure-sum":
            raise ValueError("ddp-linucb is private only over the secure sum (secure-sum)")
        if self.schedule.is_fixed:
            return self.randomizer.ledger()
        sizes = self.schedule.distinct_sizes()
        return batch_schedule_ledger(
            self.schedule.spec(), sizes, [self.randomizer_for(size).ledger() for size in sizes]
        )

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
