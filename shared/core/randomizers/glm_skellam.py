"""Device side of ``ddp-glb``: the GLM (logistic) statistics of one user, released through the
same distributed-DP pipeline as ``ddp-linucb`` (clip, scale, round, Skellam noise added by the
aggregators or the devices; ``randomizers.skellam``).

The statistics. A user served the model whose anchor is θ̂ (public: published with the model)
plays x, sees y ∈ [0, 1] and, with z = ⟨x, θ̂⟩, g the logistic link and w = g'(z) ∈ (0, ¼],
holds the *local quadratic surrogate* of her log-likelihood at θ̂ (one iteratively reweighted
least squares / Fisher-scoring step, the statistics of a Newton step of the GLM MLE):

    H_i = w x xᵀ,     b_i = (w z + y − g(z)) x,     −log p(y | x, θ) ≈ const − b_iᵀθ + ½ θᵀH_iθ.

The analyzer sums them over everybody and solves (Σ H_i + c I) θ = Σ b_i — the weighted least
squares of the working responses z + (y − g(z))/w with weights w. That is the paper's estimator
in the one form a secure sum can carry: Sarmasarkar (arXiv 2602.00417) fits the MLE by private
convex optimisation over the raw (x, y) held by a curator and tracks the Hessian-weighted Gram
matrix H = Σ g'(⟨x, θ_w⟩) x xᵀ/e by tree aggregation; here nobody holds raw data and each user
reports once, so the MLE's iterations cannot revisit her, and the Newton step is taken at the
anchor she was served (a report under an older anchor is still a valid surrogate, only a coarser
one; the anchors move every published model, so the sum is an online Newton / IRLS fit). ``H`` is
the paper's H with the anchor in place of θ_w.

The release, and why it is the ``"upper"`` encoding's exact guarantee. The device releases

    v = (upper(q x xᵀ), a x),     q = 4w ∈ (0, 1],     a = w z + y − g(z),

and two facts make v obey every bound the ``"upper"`` encoding states for (upper(x xᵀ), r x):

- q x xᵀ = x' x'ᵀ with x' = √q x, ‖x'‖ ≤ ‖x‖ ≤ L: the matrix part's entries and norm bounds are
  those of a context x', and ‖q x xᵀ − q' y yᵀ‖_F² = q²‖x‖⁴ + q'²‖y‖⁴ − 2qq'⟨x, y⟩² ≤ 2L⁴;
- a ∈ (−1, 1) for every z and every y ∈ [0, 1]: with f(z) = z g'(z) − g(z), a = f(z) + y, and
  f'(z) = z g''(z) = z g'(z)(1 − 2g(z)) ≤ 0 (z and 1 − 2g(z) have opposite signs), so f
  decreases from 0 (z → −∞) to −1 (z → +∞): a ∈ (−1, 0) + [0, 1] = (−1, 1). So ‖a x‖ ≤ L,
  each entry |a x_i| ≤ L (the encoding's range ±w_u L), and ‖a x − a' y‖ ≤ 2L.

Hence the clip bound C = √(L⁴ + L²), the honest entry ranges (``entry_ranges``) and the pair bound
Δ_v = √(2L⁴ + 4L²) of the ``"upper"`` encoding hold unchanged, for *any* anchor θ̂ (no bound on
‖θ̂‖ is needed for privacy), and the accountant's (ε, δ) of ``ddp-linucb`` at the same
(d, s, L, ε, δ) is this release's exact guarantee (``ledger``; tests check the bounds by search
over inputs).

The ``"frobenius"`` encoding (off-diagonals × √2, so the matrix part's norm is ‖q x xᵀ‖_F, and
a x × w_u) keeps its clip √(L⁴ + w_u²L²) and its entry ranges (|q x_i x_j| ≤ L²/2, |a| ≤ 1), but
not ddp-linucb's joint pair bound, which assumes r ∈ [0, 1] and q = 1. Its own (``glm_pair_bound``):
with p = ‖x‖, p' = ‖x'‖ ≤ L and t = ⟨x, x'⟩,

    ‖v − v'‖² = (q²p⁴ + q'²p'⁴ − 2qq't²) + w_u²(a²p² + a'²p'² − 2aa't).

Each bracket is a convex quadratic in its pair ((q, q') ∈ [0, 1]², (a, a') ∈ [−1, 1]²), so it
is at most its largest vertex value: the first max(p⁴, p'⁴, p⁴ + p'⁴ − 2t²) ≤ A·max(1, 2 − 2τ²),
the second p² + p'² + 2|t| ≤ U(2 + 2τ), with A = L⁴, U = w_u²L², τ = |t|/L² ∈ [0, 1]. So
Δ_v² = max over τ of A·max(1, 2 − 2τ²) + U(2 + 2τ): on τ ≤ 1/√2 the concave A(2 − 2τ²) + U(2 + 2τ)
peaks at τ = min(U/(2A), 1/√2); beyond, A + U(2 + 2τ) ≤ A + 4U. At L = w_u = 1, Δ_v² = 5 against
the ``"upper"`` encoding's 6, and the off-diagonal entries carry half the noise variance. (The
bound ignores that q and a are tied — q = 1 only at z = 0, where |a| ≤ ½ —; a search over the
tied pairs at ‖x‖ = ‖x'‖ = 1 finds 4.0, so a tighter proof would gain a little more.) The
``"centered"`` encoding's (r − ½) x has no counterpart: a is already centred.

The estimator: the analyzer's decoded batch sum S/(s·weights) is unbiased for Σ v_i (rounding
and noise have mean zero), so (G̃, ũ) estimate (Σ q x xᵀ, Σ a x) = (4 Σ H_i, Σ b_i); ``estimate``
returns (G̃, 4ũ), whose ridge solution is the surrogate's minimiser θ = (Σ H_i)⁻¹ Σ b_i, and the
noise proxy of the vector part is 16 × the encoding's.

Where the anchor comes from: a device seals [x, version, θ̂] with its decision (the ``glb``
family, ``services.device.glb``) and hands ``device_report`` the row [x, θ̂] (2d columns); the
simulator decides a window of users with one model and passes d-column rows, which use the
anchor the policy set (``set_anchor``).
"""

