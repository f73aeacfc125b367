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

Publication: determinant-based rare switching (``BatchedNoisyPolicy``), as in SBLB.

Decoding (analyzer, before ``ingest_statistic``): ``shared.crypto.slots.unpack_signed`` with the
bound ``randomizer.sum_bound(n)``, which an honest batch exceeds with probability below 2⁻⁶⁴; a
sum out of range raises before anything reaches the policy, so its state does not change.
"""

from __future__ import annotations

from shared.core.accounting.ledger import PrivacyLedger
from shared.core.policies.batched import BatchedNoisyPolicy
from shared.core.policies.config import DDPLinUCBConfig
from shared.core.randomizers.skellam import SkellamRandomizer


class DDPLinUCB(BatchedNoisyPolicy[DDPLinUCBConfig, SkellamRandomizer]):
    algo = "ddp-linucb"
    threat_model = "shuffle"

    def _make_randomizer(self) -> SkellamRandomizer:
        c = self.config
        return SkellamRandomizer(
            c.d, c.epsilon, c.delta, c.batch_size, c.honest_fraction, c.scale, c.L
        )

    def paper_regularizer(self, t: int) -> float:
        """c_t = Υ_t + λ: just enough to keep H_t + c_t I ⪰ λ I with high probability."""
        return self.noise_bound(t) + self.config.lam

    def ledger(self, T: int | None = None, aggregation: str = "secure-sum") -> PrivacyLedger:
        """Central (ε, δ) of the batch sums (``accounting.skellam.ddp_ledger``). Only defined for
        the secure sum: an observer of single reports sees each user's statistics with a 1/⌈γ l⌉
        share of the noise, which protects nothing."""
        if aggregation != "secure-sum":
            raise ValueError("ddp-linucb is private only over the secure sum (secure-sum)")
        return self.randomizer.ledger()
