"""UCB1 and the HeLDP agents: HeLDP-UCB-L (Agent 2) and HeLDP-UCB-B (Agent 4) of file 003.

All three are index policies (``shared.core.policies.index``) that publish after every report.

UCB1 (Auer et al. 2002), the non-private baseline: u_a = μ̂_a + √(2σ² ln t⁴ / N_a); for rewards in
[0, 1] (σ = 1/2, Hoeffding) this is μ̂_a + √(2 ln t / N_a), which is also HeLDP-UCB-L's first term.

HeLDP-UCB-L (Agent 2; CTL reports x_t = r_t + Laplace(1/ε_t)). Responses with ε_t < ε_min are
discarded; for the others N_a, s_a = Σ x, A_a = Σ ε_t⁻² accumulate and
    u_a = s_a/N_a + √(ln t⁴ / (2N_a)) + √(8 A_a ln t⁴ / N_a²)             (line 15).
Derivation of the second term (checked by tests/…/test_mab_estimators.py): the Laplace sum
Y = Σ L_r with scales b_r = 1/ε_r satisfies P(Y > λ) ≤ exp(−λ²/(8ν²)) for ν² ≥ Σ b_r² = A_a and
λ < 2√2 ν²/b_max (Lemma 6, Chan–Shi–Song Lemma 2.8); λ = √(8 A_a ln t⁴) gives t⁻⁴, and the side
condition with b_max ≤ 1/ε_min is exactly A_a > ε_min⁻² ln t⁴ — which is why line 4 first pulls any
arm that violates it (the warm-up; line 5, "a_t ← a", is lost in our copy: we pull the lowest such
arm). The first term is Hoeffding's for rewards in [0, 1].

HeLDP-UCB-B (Agent 4; CTB bits). The debiased response g(x; ε) = 1/2 (1 ± (e^ε+1)/(e^ε−1)) is
unbiased for r (§3.2) and lies in an interval of length c(ε) = (e^ε+1)/(e^ε−1); Hoeffding over the
used responses gives P(mean − μ ≥ b) ≤ t⁻⁴ at b = √(B_a ln t⁴ / (2N_a²)), B_a = Σ c(ε_r)²
(line 11; the same b as in the text of §3.2).

Sigmoid (-LS / -BS, Corollary 13): the curator privatises s(r); nothing changes here except that
the indices estimate E[s(R_a)].
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privbandit.shared.core.accounting import ledgers
from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger, SecureSum
from privbandit.shared.core.accounting.mab_ledgers import heldp_ledger, no_local_levels
from privbandit.shared.core.policies.arm_model import ArmModel
from privbandit.shared.core.policies.index import IndexState
from privbandit.shared.core.policies.mab_base import MABPolicy
from privbandit.shared.core.policies.mab_config import HeLDPConfig, MABConfig, UCBConfig
from privbandit.shared.core.privacy_levels import bernoulli_factor, laplace_factor
from privbandit.shared.core.randomizers.arms import ArmRandomizer, IdentityArmRandomizer
from privbandit.shared.core.randomizers.heldp import CTBRandomizer, CTLRandomizer, debias_bernoulli


class IndexPolicy(MABPolicy):
    """A policy whose state is an ``IndexState``; subclasses say how reports become (x, w)."""

    def __init__(self, config: MABConfig, rng: np.random.Generator | None = None) -> None:
        super().__init__(config, rng)
        self.index = self._make_index()

    def _make_index(self) -> IndexState:
        raise NotImplementedError

    def _prepare(self, values: np.ndarray, eps: np.ndarray | None
                 ) -> tuple[np.ndarray, list[float | None]]:
        """Per-user (estimate of the reward, weight w_t or None if discarded), vectorised."""
        return values, [0.0] * values.shape[0]

    def _observe(self, arm: int, value: float, eps: np.ndarray | None,
                 prob: float | None = None) -> None:
        x, w = self._prepare(np.array([[value]]), eps)
        self.index.observe(arm, x.item(0, 0), w[0])

    def _play(self, values: np.ndarray, eps: np.ndarray | None, u: np.ndarray
              ) -> tuple[np.ndarray, int]:
        x, w = self._prepare(values, eps)
        arms = self.index.play(x, w)
        return np.asarray(arms, dtype=np.int64), len(arms)

    def _current_model(self, version: int) -> ArmModel:
        return ArmModel(version=version, reports=self.reports, indices=self.index.indices())

    def _extra_state(self) -> dict[str, Any]:
        return {"index": self.index.state()}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        self.index.load(state["index"])


class UCB(IndexPolicy):
    algo = "ucb"
    threat_model = "none"
    config: UCBConfig

    def _make_randomizer(self) -> ArmRandomizer:
        # Hoeffding's σ = 1/2 holds for rewards in [0, 1]; a larger σ admits unbounded rewards.
        return IdentityArmRandomizer(self.config.K, bounded=self.config.reward_sigma <= 0.5)

    def _make_index(self) -> IndexState:
        c = self.config
        return IndexState(c.K, math.sqrt(2 * c.reward_sigma**2), 0.0, c.confidence_scale)

    def ledger(self, T: int | None = None, aggregation: Aggregation = "reports",
               secure_sum: SecureSum | None = None) -> PrivacyLedger:
        return no_local_levels(ledgers.none_ledger())


class HeLDPPolicy(IndexPolicy):
    """Per-user levels: responses with ε_t < ε_min are discarded (counted as not used).

    Subclasses name their curator and the width constants (k1, k2) of ``index.IndexState``.
    """

    threat_model = "ldp"
    config: HeLDPConfig
    mechanism = ""
    curator: type[CTLRandomizer] | type[CTBRandomizer]
    k1 = k2 = 0.0
    warm_up = False

    def _make_randomizer(self) -> ArmRandomizer:
        return self.curator(self.config.K, sigmoid=self.config.sigmoid)

    def _make_index(self) -> IndexState:
        c = self.config
        return IndexState(c.K, self.k1, self.k2, c.confidence_scale,
                          forced=1.0 / c.eps_min**2 if self.warm_up else 0.0)

    def _usable(self, eps: np.ndarray) -> np.ndarray:
        return eps >= self.config.eps_min

    def _weights(self, eps: np.ndarray, ok: np.ndarray) -> list[float | None]:
        factor = laplace_factor if self.mechanism == "laplace" else bernoulli_factor
        w = factor(np.where(ok, eps, 1.0)).tolist()
        return [wi if k else None for wi, k in zip(w, ok.tolist(), strict=True)]

    def ledger(self, T: int | None = None, aggregation: Aggregation = "reports",
               secure_sum: SecureSum | None = None) -> PrivacyLedger:
        c = self.config
        return heldp_ledger(c.levels, c.eps_min, self.mechanism, c.sigmoid, self.used,
                            self.declined, self.reports)


class HeLDPUCBL(HeLDPPolicy):
    """Agent 2: the mean of the CTL responses, k1 = √(1/2), k2 = √8, and the warm-up."""

    algo = "heldp-ucb-l"
    mechanism = "laplace"
    curator = CTLRandomizer
    k1, k2 = math.sqrt(0.5), math.sqrt(8.0)
    warm_up = True

    def _prepare(self, values: np.ndarray, eps: np.ndarray | None
                 ) -> tuple[np.ndarray, list[float | None]]:
        ok = self._usable(np.asarray(eps))
        return values, self._weights(np.asarray(eps), ok)


class HeLDPUCBB(HeLDPPolicy):
    """Agent 4: the mean of the debiased CTB bits g(x; ε), k1 = 0, k2 = √(1/2)."""

    algo = "heldp-ucb-b"
    mechanism = "bernoulli"
    curator = CTBRandomizer
    k1, k2 = 0.0, math.sqrt(0.5)

    def _prepare(self, values: np.ndarray, eps: np.ndarray | None
                 ) -> tuple[np.ndarray, list[float | None]]:
        eps = np.asarray(eps)
        ok = self._usable(eps)
        safe = np.where(ok, eps, 1.0)[:, None]
        x = np.where(ok[:, None], debias_bernoulli(values, safe), 0.0)
        return x, self._weights(eps, ok)
