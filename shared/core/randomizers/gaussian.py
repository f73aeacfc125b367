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

Encodings (``encoding``; issue 22). The report is the weighted vector
v = (diag(x xᵀ), b · offdiag_{i<j}(x xᵀ), w · a x) + N(0, σ²) per entry, and the analyzer divides
the weights out before summing into (G̃, ũ):

- ``"plain"`` (b = 1, w = 1, a = y: Alg. 5 as above), Δ² = 2L⁴ + 2L² + ½.
- ``"frobenius"`` (b = √2, so ‖v_G‖ = ‖x xᵀ‖_F, any w, a = y): the exact joint bound of
  ``skellam.pair_sensitivity`` (4.5 at L = w = 1, as ``"plain"``), with half the noise variance on
  every off-diagonal entry of G̃ in real units.
- ``"centered"`` (b = √2, weight w, a = y − ½) for contexts with an intercept: x₀ = c for every
  context (``intercept``). a ∈ [−h, h], h = ½, and the derivation of ``skellam``'s centered
  encoding carries over unchanged (p, q ≤ L, t = ⟨x, x'⟩ ≥ 2c² − L² under the intercept):

      ‖v(x, y) − v(x', y')‖² = (p⁴ + q⁴ − 2t²) + w²‖a x − a'x'‖² ≤ 2L⁴ − 2t² + 2w²h²(L² + |t|),

  maximal at |t| = w²h²/2 clamped to the feasible |t|, exact (``skellam.centered_pair_bound``;
  2.53 at L = w = 1, c = 1/√2, against 4.5).
- ``"centered-upper"`` (b = 1, weight w, a = y − ½, the intercept): the off-diagonals once.
  Write x = (c, α), x' = (c, β), ‖α‖², ‖β‖² ≤ R² = L² − c², s = ⟨α, β⟩ = t − c², M = x xᵀ − x'x'ᵀ.
  For a symmetric matrix ‖upper(M)‖² = (‖M‖_F² + Σ_i M_ii²)/2; M₀₀ = 0 and the other diagonal
  entries are those of N = ααᵀ − ββᵀ, so Σ_i M_ii² ≤ ‖N‖_F² = ‖α‖⁴ + ‖β‖⁴ − 2s². Every term is
  non-decreasing in ‖α‖², ‖β‖² at fixed t (and the largest norms allow every t), so

      Δ² ≤ max_t  L⁴ − t² + R⁴ − (t − c²)² + 2w²h²(L² + |t|),     t ∈ [2c² − L², L²],

  concave on each sign of t: the maximum is at t₊ = (c² + w²h²)/2 or t₋ = (c² − w²h²)/2, each
  clamped to its side (``centered_upper_bound``). For d ≥ 3 it is attained (exact): α = R(cos φ,
  sin φ, 0…), β = R(sin φ, cos φ, 0…) with R² sin 2φ = s (their off-diagonal products agree, so
  Σ_i M_ii² = ‖N‖_F²), y = 1, y' = 0 if t ≥ 0 (y' = 1 if t < 0). At L = w = 1, c = 1/√2:
  Δ² = 1.78, but every off-diagonal entry carries σ² rather than σ²/2.

Under the centered encodings the analyzer knows n, so Σ x₀² = n c² exactly (the released
entry (0, 0) is c² plus noise and is not used), Σ x = G e₀ / c, and it rebuilds
Σ y x = Σ (y − ½) x + ½ G̃ e₀ / c (unbiased; ``estimate``), whose noise adds (½/c)² σ²/b² per
entry of ũ (``vector_proxy``). A device refuses a context with x₀ ≠ c (``check``; the services:
``feature_intercept``) and the clean report projects onto {x₀ = c, ‖x‖ ≤ L}
(``skellam.onto_intercept``) as a last guard, so the bound covers every release.

