"""Multiclass data sets as contextual bandits (the supervised-to-bandit conversion).

Each round a user is an example drawn uniformly from the data set; the C classes are the arms;
the reward is 1 for the right class and 0 otherwise, so μ_{t,a} = 1{a = label} and the
pseudo-regret counts mistakes. Examples are centred, projected on their first p principal
components (SVD, deterministic) and scaled to unit norm, c ∈ R^p; arm a's feature is the
disjoint encoding x_{t,a} = e_a ⊗ c ∈ R^{C·p} (‖x‖ = 1), so a linear policy learns one weight
vector per class. Used by ``digits`` and ``letter``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from privbandit.shared.core.environments.base import Environment

MAX_DIMENSION = 64  # the services' d (protocol.messages.MAX_DIM): such an env stays servable


def components_for(d: int, n_classes: int) -> int:
    """p = max(1, d // C), kept so that C·p ≤ ``MAX_DIMENSION`` where one component allows it."""
    p = max(1, d // n_classes)
    return max(1, min(p, MAX_DIMENSION // n_classes))


def principal_features(data: np.ndarray, p: int) -> np.ndarray:
    """The first p principal-component scores of ``data``, each row scaled to unit norm."""
    X = np.asarray(data, dtype=float)
    X = X - X.mean(axis=0)
    _, _, vt = np.linalg.svd(X, full_matrices=False)
    c = X @ vt[:p].T
    c /= np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-12)
    return c


class MulticlassEnvironment(Environment):
    """C classes as C arms, features e_a ⊗ c (see module docstring)."""

    L = 1.0
    feature_map = "disjoint"

    def __init__(self, data: np.ndarray, labels: np.ndarray, n_classes: int, d: int,
                 rng: np.random.Generator) -> None:
        super().__init__(rng)
        self.K = n_classes
        self.p = components_for(d, n_classes)
        self.d = n_classes * self.p
        self.features = principal_features(data, self.p)
        self.labels = np.asarray(labels, dtype=np.int64)
        if self.labels.min() < 0 or self.labels.max() >= n_classes:
            raise ValueError(f"labels must lie in 0..{n_classes - 1}")
        self.S = float("nan")  # no linear θ* exists; the policies' S is a prior bound

    def _draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        idx = self.rng.integers(0, self.labels.shape[0], size=n)
        c = self.features[idx]
        X = np.zeros((n, self.K, self.d))
        for a in range(self.K):
            X[:, a, a * self.p : (a + 1) * self.p] = c
        mu = (np.arange(self.K)[None, :] == self.labels[idx][:, None]).astype(float)
        return X, mu

    def params(self) -> dict[str, Any]:
        return {"d": self.d, "K": self.K, "L": self.L, "pca_components": self.p,
                "examples": int(self.labels.shape[0])}
