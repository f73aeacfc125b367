"""G-optimal designs over a finite arm set (Kiefer–Wolfowitz), by Frank–Wolfe with away steps.

For a design π on the arms A = {a_1..a_K} ⊂ R^d let V(π) = Σ_a π(a) a aᵀ and
g(π) = max_a ‖a‖²_{V(π)⁻¹}. Kiefer–Wolfowitz (Azize–Basu App. C.1, Thm 14; Lattimore–Szepesvári
Thm 21.1): when A spans R^d, minimising g, maximising log det V(π) and g(π) = d are equivalent,
and since Σ_a π(a) ‖a‖²_{V(π)⁻¹} = tr(I_d) = d, every design has g(π) ≥ d. We stop at the
stated tolerance: g(π) ≤ d (1 + tol).

Algorithm (Wolfe–Atwood; Todd & Yildirim 2007, "On Khachiyan's algorithm for the computation of
minimum-volume enclosing ellipsoids", with ω_a = ‖a‖²_{V(π)⁻¹}):
- start uniform on r arms that span the arm set (greedy pivoted Gram–Schmidt: each next arm has
  the largest component outside the span of those chosen), so V(π) is invertible;
- towards step (the Frank–Wolfe step of log det): j = argmax ω, exact line search
  λ = (ω_j/d − 1)/(ω_j − 1), π ← (1 − λ) π + λ e_j;
- away step, when the support arm k with the smallest ω is further below d than ω_j is above it:
  λ = (1 − ω_k/d)/(ω_k − 1) (the line-search optimum for ω_k > 1), capped at π(k)/(1 − π(k)) —
  the cap drops k from the support — and π ← (1 + λ) π − λ e_k.
Away steps keep the support small (the noise of AdaR-GOPE grows with it). Arms that do not span
R^d (few arms left after elimination) are handled in the coordinates of their span, of dimension
r = rank(A), where the bound is r.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_TOL = 0.05
MAX_ITERATIONS = 100_000
RANK_TOL = 1e-9


@dataclass(frozen=True)
class Design:
    """A design π over K arms with g = max_a ‖a‖²_{V(π)⁻¹} (on the arms' span, of dimension
    ``rank``) and the Kiefer–Wolfowitz target it met: g ≤ rank · (1 + tol)."""

    weights: np.ndarray
    g: float
    rank: int
    tol: float
    iterations: int

    @property
    def support(self) -> np.ndarray:
        return np.flatnonzero(self.weights > 0)


def span_coordinates(arms: np.ndarray) -> np.ndarray:
    """The arms in an orthonormal basis of their span, shape (K, r), r = rank."""
    arms = np.asarray(arms, dtype=float)
    _, s, vt = np.linalg.svd(arms, full_matrices=False)
    if s.size == 0 or s[0] == 0:
        raise ValueError("the arm set must contain a non-zero arm")
    r = int((s > RANK_TOL * s[0]).sum())
    return arms @ vt[:r].T


def spanning_subset(Y: np.ndarray) -> np.ndarray:
    """Indices of r = Y.shape[1] arms spanning R^r (greedy pivoted Gram–Schmidt)."""
    R = Y.copy()
    chosen: list[int] = []
    for _ in range(Y.shape[1]):
        j = int(np.argmax((R * R).sum(axis=1)))
        chosen.append(j)
        q = R[j] / np.linalg.norm(R[j])
        R -= np.outer(R @ q, q)
    return np.asarray(chosen)


def leverages(Y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """ω_a = ‖y_a‖²_{V(π)⁻¹} for every arm, V(π) = Σ π(a) y_a y_aᵀ (Cholesky, no inverse)."""
    from scipy.linalg import cho_factor, solve_triangular  # here: scipy.linalg costs start-up

    V = (Y * weights[:, None]).T @ Y
    chol, _ = cho_factor(V, lower=True)
    Z = solve_triangular(chol, Y.T, lower=True, check_finite=False)
    return (Z * Z).sum(axis=0)


def g_optimal_design(arms: np.ndarray, tol: float = DEFAULT_TOL,
                     max_iterations: int = MAX_ITERATIONS) -> Design:
    """A design with max_a ‖a‖²_{V(π)⁻¹} ≤ r (1 + tol) on the span of ``arms`` (module doc)."""
    if not tol > 0:
        raise ValueError("the design tolerance must be positive")
    Y = span_coordinates(arms)
    K, r = Y.shape
    weights = np.zeros(K)
    weights[spanning_subset(Y)] = 1.0 / r
    for it in range(max_iterations):
        omega = leverages(Y, weights)
        j = int(np.argmax(omega))
        if omega[j] <= r * (1 + tol):
            return Design(weights=weights, g=float(omega[j]), rank=r, tol=tol, iterations=it)
        support = np.flatnonzero(weights > 0)
        k = int(support[np.argmin(omega[support])])
        if r - omega[k] > omega[j] - r and support.size > 1:
            cap = weights[k] / (1 - weights[k])
            lam = cap if omega[k] <= 1 else min(cap, (1 - omega[k] / r) / (omega[k] - 1))
            weights = (1 + lam) * weights
            weights[k] = 0.0 if lam == cap else weights[k] - lam
        else:
            lam = (omega[j] / r - 1) / (omega[j] - 1)
            weights = (1 - lam) * weights
            weights[j] += lam
        weights = np.maximum(weights, 0.0)
        weights /= weights.sum()
    raise RuntimeError(f"no design within tolerance {tol} after {max_iterations} iterations")
