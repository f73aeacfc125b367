"""The published model (θ̃, V, β) and the local action selection that uses it.

Devices choose  a = argmax_a ⟨x_a, θ̃⟩ + β ‖x_a‖_{V⁻¹}  (Garcelon Alg. 1 line c; Zheng Alg. 5 line 7;
Azize–Basu Alg. 4 line 11) from the last broadcast model, without contacting any server. The
Cholesky factor of V is computed once per model, so deciding for a window of n users with K arms
is one triangular solve of n·K right-hand sides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from privbandit.shared.core.confidence import ellipsoid_norms


def shared_arms(A: np.ndarray) -> bool:
    """True for a (n, ...) array whose n rows are one row broadcast (stride 0 along axis 0)."""
    return A.ndim >= 2 and A.shape[0] > 1 and A.strides[0] == 0


@dataclass(frozen=True)
class Model:
    version: int
    theta: np.ndarray
    V: np.ndarray
    beta: float
    reports: int
    # None only until __post_init__ computes it: a cached factor, not an optional one.
    chol: np.ndarray = field(repr=False, compare=False, default=None)  # type: ignore[arg-type]  # set in __post_init__
    # ddp-linucb with a growing batch schedule: the length l of the batch this model's users'
    # reports are sized for (``DDPLinUCB.announced_batch_size``); None: the schedule's only or
    # first length.
    batch_size: int | None = None

    def __post_init__(self) -> None:
        if self.chol is None:
            object.__setattr__(self, "chol", np.linalg.cholesky(self.V))

    @property
    def d(self) -> int:
        return int(self.theta.shape[0])

    def scores(self, X: np.ndarray) -> np.ndarray:
        """Optimistic indices ⟨x, θ̃⟩ + β ‖x‖_{V⁻¹} for X of shape (..., K, d)."""
        mean = X @ self.theta
        if self.beta == 0:
            return mean
        return mean + self.beta * ellipsoid_norms(self.chol, X)

    def decide(self, X: np.ndarray) -> np.ndarray:
        """Chosen arm per user for X of shape (n, K, d) (ties: lowest index). Users that share
        one arm set (a broadcast view, as ``fixed-linear`` gives) are scored once."""
        if shared_arms(X):
            return np.repeat(self.decide(X[:1]), X.shape[0])
        return np.argmax(self.scores(X), axis=-1)

    def propensity(self, X: np.ndarray, a: np.ndarray) -> np.ndarray:
        """P(a_i | X_i) under this model for the arms ``a`` chosen by ``decide``: 1 for every
        user. The choice is the deterministic argmax of the index, and a tie is broken by a rule
        (the lowest index), not by a coin, so the chosen arm has probability 1 and every other
        arm 0 — including for users whose indices tie."""
        return np.ones(np.shape(a)[0])

    @cached_property
    def chol_inv(self) -> np.ndarray:
        """W = chol⁻¹, so that ‖x‖_{V⁻¹} = ‖W x‖₂ (V⁻¹ = chol⁻ᵀ chol⁻¹); once per model."""
        from scipy.linalg import solve_triangular  # here: the shuffler loads this module

        return solve_triangular(self.chol, np.eye(self.d), lower=True, check_finite=False)

    def decide_one(self, X: np.ndarray) -> int:
        """One user's arm for its K×d arm matrix: argmax_a ⟨x_a, θ̃⟩ + β ‖W x_a‖₂ — the same index
        as ``decide`` (ties: lowest index). For one user, a product with the cached W costs a
        few µs where a triangular solve's call overhead costs tens (the device's ``decide``)."""
        index = X @ self.theta
        if self.beta != 0:
            z = X @ self.chol_inv.T
            index = index + self.beta * np.sqrt(np.einsum("ij,ij->i", z, z))
        return int(np.argmax(index))

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "theta": self.theta.tolist(),
            "V": self.V.tolist(),
            "beta": float(self.beta),
            "reports": int(self.reports),
            **({} if self.batch_size is None else {"batch_size": int(self.batch_size)}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Model:
        size = data.get("batch_size")
        return cls(
            version=int(data["version"]),
            theta=np.asarray(data["theta"], dtype=float),
            V=np.asarray(data["V"], dtype=float),
            beta=float(data["beta"]),
            reports=int(data["reports"]),
            batch_size=None if size is None else int(size),
        )

    @classmethod
    def initial(cls, d: int, lam: float, beta: float) -> Model:
        """Version 0: θ̃ = 0, V = λ I (every algorithm's initialisation)."""
        return cls(version=0, theta=np.zeros(d), V=lam * np.eye(d), beta=beta, reports=0)


@dataclass(frozen=True)
class GLBModel(Model):
    """LDP-GLB's published model (Zheng et al. Alg. 3): (θ̃, V, β) for the choice and the OGD
    iterate θ̂ (‖θ̂‖ ≤ S) the device anchors its report at (z = ⟨x, θ̂⟩ and ∇ℓ(θ̂)); θ̂ and the
    rest are published together, under one version."""

    # A default only because it follows Model's defaulted field; __post_init__ refuses None.
    theta_hat: np.ndarray = field(default=None)  # type: ignore[arg-type]  # required, see above

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.theta_hat is None or self.theta_hat.shape != self.theta.shape:
            raise ValueError("a GLB model needs θ̂ of the model's dimension")

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "theta_hat": self.theta_hat.tolist()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GLBModel:
        base = Model.from_dict(data)
        return cls(version=base.version, theta=base.theta, V=base.V, beta=base.beta,
                   reports=base.reports, batch_size=base.batch_size,
                   theta_hat=np.asarray(data["theta_hat"], dtype=float))
