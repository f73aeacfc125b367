"""The LDP-GLB report of Zheng et al. (NeurIPS 2020), Algorithm 3 line 9.

User t, holding the broadcast online-gradient-descent iterate θ̂ (‖θ̂‖ ≤ S, the projection set
W of line 11 is the ball of radius S), plays x (‖x‖ ≤ L), observes y ∈ [0, 1] and sends

    (upper(x xᵀ) + B,  z x + ξ,  ∇ℓ(θ̂) + ρ),   z = ⟨x, θ̂⟩,   ∇ℓ(θ̂) = (g(z) − y) x,

with g the logistic function (ℓ(θ) = −y⟨x, θ⟩ + m(⟨x, θ⟩), m' = g, the Bernoulli negative
log-likelihood) and B, ξ, ρ i.i.d. N(0, σ²) per entry (B mirrored, as in Alg. 5).

Calibration. The paper splits (ε, δ) in three and calibrates each part classically
(σ = 6√(2 ln(3.75/δ))/ε, Thm 9). We treat the report as ONE Gaussian mechanism on the vector
(upper(x xᵀ), z x, ∇ℓ) and calibrate σ exactly (analytic Gaussian, Balle–Wang 2018) to its L2
sensitivity over all (x, y), x' , y' with ‖x‖, ‖x'‖ ≤ L, y, y' ∈ [0, 1] and the public θ̂
(‖θ̂‖ ≤ S). With M = x xᵀ − x'x'ᵀ, a = ‖x‖², b = ‖x'‖², c = xᵀx' (issue 22: the three parts'
distances bounded jointly, not each at its own worst pair):
    ‖upper(M)‖² ≤ ‖M‖_F² = a² + b² − 2c²                        (as for Alg. 5),
    ‖z x − z' x'‖ = ‖M θ̂‖ ≤ ‖M‖_op S,  ‖M‖_op = (|a − b| + √((a + b)² − 4c²))/2
                                                               (z x = x xᵀ θ̂ is linear in x xᵀ),
    ‖∇ − ∇'‖² = ‖α x − α' x'‖² ≤ a + b + 2|c|                    (α = g(z) − y ∈ (−1, 1)),
each non-decreasing in a and b, so a = b = L², ‖M‖_F² = 2(L⁴ − c²), ‖M‖_op² = L⁴ − c², and
    Δ² ≤ max_{|c| ≤ L²} (2 + S²)(L⁴ − c²) + 2L² + 2|c|
       = (2 + S²) L⁴ + 2L² + 1/(2 + S²)   (|c| = 1/(2 + S²) ≤ L²),   4L² (else).
At L = 1, S = 3 that is 13.09 against 42 for the parts' separate sups 2L⁴ + 4L⁴S² + 4L² (the
bound used before; the paper's constant is larger still): σ is 1.79× smaller at the same (ε, δ).
The three bounds need not be attained together, so Δ is an upper bound (valid for privacy);
the tests' local ascent over (x, x', y, y', θ̂) finds pairs within 2% of it at L = 1, S = 3.
Unbiasedness: every noise has mean 0, so the sums of
the rows estimate Σ x xᵀ, Σ z x and Σ ∇ℓ without bias.

Admissible reports: the clean ranges are those of Alg. 5 for upper(x xᵀ), |z x_i| ≤ L² S and
|∇_i| ≤ L, widened by τσ (``gaussian.HONEST_REFUSAL``).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from privbandit.shared.core.randomizers.base import (
    Estimate,
    symmetric_from_upper,
    versioned_row,
)
from privbandit.shared.core.randomizers.gaussian import GaussianRandomizer


def glb_sensitivity(L: float, S: float) -> float:
    """Δ of (upper(x xᵀ), ⟨x, θ̂⟩ x, (g(⟨x, θ̂⟩) − y) x) over ‖x‖ ≤ L, y ∈ [0, 1], ‖θ̂‖ ≤ S:
    √((2 + S²)L⁴ + 2L² + 1/(2 + S²)) if 1/(2 + S²) ≤ L², else 2L (module doc)."""
    k = 2 + S * S
    return math.sqrt(k * L**4 + 2 * L**2 + 1 / k) if 1 / k <= L * L else 2 * L


@dataclass(frozen=True)
class GLBEstimate(Estimate):
    """Estimate of Σ x xᵀ (G), Σ z x (u) and Σ ∇ℓ_t(θ̂) (grad)."""

    grad: np.ndarray = None  # type: ignore[assignment]  # estimate() always sets it


class GLBRandomizer(GaussianRandomizer):
    """Zheng Alg. 3 line 9: Gaussian noise on x xᵀ, z x and the loss gradient, (ε, δ)-LDP."""

    def __init__(self, d: int, epsilon: float, delta: float, L: float = 1.0,
                 S: float = 1.0) -> None:
        if not S > 0:
            raise ValueError("need S > 0")
        self.S = float(S)
        self.anchor = np.zeros(d)
        super().__init__(d, epsilon, delta, L)

    def set_anchor(self, theta_hat: np.ndarray) -> None:
        """The broadcast OGD iterate θ̂ the next reports use (must lie in the ball W)."""
        theta_hat = np.asarray(theta_hat, dtype=float)
        if theta_hat.shape != (self.d,) or not np.isfinite(theta_hat).all():
            raise ValueError(f"θ̂ must be {self.d} finite numbers")
        if np.linalg.norm(theta_hat) > self.S * (1 + 1e-9):
            raise ValueError(f"θ̂ must satisfy ||θ̂|| <= S = {self.S}")
        self.anchor = theta_hat

    def _sensitivity(self) -> float:
        return glb_sensitivity(self.L, self.S)

    def _clean_range(self) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = super()._clean_range()
        lo, hi = lo[: self.n_upper], hi[: self.n_upper]
        zx, grad = self.L**2 * self.S * np.ones(self.d), self.L * np.ones(self.d)
        return np.concatenate([lo, -zx, -grad]), np.concatenate([hi, zx, grad])

    def _clean(self, x: np.ndarray, r: np.ndarray) -> np.ndarray:
        from scipy.special import expit  # here: the shuffler loads this module, needs no scipy

        z = x @ self.anchor
        grad = (expit(z) - r)[:, None] * x
        return np.concatenate([x[:, self._iu[0]] * x[:, self._iu[1]], z[:, None] * x, grad],
                              axis=1)

    @property
    def width(self) -> int:
        return self.n_upper + 2 * self.d

    def estimate(self, stat: np.ndarray, n: int) -> GLBEstimate:
        stat = np.asarray(stat, dtype=float)
        if stat.shape != (self.width,):
            raise ValueError(f"expected a statistic of length {self.width}")
        m, d = self.n_upper, self.d
        return GLBEstimate(n=n, G=symmetric_from_upper(stat[:m], d), u=stat[m : m + d],
                           grad=stat[m + d :])




class VersionedGLBRandomizer:
    """The LDP-GLB report as it travels: ``[v, upper(x xᵀ) + B, z x + ξ, ∇ℓ(θ̂_v) + ρ]``, v the
    version of the published model whose θ̂_v the device anchored z and the gradient at.

    v is public (it names a broadcast model, chosen before the user's data exist), so it costs no
    privacy: the Gaussian part is exactly ``inner``'s (a ``GLBRandomizer``), calibrated for every
    ‖θ̂‖ ≤ S. The analyzer sums the Gaussian part (``sufficient`` drops v) and refuses a v it
    never published (``LDPGLB.admit_row``). Wire form (little-endian): v as uint32, then the
    n_upper + 2d float64 of the Gaussian part; ``from_bytes`` refuses non-finite numbers and
    any entry outside the admissible box (clean range ± τσ, ``GaussianRandomizer``).
    Everything else (σ, Δ, ``estimate``, the variance proxies) is ``inner``'s.
    """

    exact = False

    def __init__(self, d: int, epsilon: float, delta: float, L: float = 1.0,
                 S: float = 1.0) -> None:
        self.inner = GLBRandomizer(d, epsilon, delta, L, S)
        self.d, self.L = self.inner.d, self.inner.L
        self.version = 0  # the version of the published model whose θ̂ is ``anchor``
        self._format = "<I" + "d" * self.inner.width

    def __getattr__(self, name: str) -> object:
        # σ, Δ, S, ε, δ, the admissible box, estimate, the proxies: the Gaussian part's own.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def anchor(self) -> np.ndarray:
        return self.inner.anchor

    # The two of inner's attributes the policy reads, typed (``__getattr__`` gives ``object``).
    @property
    def sigma(self) -> float:
        return self.inner.sigma

    def estimate(self, stat: np.ndarray, n: int) -> GLBEstimate:
        return self.inner.estimate(stat, n)

    def set_anchor(self, theta_hat: np.ndarray, version: int | None = None) -> None:
        """θ̂ of the model the next rows name (and that model's version)."""
        self.inner.set_anchor(theta_hat)
        if version is not None:
            self.version = int(version)

    @property
    def width(self) -> int:
        return self.inner.width + 1

    def randomize(self, x: np.ndarray, r: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        rows = self.inner.randomize(x, r, rng)
        return np.concatenate([np.full((rows.shape[0], 1), float(self.version)), rows], axis=1)

    def randomize_at(self, theta_hat: np.ndarray, version: int, x: np.ndarray, r: np.ndarray,
                     rng: np.random.Generator) -> np.ndarray:
        """Rows anchored at a given model's (θ̂_v, v) (the device's), leaving ``anchor`` as is."""
        saved = (self.inner.anchor, self.version)
        try:
            self.set_anchor(theta_hat, version)
            return self.randomize(x, r, rng)
        finally:
            self.inner.anchor, self.version = saved

    def sufficient(self, rows: np.ndarray) -> np.ndarray:
        return self.inner.sufficient(np.asarray(rows, dtype=float)[:, 1:])

    def to_bytes(self, row: np.ndarray) -> bytes:
        row = versioned_row(row, self.width, "the model version must be an integer in [0, 2^32)")
        return struct.pack(self._format, int(row[0]), *(float(t) for t in row[1:]))

    def from_bytes(self, data: bytes) -> np.ndarray:
        size = struct.calcsize(self._format)
        if len(data) != size:
            raise ValueError(f"a report is {size} bytes, got {len(data)}")
        fields = struct.unpack(self._format, data)
        body = self.inner.from_bytes(np.asarray(fields[1:], dtype="<f8").tobytes())
        return np.concatenate([[float(fields[0])], body])
