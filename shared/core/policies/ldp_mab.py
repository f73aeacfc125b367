"""``ldp-mab``: Zheng et al.'s black-box reduction (Alg. 1) for multi-armed bandits (App. B.1).

Device: sends y_t = r_t − 1/2 + Z_t, Z_t ~ N(0, σ²) — its loss ℓ_t = 1/2 − r_t ∈ [−B, B], B = 1/2,
noised as in Alg. 1 line 5 (up to the sign), (ε, δ)-LDP at sensitivity 2B = 1
(``GaussianArmRandomizer``; σ by the analytic Gaussian mechanism). The analyzer runs an unchanged
non-private bandit algorithm on the noisy feedback ("𝒜 receives f_t(x_t) + Z_t", line 6).

Black boxes:
- ``tsallis-inf`` (the paper's, Thm 11): Tsallis-INF needs losses in [0, 1]. The noisy losses
  −y_t lie in [−B̃, B̃] with B̃ = B + σ√(2 ln(2T²)) for all t ≤ T w.p. ≥ 1 − 1/T (App. E, Eqs.
  14–15), and Thm 3's regret (B + σ√(2 ln 2T²)) · Reg_𝒜 (Eq. 18) is 𝒜's regret on that range, so
  we feed 𝒜 the rescaled loss ℓ'_t = (B̃ − y_t)/(2B̃) (in [0, 1] on that event; outside it the
  value is used as is, unbiased). T is the config's ``horizon``.
- ``ucb``: the proof of Thm 11 notes that the noisy rewards are sub-Gaussian with variance proxy
  σ̃² = 1/4 + σ², so any sub-Gaussian index algorithm applies (the paper suggests KL-UCB); we use
  UCB with u_a = μ̂_a + √(2 σ̃² ln t⁴ / N_a), μ̂_a the mean of y + 1/2 (unbiased for μ_a), at the
  same t⁻⁴ level as the HeLDP agents so that the comparison isolates the mechanisms.

In the services, Tsallis-INF's importance weights need the probability with which the device drew
its arm, which is that of the model the device held: its report rows are ``[arm, p, y]`` and the
learner divides by that p (``TsallisState.observe``); a p below every probability the learner ever
gave the arm is refused (``admit_row``). The simulator serves every user the latest model, so
p_{t,a} there is the current one, and the two paths agree.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger, SecureSum
from privbandit.shared.core.accounting.mab_ledgers import ldp_mab_ledger
from privbandit.shared.core.policies.arm_model import ArmModel
from privbandit.shared.core.policies.index import IndexState
from privbandit.shared.core.policies.mab_base import MABPolicy
from privbandit.shared.core.policies.mab_config import LDPMABConfig
from privbandit.shared.core.policies.tsallis import TsallisState
from privbandit.shared.core.privacy_levels import levels_for
from privbandit.shared.core.randomizers.arms import GaussianArmRandomizer


class LDPMAB(MABPolicy[LDPMABConfig, GaussianArmRandomizer]):
    algo = "ldp-mab"
    threat_model = "ldp"

    def __init__(self, config: LDPMABConfig, rng: np.random.Generator | None = None) -> None:
        super().__init__(config, rng)
        c = config
        sigma = self.randomizer.sigma
        self.loss_range = 0.5 + sigma * math.sqrt(2 * math.log(2.0 * c.horizon**2))
        self.tsallis: TsallisState | None = None
        self.index: IndexState | None = None
        if c.black_box == "tsallis-inf":
            self.tsallis = TsallisState(c.K, c.confidence_scale)
        else:
            self.index = IndexState(c.K, math.sqrt(2 * (0.25 + sigma**2)), 0.0,
                                    c.confidence_scale)
        self.model = self._current_model(0)

    @property
    def _ucb(self) -> IndexState:
        """The index learner: the black box unless it is Tsallis-INF."""
        assert self.index is not None, "the black box is Tsallis-INF"
        return self.index

    def _make_randomizer(self) -> GaussianArmRandomizer:
        return self.randomizer_of(self.config)

    @classmethod
    def randomizer_of(cls, config: LDPMABConfig) -> GaussianArmRandomizer:
        # Without the policy, whose state needs σ (the analytic calibration imports scipy: a
        # second of start-up): the shuffler and the analyzer's body limit need only the row
        # length, and the randomizer calibrates σ on first use.
        c = config
        return GaussianArmRandomizer(c.K, c.epsilon, c.delta,
                                     carries_probability=c.black_box == "tsallis-inf")

    def feedback(self, y: np.ndarray) -> np.ndarray:
        """What the black box receives: the rescaled loss (Tsallis-INF) or y + 1/2 (UCB)."""
        if self.tsallis is not None:
            return (self.loss_range - y) / (2.0 * self.loss_range)
        return y + 0.5

    def admit_row(self, row: np.ndarray) -> None:
        """Tsallis-INF: refuse a p below the smallest probability ever given to the arm."""
        col = self.randomizer.probability_column
        if self.tsallis is not None and col is not None:
            arm, p = int(row[0]), float(row[col])
            if not p >= self.tsallis.floor[arm]:
                raise ValueError(f"probability {p!r} of arm {arm} is below every probability a "
                                 "published model gave it")

    def _observe(self, arm: int, value: float, eps: np.ndarray | None,
                 prob: float | None = None) -> None:
        x = self.feedback(np.array([[value]])).item(0, 0)
        if self.tsallis is not None:
            self.tsallis.observe(arm, x, prob)
        else:
            self._ucb.observe(arm, x, 0.0)

    def _play(self, values: np.ndarray, eps: np.ndarray | None, u: np.ndarray
              ) -> tuple[np.ndarray, int]:
        x = self.feedback(values)
        if self.tsallis is not None:
            arms = self.tsallis.play(x, u)
        else:
            arms = self._ucb.play(x, [0.0] * u.shape[0])
        return np.asarray(arms, dtype=np.int64), len(arms)

    def _current_model(self, version: int) -> ArmModel:
        if self.tsallis is not None:
            return ArmModel(version=version, reports=self.reports,
                            probabilities=self.tsallis.probabilities())
        return ArmModel(version=version, reports=self.reports,
                        indices=self._ucb.indices())

    def ledger(self, T: int | None = None, aggregation: Aggregation = "reports",
               secure_sum: SecureSum | None = None) -> PrivacyLedger:
        c = self.config
        return ldp_mab_ledger(levels_for(c.epsilon, None), c.epsilon, c.delta, self.used,
                              self.reports)

    def _extra_state(self) -> dict[str, Any]:
        learner = self.tsallis if self.tsallis is not None else self._ucb
        return {"learner": learner.state()}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        learner = self.tsallis if self.tsallis is not None else self._ucb
        learner.load(state["learner"])
