"""``fixed-linear``: a linear bandit on a fixed set of K arms, the same for every user.

The K arms are drawn once per run with the construction of ``linear``: x_a = (1/√2)(1, v_a), v_a
uniform on the unit sphere of R^{d−1}, and θ* = (1/√2)(1, w), so ‖x‖ = 1, ‖θ*‖ = 1 and the means
μ_a = ⟨x_a, θ*⟩ = 1/2 + ⟨v_a, w⟩/2 lie in [0, 1]; rewards are Bernoulli(μ_a). This is the setting
of phased elimination (AdaR-GOPE, Azize–Basu Alg. 3) and of most published linear-bandit
benchmarks.

Every user sees the same arms, so ``contexts(n)`` returns read-only broadcast views of the one
(K, d) arm matrix and (K,) mean vector (no n·K·d copy: K may be 10⁴), and ``unread`` has nothing
to push back (users are indistinguishable; the rewards come from the simulator's own stream).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from privbandit.shared.core.environments.linear import (
    LinearEnvironment,
    biased_features,
    unit_directions,
)

MAX_ARMS = 10_000


class FixedLinearEnvironment(LinearEnvironment):
    name = "fixed-linear"
    feature_map = "fixed"
    fixed_arms: np.ndarray  # always set here (None in the base: contextual arms)

    def __init__(self, d: int, K: int, rng: np.random.Generator) -> None:
        if K > MAX_ARMS:
            raise ValueError(f"fixed-linear takes at most K = {MAX_ARMS} arms")
        super().__init__(d, K, rng)
        self.fixed_arms = biased_features(unit_directions(rng, (K, d - 1)))
        self.arm_means = self.mean(self.fixed_arms)

    def use_arms(self, arms: np.ndarray) -> None:
        """Replace the drawn arms by given ones (an ``adar-gope`` task's seeded arms: the demo's
        users then see the task's arms with this environment's θ*)."""
        arms = np.asarray(arms, dtype=float)
        if arms.ndim != 2 or arms.shape[1] != self.d:
            raise ValueError(f"arms must have shape (K, {self.d})")
        self.K = arms.shape[0]
        self.fixed_arms = arms
        self.arm_means = self.mean(arms)

    def _draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        return (np.broadcast_to(self.fixed_arms, (n, self.K, self.d)),
                np.broadcast_to(self.arm_means, (n, self.K)))

    def contexts(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        return self._draw(n)

    def unread(self, X: np.ndarray, mu: np.ndarray) -> None:
        return None

    def params(self) -> dict[str, Any]:
        gaps = np.sort(self.arm_means.max() - self.arm_means)
        return {**super().params(), "best_mean": float(self.arm_means.max()),
                "smallest_gap": float(gaps[1])}
