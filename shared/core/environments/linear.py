"""``linear``: synthetic linear contextual bandit with Bernoulli rewards.

θ* = (1/√2)(1, w) with ‖w‖ = S' and per-arm features x = (1/√2)(1, v) with v uniform in direction
and ‖v‖ = 1, so ‖x‖ ≤ L = 1, ‖θ*‖ ≤ S = 1 and the mean reward ⟨x, θ*⟩ = 1/2 + ⟨v, w⟩/2 lies in
[0, 1] (the first coordinate is a constant bias feature). Each round draws K fresh arms.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privbandit.shared.core.environments.base import Environment


def unit_directions(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Vectors uniform on the unit sphere of R^{shape[-1]}."""
    v = rng.normal(size=shape)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def biased_features(v: np.ndarray) -> np.ndarray:
    """x = (1/√2)(1, v) for unit v (‖x‖ = 1, first coordinate a constant bias feature)."""
    ones = np.ones((*v.shape[:-1], 1))
    return np.concatenate([ones, v], axis=-1) / math.sqrt(2)


class LinearEnvironment(Environment):
    name = "linear"
    L = 1.0
    intercept = 1 / math.sqrt(2)  # biased_features: x[0] = 1/√2 for every arm

    def __init__(self, d: int, K: int, rng: np.random.Generator) -> None:
        if d < 2:
            raise ValueError(f"the {self.name} environment needs d >= 2 (one bias coordinate)")
        if K < 2:
            raise ValueError("need at least K = 2 arms")
        super().__init__(rng)
        self.d, self.K = d, K
        self.theta = self._theta(unit_directions(rng, (d - 1,)))
        self.S = float(np.linalg.norm(self.theta))

    def _theta(self, w: np.ndarray) -> np.ndarray:
        """θ* from a unit direction w ∈ R^{d−1}: (1/√2)(1, w)."""
        return biased_features(w)

    def mean(self, X: np.ndarray) -> np.ndarray:
        """μ = ⟨x, θ*⟩ ∈ [0, 1] (clipped against rounding)."""
        return np.clip(X @ self.theta, 0.0, 1.0)

    def _draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        X = biased_features(unit_directions(self.rng, (n, self.K, self.d - 1)))
        return X, self.mean(X)

    def params(self) -> dict[str, Any]:
        return {"d": self.d, "K": self.K, "L": self.L, "S": self.S}