Admissible reports. Every entry of an honest report is its clean value plus N(0, σ²), and the clean
values are bounded: x_i² ∈ [0, L²] on the diagonal, |x_i x_j| ≤ (x_i² + x_j²)/2 ≤ L²/2 off it, and
|y x_i| ≤ L, each times its weight; under the intercept x₀² = c², |x₀ x_j| ≤ cR, |x_i x_j| ≤ R²/2
(i, j ≥ 1), |(y − ½) x₀| ≤ c/2 and |(y − ½) x_j| ≤ R/2. The analyzer refuses a report with an
entry more than τσ outside its clean range,
where τ makes the union bound exact at ``HONEST_REFUSAL``: width · 2Φ̄(τ) = 2⁻⁴⁰. An honest
report is thus refused with probability below 2⁻⁴⁰ (a failure event added to the confidence
set's δ; refusing is post-processing, so the privacy guarantee is unchanged), while a forged one
can move each statistic entry by at most L² + τσ — never by 1e300.
"""

from __future__ import annotations

import functools
import math

# norm.isf(q) = −Φ⁻¹(q): the standard library's normal quantile (Wichura's AS 241, within a few
# ulps of scipy's ndtri), as services load this module and need no scipy.
from statistics import NormalDist

import numpy as np

from privbandit.shared.core.accounting.gaussian import gaussian_sigma
from privbandit.shared.core.randomizers.base import (
    Estimate,
    check_centered_inputs,
    upper_indices,
)
from privbandit.shared.core.randomizers.skellam import (
    R0,
    R_HALF,
    centered_pair_bound,
    check_intercept,
    onto_intercept,
    pair_sensitivity,
    unweighted_estimate,
)

# Probability that an honest report has some entry outside the admissible box (see module doc).
HONEST_REFUSAL = 2.0**-40

ENCODINGS = ("plain", "frobenius", "centered", "centered-upper")
# The encodings that release (y − ½) x and need the intercept x₀ = c.
CENTERED = ("centered", "centered-upper")


def report_sensitivity(L: float) -> float:
    """L2 sensitivity bound Δ = √(2L⁴ + 4L²) of (upper(x xᵀ), y x) for ‖x‖ ≤ L, y ∈ [0, 1]
    (the parts' sups added; the joint sup ``report_sensitivity_joint`` is smaller)."""
    return math.sqrt(2 * L**4 + 4 * L**2)


def report_sensitivity_joint(L: float) -> float:
    """The exact L2 sensitivity of (upper(x xᵀ), y x) over ‖x‖ ≤ L, y ∈ [0, 1] (d ≥ 2; an
    upper bound for d = 1): √(2L⁴ + 2L² + ½) if L² ≥ ½, else 2L (module doc)."""
    L2 = L * L
    return math.sqrt(2 * L2 * L2 + 2 * L2 + 0.5) if L2 >= 0.5 else 2 * L


def gram_weight(encoding: str) -> float:
    """b, the weight of the off-diagonal entries of x xᵀ: √2 for ``"frobenius"`` and
    ``"centered"``, 1 for ``"plain"`` and ``"centered-upper"``."""
    return math.sqrt(2.0) if encoding in ("frobenius", "centered") else 1.0


def centered_upper_bound(L: float, w: float, c: float) -> float:
    """Δ² of ``"centered-upper"`` (module doc): the max over t ∈ [2c² − L², L²] of
    L⁴ − t² + R⁴ − (t − c²)² + 2w²h²(L² + |t|), R² = L² − c², h = ½; each sign of t's concave
    piece peaks at (c² ± w²h²)/2, clamped to that side."""
    R2, k = L * L - c * c, (w * R_HALF) ** 2
    low, high = 2 * c * c - L * L, L * L

    def f(t: float) -> float:
        return L**4 - t * t + R2 * R2 - (t - c * c) ** 2 + 2 * k * (L * L + abs(t))

    candidates = [min(max((c * c + k) / 2, max(low, 0.0)), high)]
    if low < 0:
        candidates.append(min(max((c * c - k) / 2, low), 0.0))
    return max(f(t) for t in candidates)


def encoding_sensitivity(L: float, encoding: str = "plain", u_weight: float = 1.0,
                         intercept: float | None = None) -> float:
    """Δ of the report's clean vector under ``encoding`` (module doc, *Encodings*)."""
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding must be one of {ENCODINGS}, got {encoding!r}")
    if not (u_weight > 0 and math.isfinite(u_weight)):
        raise ValueError(f"u_weight must be positive and finite, got {u_weight}")
    check_intercept("centered" if encoding in CENTERED else "upper", intercept, L)
    if encoding == "plain":
        if u_weight != 1.0:
            raise ValueError("the plain encoding has u_weight 1 (Alg. 5's report)")
        return report_sensitivity_joint(L)
    if encoding == "frobenius":
        return pair_sensitivity(L, "frobenius", u_weight)
    assert intercept is not None
    if encoding == "centered":
        return math.sqrt(centered_pair_bound(L, u_weight, intercept))
    return math.sqrt(centered_upper_bound(L, u_weight, intercept))


class GaussianRandomizer:
    """Zheng Alg. 5: Gaussian noise on upper(x xᵀ) and y x, calibrated to (ε, δ)-LDP."""

    exact = False

    def __init__(self, d: int, epsilon: float, delta: float, L: float = 1.0,
                 encoding: str = "plain", u_weight: float = 1.0,
                 intercept: float | None = None) -> None:
        if d < 1 or L <= 0:
            raise ValueError("need d >= 1, L > 0")
        self.d, self.L, self.epsilon, self.delta = d, float(L), float(epsilon), float(delta)
        self._iu = upper_indices(d)
        self.n_upper = d * (d + 1) // 2
        encoding_sensitivity(self.L, encoding, u_weight, intercept)  # validates
        self.encoding, self.u_weight = encoding, float(u_weight)
        self.intercept = None if intercept is None else float(intercept)
        self.gram_weight = gram_weight(encoding)
        diag = self._iu[0] == self._iu[1]
        # Per released entry: 1 on the diagonal of x xᵀ, b off it, w on the reward part.
        self.weights = np.concatenate([np.where(diag, 1.0, self.gram_weight),
                                       np.full(d, self.u_weight)])
        self.sensitivity = self._sensitivity()
        # τ with width · P(|N(0, 1)| > τ) = HONEST_REFUSAL (union bound over the entries).
        self.tail_z = -NormalDist().inv_cdf(HONEST_REFUSAL / (2 * self.width))

    # σ and what follows from it on first use: the analytic calibration needs scipy (a second
    # of start-up), and a shuffler or an analyzer that builds the randomizer only for its row
    # length (``hpke.row_length``) never needs σ.
    @functools.cached_property
    def sigma(self) -> float:
        """σ of Balle–Wang's analytic calibration at (ε, δ) and the encoding's Δ₂."""
        return gaussian_sigma(self.epsilon, self.delta, self.sensitivity)

    @functools.cached_property
    def _report_range(self) -> tuple[np.ndarray, np.ndarray]:
        clean_lo, clean_hi = self._clean_range()
        return clean_lo - self.tail_z * self.sigma, clean_hi + self.tail_z * self.sigma

    @property
    def report_low(self) -> np.ndarray:
        return self._report_range[0]

    @property
    def report_high(self) -> np.ndarray:
        return self._report_range[1]

    def calibrate(self) -> None:
        """σ and the admissible box now (``base.calibrate``)."""
        _ = self._report_range

    def _sensitivity(self) -> float:
        return encoding_sensitivity(self.L, self.encoding, self.u_weight, self.intercept)

    def _clean_range(self) -> tuple[np.ndarray, np.ndarray]:
        """Entry-wise bounds of a clean report, weights applied (see module doc)."""
        i, j = self._iu
        diag = i == j
        L2, d, c = self.L**2, self.d, self.intercept
        if c is None:
            hi = np.concatenate([np.where(diag, L2, L2 / 2), np.full(d, self.L)])
            lo = np.concatenate([np.where(diag, 0.0, -L2 / 2), np.full(d, -self.L)])
        else:  # x₀ = c, ‖x₁:‖ ≤ R, reward factor in [−½, ½]
            R2 = max(L2 - c * c, 0.0)
            R = math.sqrt(R2)
            gram_hi = np.where(diag, R2, np.where(i == 0, c * R, R2 / 2))
            gram_hi[0] = c * c
            gram_lo = np.where(diag, 0.0, -gram_hi)
            gram_lo[0] = c * c
            reward = R_HALF * np.concatenate([[c], np.full(d - 1, R)])
            hi, lo = np.concatenate([gram_hi, reward]), np.concatenate([gram_lo, -reward])
        return lo * self.weights, hi * self.weights

    def check(self, x: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``check_centered_inputs`` under the report's encoding."""
        return check_centered_inputs(x, r, self.d, self.L, self.intercept, self.encoding)

    def _clean(self, x: np.ndarray, r: np.ndarray) -> np.ndarray:
        """The noise-free report rows: weights ⊙ (upper(x xᵀ), y x), or with (y − ½) x and x
        projected onto {x₀ = c, ‖x‖ ≤ L} under a centered encoding."""
        if self.intercept is not None:
            x, r = onto_intercept(x, self.intercept, self.L), r - R0
        clean = np.concatenate([x[:, self._iu[0]] * x[:, self._iu[1]], r[:, None] * x], axis=1)
        return clean if self.encoding == "plain" else clean * self.weights

    @property
    def width(self) -> int:
        return self.n_upper + self.d

    def randomize(self, x: np.ndarray, r: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x, r = self.check(x, r)
        clean = self._clean(x, r)
        return clean + rng.normal(0.0, self.sigma, size=clean.shape)

    def sufficient(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray(rows, dtype=float).sum(axis=0)

    def estimate(self, stat: np.ndarray, n: int) -> Estimate:
        stat = np.asarray(stat, dtype=float)
        if stat.shape != (self.width,):
            raise ValueError(f"expected a statistic of length {self.width}")
        if self.encoding != "plain":
            stat = stat / self.weights
        # Under a centered encoding Σ y x = Σ (y − ½) x + ½ G e₀ / c (``unweighted_estimate``).
        return unweighted_estimate(stat, self.d, n, self.intercept)

    def matrix_proxy(self) -> float:
        """Per report, the noise variance of a diagonal entry of G̃ (σ²)."""
        return self.sigma**2

    def offdiag_proxy(self) -> float:
        """Per report, the noise variance of an off-diagonal entry of G̃: σ²/b²."""
        return self.sigma**2 / self.gram_weight**2

    def vector_proxy(self) -> float:
        """Per report, the noise variance of an entry of ũ: σ²/w², plus (½/c)² σ²/b² from the
        centered reconstruction's ½ G̃ e₀ / c."""
        base = self.sigma**2 / self.u_weight**2
        if self.intercept is None:
            return base
        return base + (R0 / self.intercept) ** 2 * self.offdiag_proxy()

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