from __future__ import annotations

import math

import numpy as np

from privbandit.shared.core.randomizers.base import Estimate, check_inputs, upper_indices
from privbandit.shared.core.randomizers.skellam import SkellamRandomizer

# ũ estimates Σ a x = Σ b_i, G̃ estimates Σ q x xᵀ = 4 Σ H_i: the ridge solution needs 4ũ.
RESPONSE_SCALE = 4.0


def glm_pair_bound(L: float, u_weight: float = 1.0, encoding: str = "upper") -> float:
    """Δ_v ≥ ‖v − v'‖ for the GLM statistics (module docstring): √(2L⁴ + 4w²L²) under
    ``"upper"`` (the two parts' separate bounds); under ``"frobenius"`` the maximum over
    τ ∈ [0, 1] of A·max(1, 2 − 2τ²) + U(2 + 2τ), A = L⁴, U = w²L²."""
    A, U = L**4, (u_weight * L) ** 2
    if encoding == "upper":
        return math.sqrt(2 * A + 4 * U)
    if encoding != "frobenius":
        raise ValueError(f"the GLM statistics take the upper or frobenius encoding, not "
                         f"{encoding!r}")
    tau = min(U / (2 * A), 1 / math.sqrt(2))
    return math.sqrt(max(A * (2 - 2 * tau * tau) + U * (2 + 2 * tau), A + 4 * U))


def glm_statistics(x: np.ndarray, y: np.ndarray, anchors: np.ndarray,
                   u_weight: float = 1.0) -> np.ndarray:
    """Rows v = (upper(q x xᵀ), u_weight · a x) (module docstring) for contexts x (n, d), rewards
    y (n,) and anchors (n, d) or (d,): q = 4 g'(z), a = g'(z) z + y − g(z), z = ⟨x, θ̂⟩ (before
    an encoding's weights on the off-diagonal entries)."""
    # scipy on first use only: a service app imports no accountant library at start
    # (tests/services/common/test_imports.py).
    from scipy.special import expit

    x = np.asarray(x, dtype=float)
    z = np.einsum("ij,ij->i", x, np.broadcast_to(anchors, x.shape))
    g = expit(z)
    w = g * (1.0 - g)
    q = 4.0 * w
    a = w * z + np.asarray(y, dtype=float) - g
    # |a| < 1 exactly in real arithmetic; float rounding can only reach the boundary.
    a = np.clip(a, -1.0, 1.0)
    iu = upper_indices(x.shape[1])
    return np.concatenate([q[:, None] * x[:, iu[0]] * x[:, iu[1]], u_weight * a[:, None] * x],
                          axis=1)


