"""``digits``: scikit-learn's handwritten digits turned into a contextual bandit.

Supervised-to-bandit conversion: each round a user is an image drawn uniformly from the 1,797
images; the K = 10 classes are the arms; the reward is 1 for the right class and 0 otherwise, so
μ_{t,a} = 1{a = label} and the pseudo-regret counts mistakes. Images are projected on their first
p principal components and scaled to unit norm, c ∈ R^p; arm a's feature is the disjoint encoding
x_{t,a} = e_a ⊗ c ∈ R^{10p} (‖x‖ = 1), so a linear policy learns one weight vector per class.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shared.core.environments.base import Environment

N_CLASSES = 10


def digits_dimension(d: int) -> int:
    """The dimension actually used for a requested d: 10·p with p = max(1, d // 10)."""
    return N_CLASSES * max(1, d // N_CLASSES)


class DigitsEnvironment(Environment):
    name = "digits"
    L = 1.0
    K = N_CLASSES

    def __init__(self, d: int, rng: np.random.Generator) -> None:
        from sklearn.datasets import load_digits

        super().__init__(rng)
        self.p = max(1, d // N_CLASSES)
        self.d = N_CLASSES * self.p
        data = load_digits()
        X = data.data - data.data.mean(axis=0)
        # Principal components by SVD (deterministic; no randomness needed).
        _, _, vt = np.linalg.svd(X, full_matrices=False)
        c = X @ vt[: self.p].T
        c /= np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-12)
        self.features = c
        self.labels = data.target.astype(np.int64)
        self.S = float("nan")  # no linear θ* exists; the policies' S is a prior bound

    def _draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        idx = self.rng.integers(0, self.labels.shape[0], size=n)
        c = self.features[idx]
        X = np.zeros((n, N_CLASSES, self.d))
        for a in range(N_CLASSES):
            X[:, a, a * self.p : (a + 1) * self.p] = c
        mu = (np.arange(N_CLASSES)[None, :] == self.labels[idx][:, None]).astype(float)
        return X, mu

    def params(self) -> dict[str, Any]:
        return {"d": self.d, "K": self.K, "L": self.L, "pca_components": self.p}
