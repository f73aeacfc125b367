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

Batch schedules and ε0 (issue 22; ``ScheduledBatchPolicy``). Batch k has length l_k
(``config.schedule``: fixed, or geometric up to a cap). With a central target ``epsilon`` the
reports of a batch of length l use ε0*(l), the largest ε0 whose batch is central
(ε, δ)-DP after shuffling under the task's aggregation (``accounting.shuffle_schedule``): the
randomizer for batch k is announced with the model its users decide with. Lengths only grow and
a longer batch amplifies at least as much, so a report sized for l_k that lands in a batch of
length ≥ l_k is amplified at least as much as needed. With a fixed ``eps0`` every report uses it
(the paper's form) and the ledger reports the central ε each batch length gives.

Regularizers: ``paper`` (Eq. 8, raised to our noise bound where lower), ``clip`` (eigen-clip and
the non-private OFUL width) and ``noise`` (ridge and width from the LDP variance actually
accumulated: Σ over batches of reports × the per-report proxy at that batch's ε0;
``ScheduledBatchPolicy``).
"""

from __future__ import annotations

import functools
import math

from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger, SecureSum
from privbandit.shared.core.policies.batched import ScheduledBatchPolicy
from privbandit.shared.core.policies.config import SBLBConfig
from privbandit.shared.core.randomizers.binary import BinaryRandomizer


class SBLB(ScheduledBatchPolicy[SBLBConfig, BinaryRandomizer]):
    algo = "sblb"
    threat_model = "shuffle"

    def eps0_for(self, size: int) -> float:
        return self.eps0_of(self.config, size)

    @staticmethod
    def eps0_of(c: SBLBConfig, size: int) -> float:
        """ε0 of the reports of a batch of ``size``: the fixed ``eps0``, or ε0*(size) for the
        central target under the config's accountant (``shuffle_schedule.max_eps0``)."""
        if c.fixed_eps0 is not None:
            return c.fixed_eps0
        from privbandit.shared.core.accounting.shuffle_schedule import max_eps0

        assert c.epsilon is not None  # fixed_eps0 is None only with a central target
        return max_eps0(c.epsilon, size, c.delta, c.d, c.m, c.accountant)

    def _randomizer_of_size(self, size: int) -> BinaryRandomizer:
        return self.randomizer_at(self.config, size)

    @classmethod
    def randomizer_at(cls, c: SBLBConfig, size: int) -> BinaryRandomizer:
        """Alg. 2–3 at ε0(size), found on first use; under a growing schedule it carries
        ``size``, which a device states with its report (``BinaryRandomizer.batch_size``)."""
        return BinaryRandomizer(c.d, functools.partial(cls.eps0_of, c, size), c.m, c.L,
                                batch_size=None if c.schedule.is_fixed else size)

    @classmethod
    def randomizer_of(cls, config: SBLBConfig) -> BinaryRandomizer:
        # Without the policy, whose state needs ε0 (with a central target a search, seconds
        # under the sum-only accountant): the shuffler needs only the row length.
        return cls.randomizer_at(config, config.schedule.size(0))

    def eq8_lambda(self, t: int) -> float:
        """λ_j of Eq. 8 (paper units): √(8t ln(2t/δ))/m + 2√(8t ln(2t/δ))/((1−p)√m) + λ.

        Under a growing schedule p is the first batch's (the largest: ε0 only grows with the
        batch length), which keeps Eq. 8 an upper bound for every report so far."""
        c = self.config
        if t <= 0:
            return c.lam
        s = math.sqrt(8 * t * math.log(2 * t / c.failure_prob))
        p = self.randomizer_for(self.schedule.size(0)).p
        return s / c.m + 2 * s / ((1 - p) * math.sqrt(c.m)) + c.lam

    def paper_regularizer(self, t: int) -> float:
        """c_t = 2L² · 2λ_j: Eq. 11's 2λ_j I in the paper's Ṽ, converted to raw units."""
        return 2 * self.config.L**2 * 2 * self.eq8_lambda(t)

    def ledger(self, T: int | None = None, aggregation: Aggregation = "reports",
               secure_sum: SecureSum | None = None) -> PrivacyLedger:
        """ldp: ε0 per report; central: the amplified figure of the aggregation's accountant.
        Fixed ε0 and fixed batches: as before (``ledgers.shuffle_ledger``, with Thm 5's figure).
        Otherwise per batch length of the schedule (each with its own ε0) and the worst case over
        them (``shuffle_schedule.schedule_ledger``)."""
        from privbandit.shared.core.accounting import ledgers
        from privbandit.shared.core.accounting.shuffle_schedule import schedule_ledger

        c = self.config
        if aggregation not in ("reports", "secure-sum"):
            raise ValueError(f"unknown aggregation {aggregation!r}")
        agg: Aggregation = (
            "secure-sum" if aggregation == "secure-sum" else "reports")
        if self.schedule.is_fixed and c.fixed_eps0 is not None:
            if c.batch_size <= 1:
                return ledgers.ldp_binary_ledger(c.fixed_eps0)
            return ledgers.shuffle_ledger(
                c.fixed_eps0, c.batch_size, c.delta, T=T, d=c.d, m=c.m, aggregation=agg)
        sizes = self.schedule.distinct_sizes()
        return schedule_ledger(self.schedule.spec(), sizes,
                               [self._batch_ledger(size, agg) for size in sizes], agg)

    def _batch_ledger(self, size: int, agg: Aggregation) -> PrivacyLedger:
        """One batch length's ledger at its ε0. Secure-sum batches longer than the sum-only
        accountant's length are accounted there (an upper bound), and the whole-report bound,
        cheap at any length, is taken at the true length when lower."""
        from privbandit.shared.core.accounting import ledgers
        from privbandit.shared.core.accounting.shuffle import shuffle_epsilon
        from privbandit.shared.core.accounting.shuffle_schedule import accounted_length

        c, eps0 = self.config, self.eps0_for(size)
        if size <= 1:
            return ledgers.ldp_binary_ledger(eps0)
        accounted = accounted_length(size, agg)
        ledger = ledgers.shuffle_ledger(eps0, accounted, c.delta, d=c.d, m=c.m, aggregation=agg)
        if accounted < size and ledger.central_epsilon is not None:
            reports = shuffle_epsilon(eps0, size, c.delta)
            if reports < ledger.central_epsilon:
                return ledger.model_copy(update={"central_epsilon": reports})
        return ledger


class SBLBFixed(SBLB):
    algo = "sblb-fixed"
    publish_every_batch = True
