"""Policies on exact statistics: non-private OFUL (``linucb``) and AdaR-OFUL (``adar-oful``).

Both keep V_t = λI + Σ x xᵀ and u_t = Σ r x exactly and use the rarely-switching schedule of
Abbasi-Yadkori et al. (2011) / Azize–Basu Alg. 4 line 6: a new model is computed after the first
report at which det V_t > (1 + C) det V_τ. ``ingest`` finds that report for a whole window at once
(cumulative outer products, batched log-determinants), so the simulator stays vectorised.

AdaR-OFUL (Azize & Basu 2023, Alg. 4). At the start of episode ℓ it samples Y_ℓ ~ N(0, σ_Y² I) and
publishes θ̃ = V⁻¹(u + Σ_{m≤ℓ} Y_m). Each report enters exactly one episode sum, whose L2
sensitivity to one reward in [0, 1] is L (‖x‖ ≤ L), so the Gaussian mechanism with
σ_Y² = α L² / (2ε) is (α, ε)-RDP (RDP of the Gaussian: α Δ²/(2σ²)). The paper's σ_Y² = 2α/ε is the
same formula for rewards in [−1, 1] and ‖x‖ ≤ 1 (Δ = 2).

Width (App. D, Step 4): β̃_t = β_t + ‖N_t‖/√λ_min(V_t), β_t the OFUL radius and
‖N_t‖² ≤ σ_Y² ℓ (d + 2√(d ln(1/δ')) + 2 ln(1/δ')) (Laurent–Massart χ² bound). The paper lower-bounds
λ_min(V_t) by λ + λ0 t/4 − … under stochastic contexts (its γ_t/√t); V_t is exact here, so we use
λ_min(V_t) itself, which is valid for any context sequence.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privbandit.shared.core.accounting.ledger import (
    Aggregation,
    PrivacyLedger,
    SecureSum,
    with_public_warm_start,
)
from privbandit.shared.core.confidence import logdet_pd, time_uniform
from privbandit.shared.core.policies.config import AdaROFULConfig, LinUCBConfig
from privbandit.shared.core.policies.linear import LinearPolicy
from privbandit.shared.core.randomizers.identity import IdentityRandomizer

MAX_WINDOW = 8192
# first_switch materialises (window, d, d) cumulative matrices: keep them near 32 MB.
MAX_WINDOW_FLOATS = 1 << 22


class ExactPolicy(LinearPolicy[LinUCBConfig | AdaROFULConfig, IdentityRandomizer]):
    """Rarely-switching OFUL on exact statistics; subclasses add privacy noise at publication."""

    randomizer: IdentityRandomizer

    def __init__(self, config: LinUCBConfig | AdaROFULConfig,
                 rng: np.random.Generator | None = None) -> None:
        super().__init__(config, rng)
        d = config.d
        self.V = config.lam * np.eye(d)
        self.u = np.zeros(d)
        self._logdet_published = logdet_pd(self.V)
        self._window = 64
        self._max_window = max(16, min(MAX_WINDOW, MAX_WINDOW_FLOATS // (d * d)))

    def _make_randomizer(self) -> IdentityRandomizer:
        return IdentityRandomizer(self.config.d, self.config.L)

    @property
    def switching(self) -> float:
        return float(self.config.switching)

    def window(self) -> int:
        return self._window

    def first_switch(self, x: np.ndarray) -> int | None:
        """Index of the first row after which det V > (1 + C) det V_τ, or None."""
        if self.switching == 0:
            return 0
        outer = x[:, :, None] * x[:, None, :]
        cum = self.V[None] + np.cumsum(outer, axis=0)
        sign, logdet = np.linalg.slogdet(cum)
        hit = np.flatnonzero(logdet > self._logdet_published + math.log1p(self.switching))
        return int(hit[0]) if hit.size else None

    def ingest(self, rows: np.ndarray) -> int:
        rows = np.asarray(rows, dtype=float)
        d = self.config.d
        x, r = rows[:, :d], rows[:, d]
        k = self.first_switch(x)
        n = rows.shape[0] if k is None else k + 1
        self.V += x[:n].T @ x[:n]
        self.u += x[:n].T @ r[:n]
        self.reports += n
        if k is not None:
            self._logdet_published = logdet_pd(self.V)
            self._publish_exact()
            # Adapt the simulator's window to the observed episode length.
            self._window = int(min(self._max_window, max(16, 2 * n)))
        else:
            self._window = int(min(self._max_window, 2 * self._window))
        return n

    def oful_radius(self, delta: float) -> float:
        """σ √(2 ln(1/δ) + ln(det V_t / λ^d)) + √λ S (Abbasi-Yadkori et al. 2011, Thm 2)."""
        c = self.config
        logdet_ratio = self._logdet_published - c.d * math.log(c.lam)
        return c.reward_sigma * math.sqrt(2 * math.log(1 / delta) + logdet_ratio) + math.sqrt(
            c.lam
        ) * c.S

    def _publish_exact(self) -> None:
        from scipy.linalg import cho_factor, cho_solve  # here: the shuffler loads this module

        factor = cho_factor(self.V, lower=True)
        theta = cho_solve(factor, self.u)
        self._publish(theta, self.V.copy(), self.oful_radius(self.config.failure_prob))

    def _add_public(self, G: np.ndarray, u: np.ndarray) -> None:
        """A public warm start (``LinearPolicy.warm_start``): V += Σ x xᵀ, u += Σ r x, and the
        exact model V⁻¹u published with the OFUL radius: public data needs no episode noise
        (AdaR-OFUL's episodes, and their noise, start with the first private report)."""
        from scipy.linalg import cho_factor, cho_solve

        self.V, self.u = self.V + G, self.u + u
        self._logdet_published = logdet_pd(self.V)
        theta = cho_solve(cho_factor(self.V, lower=True), self.u)
        self._publish(theta, self.V.copy(), self.oful_radius(self.config.failure_prob))

    def _extra_state(self) -> dict[str, Any]:
        return {
            "V": self.V.tolist(),
            "u": self.u.tolist(),
            "logdet_published": self._logdet_published,
        }

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        self.V = np.asarray(state["V"], dtype=float)
        self.u = np.asarray(state["u"], dtype=float)
        self._logdet_published = float(state["logdet_published"])


class LinUCB(ExactPolicy):
    algo = "linucb"
    threat_model = "none"

    def ledger(self, T: int | None = None, aggregation: Aggregation = "reports",
               secure_sum: SecureSum | None = None) -> PrivacyLedger:
        from privbandit.shared.core.accounting import ledgers

        return ledgers.none_ledger()


class AdaROFUL(ExactPolicy):
    algo = "adar-oful"
    threat_model = "central"
    config: AdaROFULConfig

    def __init__(self, config: AdaROFULConfig, rng: np.random.Generator | None = None) -> None:
        super().__init__(config, rng)
        self.episodes = 0
        self.noise = np.zeros(config.d)
        self._first = config.first_episode

    @property
    def noise_sigma(self) -> float:
        """σ_Y = √(α Δ² / (2ε)) with Δ = L (rewards in [0, 1])."""
        return self.config.noise_sigma

    def first_switch(self, x: np.ndarray) -> int | None:
        """The rarely-switching rule, except that no episode ends before ``first_episode``
        reports: the first row k with reports + k + 1 ≥ l₀ at which det V > (1 + C) det V_τ.
        det V only grows with rows, so if the rule fires before row k₀ it still holds at k₀.
        The episode ends are functions of the public contexts and of t only, so each reward
        still enters exactly one episode sum (Azize–Basu Thm 9's argument is unchanged)."""
        k0 = self._first - 1 - self.reports
        if k0 >= x.shape[0]:
            return None
        hit = super().first_switch(x)
        if hit is None or k0 <= 0:
            return hit
        return max(hit, k0)

    def noise_norm_bound(self, episodes: int, delta: float) -> float:
        """‖Σ_{m≤ℓ} Y_m‖ ≤ √(σ_Y² ℓ (d + 2√(d ln(1/δ)) + 2 ln(1/δ))) (Laurent–Massart)."""
        d = self.config.d
        lg = math.log(1 / delta)
        return math.sqrt(self.noise_sigma**2 * episodes * (d + 2 * math.sqrt(d * lg) + 2 * lg))

    def _publish_exact(self) -> None:
        """Release episode ℓ's model (Alg. 4 lines 7–9): N_ℓ = N_{ℓ−1} + Y_ℓ, Y_ℓ ~ N(0, σ_Y² I),
        θ̃ = V⁻¹(u + N_ℓ), β̃ = β_OFUL(δ/2) + ‖N_ℓ‖_bound / √λ_min(V) (App. D, Step 4), the
        noise bound from the ℓ draws added so far (never from T)."""
        c = self.config
        self.episodes += 1
        self.noise += self.rng.normal(0.0, self.noise_sigma, size=c.d)
        from scipy.linalg import cho_factor, cho_solve

        factor = cho_factor(self.V, lower=True)
        theta = cho_solve(factor, self.u + self.noise)
        half = c.failure_prob / 2
        lam_min = float(np.linalg.eigvalsh(self.V)[0])
        gamma = self.noise_norm_bound(self.episodes, time_uniform(half, self.episodes))
        beta = self.oful_radius(half) + gamma / math.sqrt(lam_min)
        self._publish(theta, self.V.copy(), beta)

    def ledger(self, T: int | None = None, aggregation: Aggregation = "reports",
               secure_sum: SecureSum | None = None) -> PrivacyLedger:
        from privbandit.shared.core.accounting import ledgers

        c = self.config
        return with_public_warm_start(ledgers.central_ledger(c.alpha, c.epsilon, c.delta),
                                      c.public_warm_start)

    def _extra_state(self) -> dict[str, Any]:
        return {**super()._extra_state(), "episodes": self.episodes, "noise": self.noise.tolist()}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        super()._load_extra_state(state)
        self.episodes = int(state["episodes"])
        self.noise = np.asarray(state["noise"], dtype=float)