class GLMSkellamRandomizer(SkellamRandomizer):
    """``SkellamRandomizer`` of the ``"upper"`` or ``"frobenius"`` encoding releasing the GLM
    statistics (module docstring) instead of (upper(x xᵀ), r x), with their own pair bound
    (``glm_pair_bound``); everything else — rounding, noise, ledger, ranges, wire form — is the
    parent's."""

    def __init__(self, d: int, epsilon: float, delta: float, batch_size: int,
                 honest_fraction: float = 1.0, scale: float = 128.0, L: float = 1.0,
                 u_weight: float = 1.0, noise: str = "aggregators",
                 encoding: str = "upper") -> None:
        glm_pair_bound(L, u_weight, encoding)  # validates the encoding
        super().__init__(d, epsilon, delta, batch_size, honest_fraction, scale, L, encoding,
                         u_weight, None, noise)
        self.anchor = np.zeros(d)

    def pair_bound(self) -> float:
        return glm_pair_bound(self.L, self.u_weight, self.encoding)

    def set_anchor(self, theta: np.ndarray) -> None:
        """θ̂ of the model the simulator's next users decide with (d-column rows)."""
        theta = np.asarray(theta, dtype=float)
        if theta.shape != (self.d,) or not np.isfinite(theta).all():
            raise ValueError(f"an anchor is a finite vector of length {self.d}")
        self.anchor = theta.copy()

    def _split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(contexts, anchors) of rows [x] (the set anchor) or [x, θ̂] (each row's own)."""
        x = np.asarray(x, dtype=float)
        if x.ndim == 2 and x.shape[1] == 2 * self.d:
            return x[:, :self.d], x[:, self.d:]
        return x, np.broadcast_to(self.anchor, x.shape)

    def check(self, x: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``check_inputs`` on the contexts, and finite anchors; rows keep their width."""
        contexts, anchors = self._split(x)
        check_inputs(contexts, r, self.d, self.L)
        if not np.isfinite(anchors).all():
            raise ValueError("the anchor θ̂ must be finite")
        return np.asarray(x, dtype=float), np.asarray(r, dtype=float)

    def statistics(self, x: np.ndarray, r: np.ndarray) -> np.ndarray:
        """v = (upper(q x xᵀ), w_u a x) after clipping x to ‖x‖ ≤ L and y to [0, 1] (valid
        inputs unchanged; every row then lies within the ``"upper"`` bounds, module doc)."""
        contexts, anchors = self._split(x)
        norms = np.linalg.norm(contexts, axis=1, keepdims=True)
        contexts = contexts * np.minimum(1.0, self.L / np.maximum(norms, 1e-300))
        y = np.clip(np.asarray(r, dtype=float), 0.0, 1.0)
        v = glm_statistics(contexts, y, anchors) * self.weights
        vn = np.linalg.norm(v, axis=1, keepdims=True)
        return v * np.minimum(1.0, self.clip / np.maximum(vn, 1e-300))

    def estimate(self, stat: np.ndarray, n: int) -> Estimate:
        """(G̃, 4ũ): unbiased for (4 Σ H_i, 4 Σ b_i), whose ridge solution is the surrogate's
        minimiser (module docstring)."""
        est = super().estimate(stat, n)
        return Estimate(n=est.n, G=est.G, u=RESPONSE_SCALE * est.u)

    def vector_proxy(self) -> float:
        return RESPONSE_SCALE**2 * super().vector_proxy()

    def _encoding_words(self) -> str | None:
        weights = ("" if self.encoding == "upper" else
                   f", off-diagonals × √2 and the vector × {self.u_weight:g}")
        return ("GLM statistics (upper(4g'(z) x xᵀ), (g'(z) z + y − g(z)) x) at the served "
                f"anchor z = ⟨x, θ̂⟩ ({self.encoding}{weights}): within the encoding's ranges, "
                f"pair bound Δ_v={self.pair_bound():.6g}")

