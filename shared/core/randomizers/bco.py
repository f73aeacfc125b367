"""Device-side reports of LDP bandit convex optimisation (Zheng et al. 2020, Algorithms 1 and 2).

One point (Alg. 1 line 5): user t reports y_t = clip(f_t(x_t), 0, B) + Z_t, Z_t ~ N(0, σ²). Two
users' clean values differ by at most the range B of the losses, so the report is the Gaussian
mechanism at ℓ2-sensitivity Δ = B. (The paper assumes |f| ≤ B, a range 2B, and sets
σ = 2B√(2 ln(1.25/δ))/ε; our losses lie in [0, B], a range B.)

Two points (Alg. 2 line 5): user t reports
    y_t = clip(f_t(x_{t,1}) − f_t(x_{t,2}), ±G‖x_{t,1} − x_{t,2}‖) + n_tᵀ(x_{t,1} − x_{t,2}),
n_t ~ N(0, σ² I_d). For a G-Lipschitz loss the difference lies in [−G‖Δx‖, G‖Δx‖] (the clip only
enforces this for a loss that breaks the assumption), so two users' clean values differ by at most
2G‖Δx‖, while n_tᵀΔx ~ N(0, σ²‖Δx‖²): the Gaussian mechanism with σ/Δ = σ/(2G), whatever ρ is
(the proof of Theorem 5: with ‖Δx‖ = 2ρ, sensitivity 4ρG against noise sd 2ρσ). The points and the
direction u_t are independent of the loss, so publishing them costs nothing.

Calibration (``calibration``):
- ``analytic`` (default): the smallest σ with which the Gaussian mechanism at that sensitivity is
  exactly (ε, δ)-DP (Balle–Wang 2018, Thm 8; ``shared.core.accounting.gaussian``), as for the
  project's ``ldp-linucb``;
- ``paper``: the paper's σ, 2B√(2 ln(1.25/δ))/ε (Alg. 1) and 2G√(2 ln(1.25/δ))/ε (Alg. 2), the
  classic bound (Dwork–Roth Thm A.1, proven for ε < 1). The ledger then reports the exact ε this
  σ achieves at δ (``achieved_epsilon``), for Alg. 1 below the requested one (range B, not 2B).
"""

from __future__ import annotations

import functools
import math
from typing import Literal

import numpy as np

from privbandit.shared.core.accounting.gaussian import gaussian_delta, gaussian_sigma
from privbandit.shared.core.accounting.search import bisect_boundary

Calibration = Literal["analytic", "paper"]


def classic_factor(eps: float, delta: float) -> float:
    """√(2 ln(1.25/δ))/ε of the paper's σ (Algorithms 1 and 2, line 2)."""
    return math.sqrt(2.0 * math.log(1.25 / delta)) / eps


def one_point_sigma(eps: float, delta: float, loss_bound: float,
                    calibration: Calibration = "analytic") -> float:
    """σ of Alg. 1 for losses in [0, B]: exact at Δ = B, or the paper's 2B√(2 ln(1.25/δ))/ε."""
    if calibration == "paper":
        return 2.0 * loss_bound * classic_factor(eps, delta)
    return gaussian_sigma(eps, delta, loss_bound)


def two_point_sigma(eps: float, delta: float, lipschitz: float,
                    calibration: Calibration = "analytic") -> float:
    """σ of Alg. 2 (per unit of ‖Δx‖): exact at Δ = 2G, or the paper's 2G√(2 ln(1.25/δ))/ε."""
    if calibration == "paper":
        return 2.0 * lipschitz * classic_factor(eps, delta)
    return gaussian_sigma(eps, delta, 2.0 * lipschitz)


def achieved_epsilon(sigma: float, delta: float, sensitivity: float, tol: float = 1e-9) -> float:
    """The smallest ε (to ``tol``, rounded up) with δ(ε; σ, Δ) ≤ δ for the Gaussian mechanism."""
    if gaussian_delta(0.0, sigma, sensitivity) <= delta:
        return 0.0

    def ok(e: float) -> bool:
        return gaussian_delta(e, sigma, sensitivity) <= delta

    hi = 1.0
    while not ok(hi):
        hi *= 2.0
    return bisect_boundary(ok, 0.0, hi, tol)


class OnePointReport:
    """Alg. 1 line 5 on the device: the clipped loss plus N(0, σ²)."""

    def __init__(self, eps: float, delta: float, loss_bound: float,
                 calibration: Calibration = "analytic") -> None:
        self.B = float(loss_bound)
        self.sensitivity = self.B
        self._calibration = (float(eps), float(delta), calibration)

    @functools.cached_property
    def sigma(self) -> float:
        """On first use (the analytic calibration imports scipy)."""
        eps, delta, calibration = self._calibration
        return one_point_sigma(eps, delta, self.B, calibration)

    def report(self, loss: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        loss = np.asarray(loss, dtype=float)
        if not np.isfinite(loss).all():
            raise ValueError("losses must be finite")
        return np.clip(loss, 0.0, self.B) + self.sigma * rng.standard_normal(loss.shape)


class TwoPointReport:
    """Alg. 2 line 5 on the device: the clipped difference plus n_tᵀ(x_{t,1} − x_{t,2})."""

    def __init__(self, eps: float, delta: float, lipschitz: float,
                 calibration: Calibration = "analytic") -> None:
        self.G = float(lipschitz)
        self.sensitivity_per_unit = 2.0 * self.G  # × ‖x_{t,1} − x_{t,2}‖
        self._calibration = (float(eps), float(delta), calibration)

    @functools.cached_property
    def sigma(self) -> float:
        """On first use (the analytic calibration imports scipy)."""
        eps, delta, calibration = self._calibration
        return two_point_sigma(eps, delta, self.G, calibration)

    def report(self, f1: np.ndarray, f2: np.ndarray, x1: np.ndarray, x2: np.ndarray,
               rng: np.random.Generator) -> np.ndarray:
        """Reports of n users: losses f1, f2 (n,) at points x1, x2 (n, d)."""
        f1, f2 = np.asarray(f1, dtype=float), np.asarray(f2, dtype=float)
        dx = np.asarray(x1, dtype=float) - np.asarray(x2, dtype=float)
        if not (np.isfinite(f1).all() and np.isfinite(f2).all() and np.isfinite(dx).all()):
            raise ValueError("losses and points must be finite")
        bound = self.G * np.linalg.norm(dx, axis=-1)
        n = self.sigma * rng.standard_normal(dx.shape)
        return np.clip(f1 - f2, -bound, bound) + np.sum(n * dx, axis=-1)
