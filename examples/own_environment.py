"""Simulating on your own environment: an Environment subclass (users with K offers whose
features are random and whose click rates follow a logistic model), registered by name and
simulated for a private and a non-private policy. The command line takes the same class as
``--env examples.own_environment:Offers`` (from the repository root).

    python examples/own_environment.py
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

import privbandit
from privbandit.shared.core.environments import Environment


class Offers(Environment):
    """K offers per user; features x ~ unit ball of R^d; μ = σ(4⟨x, θ⟩) with a fixed θ."""

    name = "offers"
    L = 1.0

    def __init__(self, d: int, K: int, rng: np.random.Generator) -> None:
        super().__init__(rng)
        self.d, self.K = d, K
        theta = rng.normal(size=d)
        self.theta = theta / np.linalg.norm(theta)

    def _draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        X = self.rng.normal(size=(n, self.K, self.d))
        X /= np.linalg.norm(X, axis=2, keepdims=True)
        return X, 1.0 / (1.0 + np.exp(-4.0 * X @ self.theta))

    def params(self) -> dict[str, Any]:
        return {"d": self.d, "K": self.K}


def main(T: int = 4000, seed: int = 0) -> dict[str, float]:
    privbandit.register_environment("offers", Offers)
    out = {}
    for algo in ("linucb", "ldp-linucb"):
        res = privbandit.simulate(algo, "offers", T=T, d=4, K=8, runs=2, seed=seed)
        out[algo] = res["final_regret_mean"]
        out["random"] = res["random_regret_mean"]
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
