"""PrivUnit2 (Bhowmick, Duchi, Freudiger, Kapoor, Rogers 2018, Alg. 1) on ``ldp-linucb``'s report
vector: a pure ε-LDP alternative to the Gaussian report (``randomizers.gaussian``; issue 44 item 5).

The report vector is the one of the Gaussian mechanism's encodings, v = weights ⊙ (upper(x xᵀ),
a x) (``GaussianRandomizer._clean``), without the coordinates that are constant (x₀² = c² under a
centered encoding): its free part v_f ∈ R^D (D = d(d+1)/2 + d, minus 1 under an intercept) lies in
the ball of radius r, r² = sup ‖v_f‖² (``report_radius``).

Mechanism, for one report:

1. Norm rounding (Bhowmick et al. §4.1, the "ScalarDP/ball to sphere" step): û = s · v_f/‖v_f‖
   with s = +1 with probability (1 + ‖v_f‖/r)/2, else −1, so r E[û] = v_f (any fixed unit û
   if v_f = 0, with a fair sign). Under ``linear`` (‖x‖ = 1, y ∈ {0, 1}) ‖v_f‖ = r: s = +1.
2. PrivUnit2(p, γ) on the unit sphere S^{D−1}: with probability p draw z uniform on the cap
   {⟨z, û⟩ ≥ γ}, else uniform on its complement. The output density is p/A_cap on the cap and
   (1 − p)/(A − A_cap) off it, so for any two inputs the likelihood ratio is at most

       e^ε = p (1 − q) / ((1 − p) q),     q = A_cap/A = P(t ≥ γ) = ½ I_{1−γ²}((D−1)/2, ½)    (★)

   (t = ⟨U, e⟩ for U uniform on the sphere; t² ~ Beta(½, (D−1)/2)), attained by any z in one
   input's cap and outside the other's: (★) is the exact pure ε of the report. Step 1 is a
   randomized function of the input alone, so the composition is ε-LDP too.
3. Release r z / m, where m = E⟨z, û⟩ = μ₊ (p/q − (1 − p)/(1 − q)), μ₊ = E[t 1{t ≥ γ}] =
   (1 − γ²)^{(D−1)/2} / ((D − 1) B(½, (D−1)/2)) (by symmetry E[z] = m û), so E[r z/m] = v_f:
   the sum of the reports is unbiased for Σ v_f (Bhowmick et al. Lemma 4.1; Asi, Feldman,
   Talwar 2022, §3).

Calibration: for the given ε, γ minimises the variance 1/m² with p set by (★) (Asi et al.
optimise PrivUnit's parameters the same way; γ ∈ [0, γ_max], γ_max where the cap alone spends
ε). Per report, E‖r z/m − v_f‖² = r²/m² − ‖v_f‖², and each coordinate's variance is at most
r² max(a, b)/m² with a = E[t²], b = (1 − a)/(D − 1) the second moments of z along and across û
(``coordinate_variance``). At ε = 1, D = 19 (d = 5, the centered report) r²/m² = 117.7 r², i.e.
6.2 r² per coordinate on average, against σ² = 80.3 per coordinate for the Gaussian report at
(1, 10⁻⁶) with Δ² = 4.5 (``docs/benchmarks/ldp-mechanisms.md``): pure ε avoids the Gaussian's
ln(1/δ) factor and PrivUnit is near-optimal for ℓ₂ mean estimation (Asi et al. Thm 1).

The analyzer's estimator is the Gaussian report's (sum, divide the weights out, rebuild Σ y x
under a centered encoding: ``GaussianRandomizer.estimate``). An admissible report has its constant
coordinates exact and its free part of norm exactly r/m (relative slack 10⁻⁹): a forged report can
move the sums by at most r/m per entry. Floating point: z is sampled by the inverse CDF of t and a
Gaussian direction in û's orthogonal complement, the usual floating-point caveat of continuous
mechanisms (as for the Gaussian report).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from privbandit.shared.core.randomizers.gaussian import CENTERED, GaussianRandomizer

# Relative slack on the norm of an admissible report's free part (floating-point rounding).
NORM_TOLERANCE = 1e-9


def cap_fraction(D: int, gamma: float) -> float:
    """q = P(⟨U, e⟩ ≥ γ) for U uniform on S^{D−1}, γ ∈ [0, 1]: ½ I_{1−γ²}((D−1)/2, ½)."""
    from scipy import special

    return float(0.5 * special.betainc((D - 1) / 2, 0.5, 1.0 - gamma * gamma))


def cap_first_moment(D: int, gamma: float) -> float:
    """μ₊ = E[t 1{t ≥ γ}] = (1 − γ²)^{(D−1)/2} / ((D − 1) B(½, (D−1)/2)), γ ∈ [0, 1]."""
    from scipy import special

    norm = (D - 1) * special.beta(0.5, (D - 1) / 2)
    return float((1.0 - gamma * gamma) ** ((D - 1) / 2) / norm)


def cap_second_moment(D: int, gamma: float) -> float:
    """E[t² 1{t ≥ γ}] (γ ∈ [0, 1]): half of E[t²; t² ≥ γ²] with t² ~ Beta(½, (D−1)/2), whose
    size-biased law is Beta(3/2, (D−1)/2) with mean 1/D."""
    from scipy import special

    return float(0.5 / D * special.betainc((D - 1) / 2, 1.5, 1.0 - gamma * gamma))


@functools.lru_cache(maxsize=64)
def privunit_parameters(D: int, epsilon: float) -> tuple[float, float, float]:
    """(γ, p, m) of PrivUnit2 on S^{D−1} at pure ε: γ minimises 1/m² with p from (★)."""
    from scipy import optimize

    if D < 2:
        raise ValueError("PrivUnit needs D >= 2")
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"ε must be positive and finite, got {epsilon}")

    def spent(gamma: float) -> float:  # ε₁ = ln((1 − q)/q), the cap's share of ε
        q = cap_fraction(D, gamma)
        return math.inf if q <= 0 else math.log((1 - q) / q)

    # γ_max: the cap alone spends ε (then p = ½ and m = 0); ε₁ increases with γ, and is
    # infinite where q underflows (large D), so bisect rather than bracket a root. Below γ_max
    # q ≥ 1/(1 + e^ε): every q the search evaluates is far from underflow.
    lo, hi = 0.0, 1.0 - 1e-12
    if spent(hi) > epsilon:
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if spent(mid) > epsilon else (mid, hi)
        hi = lo

    def params(gamma: float) -> tuple[float, float]:
        q = cap_fraction(D, gamma)
        p = 1.0 / (1.0 + math.exp(-(epsilon - math.log((1 - q) / q))))
        return p, cap_first_moment(D, gamma) * (p / q - (1 - p) / (1 - q))

    res = optimize.minimize_scalar(lambda g: -params(g)[1], bounds=(0.0, hi), method="bounded",
                                   options={"xatol": 1e-10})
    gamma = float(res.x)
    p, m = params(gamma)
    return gamma, p, m


def privunit_epsilon(D: int, gamma: float, p: float) -> float:
    """The exact pure ε of PrivUnit2(p, γ) on S^{D−1} (★): ln(p (1 − q) / ((1 − p) q))."""
    q = cap_fraction(D, gamma)
    return math.log(p * (1 - q) / ((1 - p) * q))


def sample_cap(D: int, gamma: float, p: float, u: np.ndarray,
               rng: np.random.Generator) -> np.ndarray:
    """PrivUnit2's z for unit rows u (n, D): t = ⟨z, u⟩ by the inverse of P(t ≥ s) — uniform on
    (0, q) for the cap (probability p), on (q, 1) off it — and z = t u + √(1 − t²) w, w uniform
    on the unit sphere of u's orthogonal complement."""
    from scipy import special

    n = u.shape[0]
    a = (D - 1) / 2
    q = cap_fraction(D, gamma)
    in_cap = rng.random(n) < p
    # P(t ≥ s) = tail, uniform on the chosen region's range of tails.
    tail = np.where(in_cap, q * rng.random(n), q + (1 - q) * rng.random(n))
    upper = tail <= 0.5
    # P(t ≥ s) = ½ I_{1−s²}(a, ½) for s ≥ 0, and 1 − P(t ≥ −s) for s < 0.
    x = special.betaincinv(a, 0.5, np.where(upper, 2 * tail, 2 * (1 - tail)))
    s = np.sqrt(np.clip(1.0 - x, 0.0, 1.0))
    t = np.where(upper, s, -s)
    g = rng.standard_normal((n, D))
    g -= np.sum(g * u, axis=1, keepdims=True) * u
    w = g / np.linalg.norm(g, axis=1, keepdims=True)
    return t[:, None] * u + np.sqrt(np.clip(1.0 - t * t, 0.0, 1.0))[:, None] * w


