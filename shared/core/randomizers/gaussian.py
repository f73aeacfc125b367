"""The Gaussian mechanism of Zheng et al. (NeurIPS 2020), Algorithm 5 (Appendix D).

A report is (upper(x xᵀ) + B, y x + ξ) with B, ξ i.i.d. N(0, σ²) per entry; the analyzer mirrors
the upper triangle, so the noise on x xᵀ is symmetric (Alg. 5 line 9).

Calibration. The paper sets σ = 6√(2 ln(2.5/δ))/ε for ‖x‖ ≤ 1. We calibrate exactly instead: the
report is one Gaussian mechanism on the vector (upper(x xᵀ), y x), and σ is the smallest noise for
which the analytic Gaussian mechanism (Balle–Wang 2018) is (ε, δ)-DP at its L2 sensitivity Δ over
‖x‖ ≤ L, y ∈ [0, 1]. This is a correct and tighter choice than the paper's constant, and it is
what the ledger reports.

Δ is the sup of the two parts' distance *jointly* (issue 22; ``report_sensitivity_joint``): with
a = ‖x‖², b = ‖x'‖², c = xᵀx',
    ‖upper(x xᵀ − x'x'ᵀ)‖² ≤ ‖x xᵀ − x'x'ᵀ‖_F² = a² + b² − 2c²   (the upper triangle counts each
                                                                 off-diagonal entry once),
    ‖y x − y'x'‖² = y²a + y'²b − 2yy'c ≤ max(a + b − 2c, a, b)   (a convex quadratic's max
                                                        over [0, 1]² is at a vertex),
both non-decreasing in a and b, so a = b = L² and
    Δ² = max_{|c| ≤ L²} 2L⁴ − 2c² + 2L² − 2c = 2L⁴ + 2L² + ½  (c = −½, if L² ≥ ½),  4L² (else),
attained (d ≥ 2) by x = L(cos φ, sin φ, 0…), x' = L(sin φ, cos φ, 0…) with L² sin 2φ = −½ and
y = y' = 1 (their off-diagonal products agree, so the upper triangle loses nothing). The bound
of the two sups taken separately, 2L⁴ + 4L² (``report_sensitivity``, still what the Skellam
shares of ``ddp-linucb`` use), adds the worst Gram distance (x ⊥ x') to the worst reward
distance (x' = −x, where the Gram parts coincide): at L = 1, Δ² = 4.5 against 6, i.e. 13% less
noise at the same (ε, δ).

Admissible reports. Every entry of an honest report is its clean value plus N(0, σ²), and the clean
values are bounded: x_i² ∈ [0, L²] on the diagonal, |x_i x_j| ≤ (x_i² + x_j²)/2 ≤ L²/2 off it, and
|y x_i| ≤ L. The analyzer refuses a report with an entry more than τσ outside its clean range,
where τ makes the union bound exact at ``HONEST_REFUSAL``: width · 2Φ̄(τ) = 2⁻⁴⁰. An honest
report is thus refused with probability below 2⁻⁴⁰ (a failure event added to the confidence
set's δ; refusing is post-processing, so the privacy guarantee is unchanged), while a forged one
can move each statistic entry by at most L² + τσ — never by 1e300.
"""

from __future__ import annotations

import math

# norm.isf(q) = −Φ⁻¹(q): the standard library's normal quantile (Wichura's AS 241, within a few
# ulps of scipy's ndtri), as services load this module and need no scipy.
from statistics import NormalDist

import numpy as np

from privbandit.shared.core.accounting.gaussian import gaussian_sigma
from privbandit.shared.core.randomizers.base import (
    Estimate,
    check_inputs,
    symmetric_from_upper,
    upper_indices,
)

# Probability that an honest report has some entry outside the admissible box (see module doc).
HONEST_REFUSAL = 2.0**-40


def report_sensitivity(L: float) -> float:
    """L2 sensitivity bound Δ = √(2L⁴ + 4L²) of (upper(x xᵀ), y x) for ‖x‖ ≤ L, y ∈ [0, 1]
    (the parts' sups added; the joint sup ``report_sensitivity_joint`` is smaller)."""
    return math.sqrt(2 * L**4 + 4 * L**2)


