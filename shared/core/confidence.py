"""Ridge regression on noisy sufficient statistics, and its confidence ellipsoid.

All private linear policies here estimate θ* from noisy versions of G = Σ x xᵀ and u = Σ r x:
    G̃ = G + H,  ũ = u + h,  Ṽ = G̃ + c I,  θ̃ = Ṽ⁻¹ ũ   (solved by Cholesky),
with H symmetric zero-mean noise, h zero-mean noise and c a regularizer. If, with probability
1 − δ, ρ_min I ⪯ H + c I ⪯ ρ_max I and ‖h‖ ≤ χ, then (Shariff & Sheffet 2018, Prop. 4; the
composition behind Garcelon Lemma 9, Zheng Thm 8 and Azize–Basu App. D)
    ‖θ̃ − θ*‖_Ṽ ≤ σ √(2 ln(1/δ) + d ln(1 + t L²/(d ρ_min))) + S √ρ_max + χ / √ρ_min.
Proof in three lines: θ̃ − θ* = Ṽ⁻¹(Σ x η + h − (H + cI)θ*); Ṽ ⪰ G + ρ_min I bounds the first two
terms in ‖·‖_{Ṽ⁻¹} by the self-normalised bound (Abbasi-Yadkori et al. 2011, Thm 1) and χ/√ρ_min;
the last is at most ‖θ*‖_{H+cI} ≤ S √ρ_max.

Noise bounds. For a symmetric d×d matrix whose upper-triangle entries are independent and
sub-Gaussian with proxy v, a 1/4-net of the sphere (|N| ≤ 9^d) and vᵀHv having proxy ≤ 2v give
    ‖H‖ ≤ 4 √(v (d ln 9 + ln(2/δ)))   w.p. 1 − δ,
and for a vector with independent sub-Gaussian entries a 1/2-net (|N| ≤ 5^d) gives
    ‖h‖ ≤ 2 √(2 v (d ln 5 + ln(1/δ))).
These hold for Gaussian noise (Zheng) and for the bounded bit noise of the 0/1 randomizer
(Garcelon) alike. Bounds that must hold at every update time use δ_t = 6δ/(π² t²) (Σ_t δ_t = δ).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def time_uniform(delta: float, t: int) -> float:
    """δ_t = 6δ/(π² t²): a union bound over all update times t ≥ 1 costs at most δ."""
    return 6.0 * delta / (math.pi**2 * max(t, 1) ** 2)


def matrix_noise_bound(proxy: float, d: int, delta: float) -> float:
    """High-probability bound on ‖H‖ for symmetric noise with entry proxy ``proxy`` (ε-net)."""
    if proxy <= 0:
        return 0.0
    return 4.0 * math.sqrt(proxy * (d * math.log(9.0) + math.log(2.0 / delta)))


def vector_noise_bound(proxy: float, d: int, delta: float) -> float:
    """High-probability bound on ‖h‖ for a vector with entry proxy ``proxy`` (ε-net)."""
    if proxy <= 0:
        return 0.0
    return 2.0 * math.sqrt(2.0 * proxy * (d * math.log(5.0) + math.log(1.0 / delta)))


def self_normalized(sigma: float, d: int, t: int, L: float, rho_min: float, delta: float) -> float:
    """σ √(2 ln(1/δ) + d ln(1 + t L²/(d ρ_min))) (Abbasi-Yadkori et al. 2011, Thm 1 + det bound)."""
    return sigma * math.sqrt(2 * math.log(1 / delta) + d * math.log1p(t * L * L / (d * rho_min)))


def noisy_ridge_beta(
    *,
    t: int,
    d: int,
    L: float,
    S: float,
    sigma: float,
    rho_min: float,
    rho_max: float,
    chi: float,
    delta: float,
) -> float:
    """Radius of the confidence ellipsoid ‖θ̃ − θ*‖_Ṽ ≤ β (Shariff–Sheffet Prop. 4; see module)."""
    if rho_min <= 0:
        return math.inf
    return (
        self_normalized(sigma, d, t, L, rho_min, delta)
        + S * math.sqrt(rho_max)
        + chi / math.sqrt(rho_min)
    )


@dataclass(frozen=True)
class Solved:
    """A positive-definite Ṽ, its lower Cholesky factor, θ̃ = Ṽ⁻¹ ũ, and whether Ṽ was repaired."""

    V: np.ndarray
    chol: np.ndarray
    theta: np.ndarray
    repaired: bool


def make_positive_definite(V: np.ndarray, floor: float) -> tuple[np.ndarray, bool]:
    """Ṽ itself if its Cholesky factorisation succeeds, else its eigenvalues clipped to ``floor``.

    A noisy Ṽ can fail to be positive definite (the paper's regularizer only makes that an event of
    probability ≤ δ; a practical regularizer makes it common early on). Clipping is the projection
    onto {A ⪰ floor·I} in Frobenius norm, a post-processing of the private statistics.
    """
    V = (V + V.T) / 2
    try:
        np.linalg.cholesky(V)
        return V, False
    except np.linalg.LinAlgError:
        pass
    w, Q = np.linalg.eigh(V)
    return (Q * np.maximum(w, floor)) @ Q.T, True


def clip_eigenvalues(V: np.ndarray, floor: float) -> tuple[np.ndarray, bool]:
    """Raise every eigenvalue of symmetric V below ``floor`` to ``floor`` (practical setting)."""
    V = (V + V.T) / 2
    w, Q = np.linalg.eigh(V)
    if w.min() >= floor:
        return V, False
    return (Q * np.maximum(w, floor)) @ Q.T, True


def ridge_solve(V: np.ndarray, u: np.ndarray, floor: float) -> Solved:
    """θ̃ = Ṽ⁻¹ ũ by Cholesky (never an explicit inverse), repairing a non-PD Ṽ first."""
    from scipy.linalg import cho_factor, cho_solve  # here: the shuffler loads this module

    Vpd, repaired = make_positive_definite(V, floor)
    c, lower = cho_factor(Vpd, lower=True)
    theta = cho_solve((c, lower), u)
    return Solved(V=Vpd, chol=np.tril(c), theta=theta, repaired=repaired)


def logdet_pd(V: np.ndarray) -> float:
    """log det of a positive-definite matrix (−inf if it is not PD)."""
    sign, val = np.linalg.slogdet(V)
    return float(val) if sign > 0 else -math.inf


def ellipsoid_norms(chol: np.ndarray, X: np.ndarray) -> np.ndarray:
    """‖x‖_{V⁻¹} for every row of X (..., d), with V = chol cholᵀ: ‖chol⁻¹ x‖₂."""
    from scipy.linalg import solve_triangular

    d = chol.shape[0]
    flat = X.reshape(-1, d)
    z = solve_triangular(chol, flat.T, lower=True, check_finite=False)
    return np.sqrt((z * z).sum(axis=0)).reshape(X.shape[:-1])
