"""LDP-LinUCB — Zheng et al. (NeurIPS 2020), Algorithm 5 (Appendix D).

Each device sends (upper(x xᵀ) + B, y x + ξ) with Gaussian noise calibrated to (ε, δ)-LDP
(``shared.core.randomizers.gaussian``). The analyzer sums the reports into (G̃, ũ) and publishes
θ̃ = (Ṽ + c_t I)⁻¹ ũ with c_t = 2Υ_t, Υ_t = σ√t (4√d + 2 ln(2T/α)) (Alg. 5 lines 3 and 12).

Publication cadence: Alg. 5 publishes after every report (``update_every = 1``). A deployed
analyzer broadcasts periodically, and so does our default; cadence is post-processing of the
private reports and does not change the privacy ledger.

β: Alg. 5 line 3 prints β_t = 2σ√(d ln T) + (√(3Υ_t) + σ√(dt/Υ_t)) d ln T, which uses σ both for the
privacy noise and the reward noise and hides constants; its proof (Thm 8) is Shariff–Sheffet
Prop. 4 with ρ ∈ [Υ_t, 3Υ_t] and ‖h_t‖ ≤ σ√(dt). We evaluate that composition directly with the
reward noise's own σ and high-probability (not mean) bounds on ‖H_t‖ and ‖h_t‖.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger, SecureSum
from privbandit.shared.core.policies.config import LDPLinUCBConfig
from privbandit.shared.core.policies.linear import NoisyStatisticsPolicy
from privbandit.shared.core.randomizers.gaussian import GaussianRandomizer
from privbandit.shared.core.randomizers.privunit import PrivUnitRandomizer


class LDPLinUCB(NoisyStatisticsPolicy[LDPLinUCBConfig, GaussianRandomizer]):
    algo = "ldp-linucb"
    threat_model = "ldp"

    def __init__(self, config: LDPLinUCBConfig, rng: np.random.Generator | None = None) -> None:
        super().__init__(config, rng)
        self.pending = 0

    def _make_randomizer(self) -> GaussianRandomizer:
        return self.randomizer_of(self.config)

    @classmethod
    def randomizer_of(cls, config: LDPLinUCBConfig) -> GaussianRandomizer:
        # Without the policy, whose state needs σ (the analytic calibration imports scipy: a
        # second of start-up): the shuffler and the analyzer's body limit need only the row
        # length, and the randomizer calibrates σ on first use.
        c = config
        if c.mechanism == "privunit":
            return PrivUnitRandomizer(c.d, c.epsilon, c.L, c.encoding, c.u_weight,
                                      c.encoding_intercept)
        return GaussianRandomizer(c.d, c.epsilon, c.delta, c.L, c.encoding, c.u_weight,
                                  c.encoding_intercept)

    def upsilon(self, t: int) -> float:
        """Υ_t = σ√t (4√d + 2 ln(2T/α)) (Alg. 5 line 3)."""
        c = self.config
        sigma = self.randomizer.sigma
        log_term = 2 * math.log(2 * c.horizon / c.failure_prob)
        return sigma * math.sqrt(t) * (4 * math.sqrt(c.d) + log_term)

    def paper_regularizer(self, t: int) -> float:
        """c_t = 2Υ_t (Alg. 5 line 3), at least λ so that version 0 matches V = λI."""
        return max(2 * self.upsilon(t), self.config.lam)

    def _publish(self, theta: np.ndarray, V: np.ndarray, beta: float) -> None:
        """``perturb`` = ρ > 0: publish a draw from the estimate's own noise distribution instead
        of θ̃. After t reports θ̃ − θ ≈ Ṽ⁻¹(h_t − H_t θ) with h_t, H_t the summed LDP noise, whose
        covariance is ≈ t(σ_u² + σ_G²‖θ‖²) Ṽ⁻² (σ_u², σ_G² the per-report variances of an
        entry of ũ and of G̃'s diagonal: both σ² for the plain report); the analyzer adds ρ
        times a draw of that, fresh per publication, so a greedy device's design keeps
        exploring the directions the noise leaves uncertain (a Thompson-sampling-like
        perturbation; issue 22). Post-processing of the private statistics with the analyzer's
        own randomness: privacy unchanged."""
        rho = self.config.perturb
        if rho > 0 and self.reports > 0:
            r = self.randomizer
            scale = math.sqrt(self.reports * (r.vector_proxy()
                                              + r.matrix_proxy() * float(theta @ theta)))
            theta = theta + rho * scale * np.linalg.solve(V, self.rng.standard_normal(theta.shape))
        super()._publish(theta, V, beta)

    def window(self) -> int:
        return self.config.update_every - self.pending

    def ingest(self, rows: np.ndarray) -> int:
        rows = np.asarray(rows, dtype=float)
        k = min(rows.shape[0], self.window())
        if not self._accumulate(self.randomizer.sufficient(rows[:k]), k):
            return k  # consumed, not learned from
        self.pending += k
        if self.pending >= self.config.update_every:
            cand = self.candidate()
            if cand is not None:
                V, theta, beta = cand
                self._publish(theta, V, beta)
            self.pending = 0
        return k

    def ledger(self, T: int | None = None, aggregation: Aggregation = "reports",
               secure_sum: SecureSum | None = None) -> PrivacyLedger:
        from privbandit.shared.core.accounting import ledgers

        if self.config.mechanism == "privunit":
            ledger = ledgers.ldp_privunit_ledger(self.config.epsilon)
        else:
            ledger = ledgers.ldp_gaussian_ledger(self.config.epsilon, self.config.delta)
        return ledger.model_copy(update={"accounting": self.report_accounting()
                                         + ledger.accounting})

    def report_accounting(self) -> str:
        """What one report is and its calibration, for the ledger."""
        r = self.randomizer
        if isinstance(r, PrivUnitRandomizer):
            gamma, p, m = r.parameters
            return (f"report ({r.encoding} encoding's vector, its {r.D} non-constant entries, "
                    f"radius r = {r.radius:.4g}) by PrivUnit2 (Bhowmick et al. 2018): cap "
                    f"⟨z, û⟩ ≥ γ = {gamma:.4g} with probability p = {p:.4g}, released as "
                    f"r z/m, m = {m:.4g}; exact pure ε = ln(p(1 − q)/((1 − p)q)); ")
        if r.encoding == "plain":
            return ("report (upper(x xᵀ), y x) as one Gaussian mechanism (Zheng et al. Alg. 5), "
                    f"Δ = {r.sensitivity:.4g} (the joint sup over ‖x‖ ≤ L = {r.L:g}, "
                    f"y ∈ [0, 1]), σ = {r.sigma:.4g}; ")
        gram = "off-diagonals of x xᵀ × √2" if r.gram_weight > 1 else "upper(x xᵀ)"
        reward = "y x" if r.intercept is None else f"(y − ½) x with x₀ = {r.intercept:g}"
        return (f"report ({gram}, {reward} × {r.u_weight:g}) as one Gaussian mechanism "
                f"(encoding {r.encoding}), Δ = {r.sensitivity:.4g} (the joint sup over "
                f"‖x‖ ≤ L = {r.L:g}, y ∈ [0, 1]), σ = {r.sigma:.4g}; ")

    def _extra_state(self) -> dict[str, Any]:
        return {**super()._extra_state(), "pending": self.pending}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        super()._load_extra_state(state)
        self.pending = int(state["pending"])
