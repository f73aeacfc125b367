"""Per-arm (disjoint) features built by the library, as a simulator environment (issue 44 item 3):
each user has her own features c_t, and arm a's features are x_{t,a} = e_a ⊗ c_t — the
``disjoint`` encoding a user gets from her logs (``shared.core.logged.arm_features``, the
builder ``privbandit.read_log`` uses), here rebuilt by that same function from c_t.

c_t = (1/√2)(1, v_t) with v_t uniform on the unit sphere of R^{p−1} (‖c_t‖ = 1, an intercept in
every arm's block but not in x[0]: the other arms' blocks are zeros), p = d/K. Arm a has its own
θ_a = (1/√2)(1, w_a) (w_a uniform on the sphere), so the mean reward of arm a is
μ_{t,a} = ⟨c_t, θ_a⟩ = ½ + ⟨v_t, w_a⟩/2 ∈ [0, 1], Bernoulli rewards, and θ* = (θ_1, …, θ_K) has
‖θ*‖ = √K: a user at the policies' defaults (S = 1) states a smaller bound than the truth, as a
user of her own log would.

Its contexts declare that intercept: c = 1/√2 at the coordinates 0, p, …, (K − 1)p
(``logged.disjoint_intercept_coords``), which ddp-linucb's ``encoding = "auto"`` turns into the
centered encoding with those intercept coordinates (``randomizers.skellam``, *Encodings*).

    privbandit simulate --env bench.experiments.disjoint_env:DisjointLinear --d 20 --K 5 ...
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privbandit.shared.core.environments.base import Environment
from privbandit.shared.core.environments.linear import biased_features, unit_directions
from privbandit.shared.core.logged import arm_features, disjoint_intercept_coords


class DisjointLinear(Environment):
    name = "disjoint-linear"
    L = 1.0
    feature_map = "disjoint"
    intercept = 1 / math.sqrt(2)  # c_t[0], the start of every arm's block

    @classmethod
    def intercept_coordinates(cls, d: int, K: int) -> tuple[int, ...]:
        """Every block's start (``logged.disjoint_intercept_coords``)."""
        return disjoint_intercept_coords(d, K)

    def __init__(self, d: int, K: int, rng: np.random.Generator) -> None:
        if K < 2 or d % K or d // K < 2:
            raise ValueError(f"disjoint features need d = K·p with p >= 2 and K >= 2; got d = {d}, "
                             f"K = {K}")
        super().__init__(rng)
        self.d, self.K, self.p = d, K, d // K
        self.theta_arms = biased_features(unit_directions(rng, (K, self.p - 1)))  # (K, p)
        self.theta = self.theta_arms.reshape(-1)
        self.S = float(np.linalg.norm(self.theta))

    def _draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        c = biased_features(unit_directions(self.rng, (n, self.p - 1)))
        X = arm_features({"context": c, "n_actions": self.K, "feature_map": "disjoint"})
        return X, np.clip(c @ self.theta_arms.T, 0.0, 1.0)

    def params(self) -> dict[str, Any]:
        return {"d": self.d, "K": self.K, "L": self.L, "S": self.S, "p": self.p,
                "features": "disjoint (shared.core.logged.arm_features)",
                "mean_range": [0.0, 1.0], "sqrt_K": math.sqrt(self.K)}