class PrivUnitRandomizer(GaussianRandomizer):
    """PrivUnit2 on the report vector of ``encoding``: pure ε-LDP, same estimator (module doc)."""

    mechanism = "privunit"

    def __init__(self, d: int, epsilon: float, L: float = 1.0, encoding: str = "plain",
                 u_weight: float = 1.0, intercept: float | None = None) -> None:
        # δ = 0: pure ε (the Gaussian parent's δ is not used; its σ is replaced below).
        super().__init__(d, epsilon, 0.5, L, encoding, u_weight, intercept)
        self.delta = 0.0
        # Under an intercept entry 0 (x₀² = c²) is constant: released exactly, not randomised.
        self.free = np.ones(self.width, dtype=bool)
        if self.intercept is not None:
            self.free[0] = False
        self.D = int(self.free.sum())
        self.radius = self.report_radius()

    def report_radius(self) -> float:
        """r = sup ‖v_f‖ over ‖x‖ ≤ L, y ∈ [0, 1]: the Gram part's weighted norm is at most
        ‖x xᵀ‖_F = ‖x‖² (exactly, with the off-diagonals × √2; the upper triangle alone is
        smaller), less c⁴ under an intercept, and the reward part's is w |a| ‖x‖ with |a| ≤ 1
        (y) or ½ (y − ½); both are largest at ‖x‖ = L, y = 1, so the sum of squares is the sup
        (attained for the √2 encodings)."""
        L2 = self.L**2
        gram = L2 * L2 - (0.0 if self.intercept is None else self.intercept**4)
        a = 0.5 if self.encoding in CENTERED else 1.0
        return math.sqrt(gram + (self.u_weight * a) ** 2 * L2)

    @functools.cached_property
    def parameters(self) -> tuple[float, float, float]:
        """(γ, p, m) of the calibration at ε (``privunit_parameters``)."""
        return privunit_parameters(self.D, self.epsilon)

    @functools.cached_property
    def coordinate_variance(self) -> float:
        """An upper bound on the variance of any released coordinate, weights applied, per
        report: the second moment r² max(a, b)/m² of r z/m along any axis (z's second moments
        are a = E t² along û and b = (1 − a)/(D − 1) across it)."""
        gamma, p, m = self.parameters
        q = cap_fraction(self.D, gamma)
        inside = cap_second_moment(self.D, gamma)
        a = p * inside / q + (1 - p) * (1.0 / self.D - inside) / (1 - q)
        b = (1 - a) / (self.D - 1)
        return self.radius**2 * max(a, b) / m**2

    @property
    def sigma(self) -> float:
        """√ of the per-coordinate variance bound: the Gaussian report's σ in the formulas
        that size the ridge and the paper's Υ_t (``LDPLinUCB.upsilon``)."""
        return math.sqrt(self.coordinate_variance)

    @property
    def norm(self) -> float:
        """‖free part‖ of every report: r/m."""
        return self.radius / self.parameters[2]

    def calibrate(self) -> None:
        _ = self.parameters, self.coordinate_variance

    def randomize(self, x: np.ndarray, r: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x, r = self.check(x, r)
        clean = self._clean(x, r)  # weighted (the plain encoding's weights are all 1)
        vf = clean[:, self.free]
        n = vf.shape[0]
        norms = np.linalg.norm(vf, axis=1)
        ratio = np.clip(norms / self.radius, 0.0, 1.0)
        sign = np.where(rng.random(n) < (1 + ratio) / 2, 1.0, -1.0)
        unit = np.zeros_like(vf)
        unit[:, 0] = 1.0  # v_f = 0: a fixed direction, the fair sign makes it unbiased
        nz = norms > 0
        unit[nz] = vf[nz] / norms[nz, None]
        gamma, p, m = self.parameters
        z = sample_cap(self.D, gamma, p, sign[:, None] * unit, rng)
        out = clean.copy()
        out[:, self.free] = (self.radius / m) * z
        return out

    def matrix_proxy(self) -> float:
        """Per report, the variance bound of a diagonal entry of G̃ (weight 1)."""
        return self.coordinate_variance

    def offdiag_proxy(self) -> float:
        """Per report, the variance bound of an off-diagonal entry of G̃: ÷ b²."""
        return self.coordinate_variance / self.gram_weight**2

    def vector_proxy(self) -> float:
        """Per report, the variance bound of an entry of ũ: ÷ w², plus the centered
        reconstruction's (½/c)² × an off-diagonal entry's (Cauchy–Schwarz would add a cross
        term; the two coordinates' covariance is O(1/D) of this and ignored)."""
        base = self.coordinate_variance / self.u_weight**2
        if self.intercept is None:
            return base
        return base + (0.5 / self.intercept) ** 2 * self.offdiag_proxy()

    def from_bytes(self, data: bytes) -> np.ndarray:
        row = np.frombuffer(data, dtype="<f8").astype(float) if len(data) == 8 * self.width \
            else None
        if row is None:
            raise ValueError(f"a report is {8 * self.width} bytes, got {len(data)}")
        if not np.isfinite(row).all():
            raise ValueError("report values must be finite")
        fixed = ~self.free
        if fixed.any():
            clean = self.weights[fixed] * self.intercept**2  # type: ignore[operator]  # free is all-True when intercept is None
            if np.abs(row[fixed] - clean).max() > NORM_TOLERANCE * max(1.0, abs(clean).max()):
                raise ValueError("report's constant entries differ from the intercept's")
        if abs(np.linalg.norm(row[self.free]) - self.norm) > NORM_TOLERANCE * self.norm:
            raise ValueError(f"report is not on the sphere of radius r/m = {self.norm:.6g}")
        return row
