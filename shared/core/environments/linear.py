"""``linear``: synthetic linear contextual bandit with Bernoulli rewards.

θ* = (1/√2)(1, w) with ‖w‖ = S' and per-arm features x = (1/√2)(1, v) with v uniform in direction
and ‖v‖ = 1, so ‖x‖ ≤ L = 1, ‖θ*‖ ≤ S = 1 and the mean reward ⟨x, θ*⟩ = 1/2 + ⟨v, w⟩/2 lies in
[0, 1] (the first coordinate is a constant bias feature). Each round draws K fresh arms.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from shared.core.environments.base import Environment


class LinearEnvironment(Environment):
    name = "linear"
    L = 1.0

    def __init__(self, d: int, K: int, rng: np.random.Generator) -> None:
        if d < 2:
            raise ValueError("the linear environment needs d >= 2 (one bias coordinate)")
        if K < 2:
            raise ValueError("need at least K = 2 arms")
        super().__init__(rng)
        self.d, self.K = d, K
        w = rng.normal(size=d - 1)
        w /= np.linalg.norm(w)
        self.theta = np.concatenate([[1.0], w]) / math.sqrt(2)
        self.S = float(np.linalg.norm(self.theta))

    def _draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        v = self.rng.normal(size=(n, self.K, self.d - 1))
        v /= np.linalg.norm(v, axis=2, keepdims=True)
        X = np.concatenate([np.ones((n, self.K, 1)), v], axis=2) / math.sqrt(2)
        mu = np.clip(X @ self.theta, 0.0, 1.0)
        return X, mu

    def params(self) -> dict[str, Any]:
        return {"d": self.d, "K": self.K, "L": self.L, "S": self.S}
