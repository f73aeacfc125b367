"""Environment interface: contexts for a window of users, their true means, sampled rewards.

``contexts(n)`` returns per-arm features X of shape (n, K, d) with ‖x‖ ≤ L, and ``means(...)`` the
true mean rewards μ_{t,a} ∈ [0, 1] used for pseudo-regret Σ_t (max_a μ_{t,a} − μ_{t,a_t}).
Contexts drawn but not used (the simulator re-decides users after a model switch) are pushed back
with ``unread`` so the user sequence does not depend on the policy's schedule.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np


class Environment(ABC):
    name: str
    d: int
    K: int
    L: float
    # c when every context has x[0] = c (a constant feature: the ``linear`` family's 1/√2), or
    # the sum over ``intercept_coordinates`` = c; ddp-linucb's ``centered`` encoding uses it
    # (``randomizers.skellam``). None: no intercept.
    intercept: float | None = None
    # The one (K, d) arm set every user sees, when the environment has one (``fixed-linear``).
    fixed_arms: np.ndarray | None = None
    # How a logged round's context is kept (``shared.core.logged``): ``flat`` (the K·d
    # features), ``disjoint`` (c with x_a = e_a ⊗ c) or ``fixed`` (the arm set, once).
    feature_map: str = "flat"

    @classmethod
    def intercept_coordinates(cls, d: int, K: int) -> tuple[int, ...]:
        """The coordinates E whose sum is the ``intercept`` c in every context of dimensions
        (d, K): (0,), x[0] = c, unless the class says otherwise (per-arm features: every
        block's start, ``logged.disjoint_intercept_coords``)."""
        return (0,)

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self._buffer: tuple[np.ndarray, np.ndarray] | None = None

    @abstractmethod
    def _draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """n fresh users: features (n, K, d) and true means (n, K)."""

    def contexts(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if self._buffer is None:
            return self._draw(n)
        X, mu = self._buffer
        if X.shape[0] >= n:
            self._buffer = (X[n:], mu[n:]) if X.shape[0] > n else None
            return X[:n], mu[:n]
        self._buffer = None
        X2, mu2 = self._draw(n - X.shape[0])
        return np.concatenate([X, X2]), np.concatenate([mu, mu2])

    def unread(self, X: np.ndarray, mu: np.ndarray) -> None:
        """Return unused users to the front of the stream."""
        if X.shape[0] == 0:
            return
        if self._buffer is None:
            self._buffer = (X, mu)
        else:
            self._buffer = (np.concatenate([X, self._buffer[0]]),
                            np.concatenate([mu, self._buffer[1]]))

    def rewards(self, mu_chosen: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Bernoulli rewards with the given means (0/1 rewards lie in [0, 1])."""
        return (rng.random(mu_chosen.shape) < mu_chosen).astype(float)

    @abstractmethod
    def params(self) -> dict[str, Any]: ...
