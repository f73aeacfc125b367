"""SBLB — Shuffle-Batched Linear Bandit (Garcelon et al. 2022, Alg. 1) and its fixed-schedule
variant (Alg. 4, App. C).

Devices send M_LDP reports (Alg. 2–3, ``shared.core.randomizers.binary``); the shuffler releases
the sums (Z, U) of exactly l shuffled reports; the analyzer debiases them (Alg. 1 step b) into
(G̃, ũ) and, after each batch, forms Ṽ = G̃ + c_t I. SBLB publishes (θ̃, Ṽ, β) when
det Ṽ ≥ (1 + η) det Ṽ_last
(determinant-based rare switching); SBLB-fixed publishes after every batch.

Units. The paper works with Ṽ ≈ Σ x xᵀ/(2L²) + 2λ_j I and B̃ ≈ Σ r x/(2L), θ̃ = L⁻¹ Ṽ⁻¹ B̃ (Alg. 1).
We keep raw units (Ṽ ≈ Σ x xᵀ + c I with c = 2L²·2λ_j), which gives the same θ̃ and the same
ellipsoid: ‖·‖ in the paper's Ṽ is ‖·‖ in ours divided by √2 L, and so is its β.

Corrections made by derivation (checked by the coverage tests):
- Alg. 1 subtracts l/(2(1−p)) from U "·I"; it is the all-ones matrix l·11ᵀ/(2(1−p)) (every entry
  of z̃ carries the +1/2 offset), which our per-coordinate debiasing does.
- Lemma 9 (Eq. 7) as printed mixes units and misplaces a square root. We use the composition it
  is built from (Shariff–Sheffet Prop. 4, ``shared.core.confidence``) with Eq. 8's regularizer and
  our own high-probability bounds on the bit noise (the Eq. 13–15 bounds hold for one fixed
  direction v only; the operator norm needs a union over a net, which we add).
"""

from __future__ import annotations

import math

from shared.core.accounting.ledger import PrivacyLedger
from shared.core.policies.batched import BatchedNoisyPolicy
from shared.core.policies.config import SBLBConfig
from shared.core.randomizers.binary import BinaryRandomizer


class SBLB(BatchedNoisyPolicy[SBLBConfig, BinaryRandomizer]):
    algo = "sblb"
    threat_model = "shuffle"

    def _make_randomizer(self) -> BinaryRandomizer:
        c = self.config
        return BinaryRandomizer(c.d, c.eps0, c.m, c.L)

    def eq8_lambda(self, t: int) -> float:
        """λ_j of Eq. 8 (paper units): √(8t ln(2t/δ))/m + 2√(8t ln(2t/δ))/((1−p)√m) + λ."""
        c = self.config
        if t <= 0:
            return c.lam
        s = math.sqrt(8 * t * math.log(2 * t / c.failure_prob))
        p = self.randomizer.p
        return s / c.m + 2 * s / ((1 - p) * math.sqrt(c.m)) + c.lam

    def paper_regularizer(self, t: int) -> float:
        """c_t = 2L² · 2λ_j: Eq. 11's 2λ_j I in the paper's Ṽ, converted to raw units."""
        return 2 * self.config.L**2 * 2 * self.eq8_lambda(t)

    def ledger(self, T: int | None = None, aggregation: str = "reports") -> PrivacyLedger:
        from shared.core.accounting import ledgers

        c = self.config
        if c.batch_size <= 1:
            return ledgers.ldp_binary_ledger(c.eps0)
        return ledgers.shuffle_ledger(
            c.eps0, c.batch_size, c.delta, T=T, d=c.d, m=c.m, aggregation=aggregation  # type: ignore[arg-type]  # a str in Policy.ledger
        )


class SBLBFixed(SBLB):
    algo = "sblb-fixed"
    publish_every_batch = True