def report_sensitivity_joint(L: float) -> float:
    """The exact L2 sensitivity of (upper(x xᵀ), y x) over ‖x‖ ≤ L, y ∈ [0, 1] (d ≥ 2; an
    upper bound for d = 1): √(2L⁴ + 2L² + ½) if L² ≥ ½, else 2L (module doc)."""
    L2 = L * L
    return math.sqrt(2 * L2 * L2 + 2 * L2 + 0.5) if L2 >= 0.5 else 2 * L


class GaussianRandomizer:
    """Zheng Alg. 5: Gaussian noise on upper(x xᵀ) and y x, calibrated to (ε, δ)-LDP."""

    exact = False

    def __init__(self, d: int, epsilon: float, delta: float, L: float = 1.0) -> None:
        if d < 1 or L <= 0:
            raise ValueError("need d >= 1, L > 0")
        self.d, self.L, self.epsilon, self.delta = d, float(L), float(epsilon), float(delta)
        self._iu = upper_indices(d)
        self.n_upper = d * (d + 1) // 2
        self.sensitivity = self._sensitivity()
        self.sigma = gaussian_sigma(epsilon, delta, self.sensitivity)
        # τ with width · P(|N(0, 1)| > τ) = HONEST_REFUSAL (union bound over the entries).
        self.tail_z = -NormalDist().inv_cdf(HONEST_REFUSAL / (2 * self.width))
        clean_lo, clean_hi = self._clean_range()
        self.report_low = clean_lo - self.tail_z * self.sigma
        self.report_high = clean_hi + self.tail_z * self.sigma

    def _sensitivity(self) -> float:
        return report_sensitivity_joint(self.L)

    def _clean_range(self) -> tuple[np.ndarray, np.ndarray]:
        """Entry-wise bounds of a clean report (see module doc)."""
        diag = self._iu[0] == self._iu[1]
        L2, d = self.L**2, self.d
        clean_lo = np.concatenate([np.where(diag, 0.0, -L2 / 2), np.full(d, -self.L)])
        clean_hi = np.concatenate([np.where(diag, L2, L2 / 2), np.full(d, self.L)])
        return clean_lo, clean_hi

    def _clean(self, x: np.ndarray, r: np.ndarray) -> np.ndarray:
        """The noise-free report rows (upper(x xᵀ), r x)."""
        return np.concatenate([x[:, self._iu[0]] * x[:, self._iu[1]], r[:, None] * x], axis=1)

    @property
    def width(self) -> int:
        return self.n_upper + self.d

    def randomize(self, x: np.ndarray, r: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x, r = check_inputs(x, r, self.d, self.L)
        clean = self._clean(x, r)
        return clean + rng.normal(0.0, self.sigma, size=clean.shape)

    def sufficient(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray(rows, dtype=float).sum(axis=0)

    def estimate(self, stat: np.ndarray, n: int) -> Estimate:
        stat = np.asarray(stat, dtype=float)
        if stat.shape != (self.width,):
            raise ValueError(f"expected a statistic of length {self.width}")
        return Estimate(
            n=n, G=symmetric_from_upper(stat[: self.n_upper], self.d), u=stat[self.n_upper :]
        )

    def matrix_proxy(self) -> float:
        return self.sigma**2

    def vector_proxy(self) -> float:
        return self.sigma**2

    def to_bytes(self, row: np.ndarray) -> bytes:
        row = np.asarray(row, dtype="<f8")
        if row.shape != (self.width,) or not np.isfinite(row).all():
            raise ValueError(f"a report is {self.width} finite floats")
        return row.tobytes()

    def from_bytes(self, data: bytes) -> np.ndarray:
        if len(data) != 8 * self.width:
            raise ValueError(f"a report is {8 * self.width} bytes, got {len(data)}")
        row = np.frombuffer(data, dtype="<f8").astype(float)
        if not np.isfinite(row).all():
            raise ValueError("report values must be finite")
        if ((row < self.report_low) | (row > self.report_high)).any():
            raise ValueError(
                f"report outside what the mechanism produces (clean range ± {self.tail_z:.2f}σ)"
            )
        return row
