"""``logistic``: the contextual arms of ``linear`` with Bernoulli rewards of mean g(⟨x, θ*⟩),
g(z) = 1/(1 + e^{−z}) the logistic function (a generalized linear bandit, Zheng et al. §4.2).

Arms x = (1/√2)(1, v), v uniform on the unit sphere of R^{d−1}, K fresh arms per user (as in
``linear``). θ* = √2·κ·(0, w), ‖w‖ = 1, so the logit ⟨x, θ*⟩ = κ ⟨v, w⟩ ranges over [−κ, κ] and
the means over [g(−κ), g(κ)]; κ = ``LOGIT_SCALE`` = 2 gives means in [0.119, 0.881] — the
logistic curve's non-linear range, away from the flat ends where g' vanishes. ‖θ*‖ = √2 κ ≈ 2.83
(policies need S ≥ that), and on |z| ≤ L·‖θ*‖ the slope is at least g'(L‖θ*‖) (Zheng's μ).
"""

from __future__ import annotations

import math

import numpy as np

from privbandit.shared.core.environments.linear import LinearEnvironment

LOGIT_SCALE = 2.0


class LogisticEnvironment(LinearEnvironment):
    name = "logistic"

    def _theta(self, w: np.ndarray) -> np.ndarray:
        return math.sqrt(2) * LOGIT_SCALE * np.concatenate([[0.0], w])

    def mean(self, X: np.ndarray) -> np.ndarray:
        """μ = g(⟨x, θ*⟩)."""
        from scipy.special import expit  # here: services load this package, need no scipy

        return expit(X @ self.theta)
