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

Batch schedules (``core.schedule``): batch k has length l_k (fixed, or geometric up to a cap).
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
next model rather than over-noising until det grows (``ScheduledBatchPolicy._must_publish``,
shared with sblb); while the batches grow det Ṽ grows by far more than 1 + η per batch anyway
(each batch at least doubles the data), so the simulator's trajectory is unchanged in practice.

Publication: determinant-based rare switching (``BatchedNoisyPolicy``), as in SBLB.

Decoding (analyzer, before ``ingest_statistic``): ``shared.crypto.slots.unpack_signed`` with the
bound ``randomizer.sum_bound(n)``, which an honest batch exceeds with probability below 2⁻⁶⁴; a
sum out of range raises before anything reaches the policy, so its state does not change.
"""

from __future__ import annotations

from privbandit.shared.core.accounting.ledger import (
    Aggregation,
    PrivacyLedger,
    SecureSum,
    observers_sentence,
    with_public_warm_start,
)
from privbandit.shared.core.accounting.skellam import batch_schedule_ledger
from privbandit.shared.core.policies.batched import ScheduledBatchPolicy
from privbandit.shared.core.policies.config import DDPLinUCBConfig
from privbandit.shared.core.randomizers.skellam import SkellamRandomizer


class DDPLinUCB(ScheduledBatchPolicy[DDPLinUCBConfig, SkellamRandomizer]):
    algo = "ddp-linucb"
    threat_model = "shuffle"

    RIDGE_PROXY = "offdiag"

    def _randomizer_of_size(self, size: int) -> SkellamRandomizer:
        """Shares sized for a batch of ``size`` reports."""
        c = self.config
        return SkellamRandomizer(c.d, c.epsilon, c.delta, size, c.honest_fraction, c.scale, c.L,
                                 c.encoding, c.u_weight, c.encoding_intercept, c.noise,
                                 c.intercept_coords)

    def paper_regularizer(self, t: int) -> float:
        """c_t = Υ_t + λ: just enough to keep H_t + c_t I ⪰ λ I with high probability."""
        return self.noise_bound(t) + self.config.lam

    def ledger(self, T: int | None = None, aggregation: Aggregation = "secure-sum",
               secure_sum: SecureSum | None = None) -> PrivacyLedger:
        """Central (ε, δ) of the batch sums (``accounting.skellam.ddp_ledger``), per batch length
        of the schedule and the worst case over them. Only defined for the secure sum: an
        observer of single reports sees each user's statistics with a 1/⌈γ l⌉ share of the
        noise, which protects nothing."""
        if aggregation != "secure-sum":
            raise ValueError("ddp-linucb is private only over the secure sum (secure-sum)")
        observers = observers_sentence(secure_sum)  # the task's transport states its own
        if self.schedule.is_fixed:
            ledger = self.randomizer.ledger(observers)
        else:
            sizes = self.schedule.distinct_sizes()
            ledger = batch_schedule_ledger(
                self.schedule.spec(), sizes,
                [self.randomizer_for(size).ledger(observers) for size in sizes])
        return with_public_warm_start(ledger, self.config.public_warm_start)
