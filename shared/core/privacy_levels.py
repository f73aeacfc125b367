"""Per-user privacy levels ε_t (HeLDP paper, file 003, §1.2 "Heterogeneous privacy levels").

Each user t states her own level ε_t; the paper models the levels as i.i.d. draws from a
distribution F that the agent may know. Specs (command line ``--epsilon-dist``, spec §6):

    fixed:E                 every user at ε = E (homogeneous, HoLDP)
    choice:e1,e2,...        uniform over a finite set; 0 means the user declines (sends nothing
                            informative)
    normal:MEAN,SD          normal(MEAN, SD²) truncated to [0, EPS_MAX] (the conditional law, drawn
                            by inverse CDF)

All levels lie in [0, EPS_MAX] = [0, 100]; a device refuses anything outside that range.

The paper's quantities for a threshold ε_min (Thm 7 and Thm 10):
    p0 = P(ε_t ≥ ε_min),   α0 = E[ε⁻² | ε ≥ ε_min],   β0 = E[((e^ε+1)/(e^ε−1))² | ε ≥ ε_min].
The leading log T terms of both regret bounds are Σ_a (8 log T / Δ_a) · V with
    V_L = (1 + 4 √α0)² / p0        (Thm 7 at κ → 0: the κ Q_L term vanishes)
    V_B = β0 / p0                  (Thm 10 at κ → 0)
so V is the part of the bound that ε_min controls; choosing ε_min to minimise V is the heuristic
(its predictive power is measured, not assumed: bench/experiments/heterogeneous.py fits regret
against V and reports R²). The paper's numerical section, where this heuristic is used, is withheld
from our copy; the definitions above are read off Theorems 7 and 10.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

EPS_MAX = 100.0


def bernoulli_factor(eps: np.ndarray | float) -> np.ndarray:
    """β(ε) = ((e^ε + 1)/(e^ε − 1))² = coth²(ε/2) (HeLDP §3.2), +∞ at ε = 0."""
    eps = np.asarray(eps, dtype=float)
    with np.errstate(divide="ignore"):
        return 1.0 / np.tanh(eps / 2.0) ** 2


def laplace_factor(eps: np.ndarray | float) -> np.ndarray:
    """α(ε) = ε⁻² (HeLDP §3.1), +∞ at ε = 0."""
    eps = np.asarray(eps, dtype=float)
    with np.errstate(divide="ignore"):
        return 1.0 / eps**2


@dataclass(frozen=True)
class PrivacyLevels:
    """A parsed distribution of per-user levels (see the module docstring)."""

    spec: str
    kind: str  # "fixed" | "choice" | "normal"
    values: tuple[float, ...] = ()
    loc: float = 0.0
    scale: float = 0.0

    # -- what the simulator draws ------------------------------------------------------------
    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n i.i.d. levels (one per user)."""
        if self.kind == "fixed":
            return np.full(n, self.values[0])
        if self.kind == "choice":
            return np.asarray(self.values)[rng.integers(0, len(self.values), size=n)]
        from scipy.special import ndtri  # here: services load this module, need no scipy

        lo, hi = self._cdf_bounds()
        eps = self.loc + self.scale * ndtri(lo + rng.random(n) * (hi - lo))
        return np.clip(eps, 0.0, EPS_MAX)  # guards rounding at the ends only

    # -- exact properties ----------------------------------------------------------------------
    @property
    def homogeneous(self) -> bool:
        return self.kind == "fixed" or (self.kind == "choice" and len(set(self.values)) == 1)

    @property
    def common(self) -> float | None:
        """The one level every user has, or None when levels differ."""
        return self.values[0] if self.homogeneous else None

    def mean(self) -> float:
        return self.expect(lambda e: e, 0.0)

    def prob_at_least(self, x: float) -> float:
        """p0 = P(ε ≥ x)."""
        if self.kind != "normal":
            v = np.asarray(self.values)
            return float(np.mean(v >= x))
        from scipy.special import ndtr

        lo, hi = self._cdf_bounds()
        if x <= 0:
            return 1.0
        return float(max(0.0, hi - ndtr((min(x, EPS_MAX) - self.loc) / self.scale)) / (hi - lo))

    def prob_declined(self) -> float:
        """P(ε = 0): users who send nothing informative."""
        if self.kind == "normal":
            return 0.0
        return float(np.mean(np.asarray(self.values) == 0.0))

    def expect(self, f: Callable[[np.ndarray], np.ndarray], eps_min: float) -> float:
        """E[f(ε) | ε ≥ eps_min] (exact for finite supports, adaptive quadrature for the normal)."""
        p = self.prob_at_least(eps_min)
        if p <= 0:
            return math.nan
        if self.kind != "normal":
            v = np.asarray(self.values)
            kept = v[v >= eps_min]
            return float(np.mean(f(kept)))
        lo, hi = self._cdf_bounds()
        z = hi - lo

        def density(e: float) -> float:
            return math.exp(-0.5 * ((e - self.loc) / self.scale) ** 2) / (
                self.scale * math.sqrt(2 * math.pi) * z
            )

        a = max(eps_min, 0.0)
        # Integrate over the bulk of the law only (±12 sd): outside it the density is < 1e-31.
        b = min(EPS_MAX, self.loc + 12 * self.scale)
        if a >= b:
            return math.nan
        from scipy import integrate  # here: it is only needed for the normal law

        val, _ = integrate.quad(lambda e: float(f(np.asarray(e))) * density(e), a, b,
                                limit=200, epsabs=1e-13, epsrel=1e-10)
        return float(val / p)

    def support_points(self) -> list[float]:
        """Candidate thresholds ε_min for the heuristic: the positive support points, or a grid."""
        if self.kind != "normal":
            return sorted({v for v in self.values if v > 0})
        hi = min(EPS_MAX, self.loc + 4 * self.scale)
        return [float(x) for x in np.round(np.linspace(0.05, hi, 80), 4) if x > 0]

    def _cdf_bounds(self) -> tuple[float, float]:
        from scipy.special import ndtr

        return (float(ndtr((0.0 - self.loc) / self.scale)),
                float(ndtr((EPS_MAX - self.loc) / self.scale)))


def parse_levels(spec: str) -> PrivacyLevels:
    """Parse ``fixed:E``, ``choice:e1,e2,...`` or ``normal:MEAN,SD`` (ValueError if malformed)."""
    kind, sep, rest = spec.strip().partition(":")
    if not sep:
        raise ValueError(f"privacy-level spec {spec!r}: expected fixed:E, choice:e1,e2,... "
                         "or normal:MEAN,SD")
    try:
        nums = [float(x) for x in rest.split(",") if x.strip() != ""]
    except ValueError as exc:
        raise ValueError(f"privacy-level spec {spec!r}: not a number ({exc})") from None
    if not all(math.isfinite(x) for x in nums):
        raise ValueError(f"privacy-level spec {spec!r}: values must be finite")
    if kind in ("fixed", "choice"):
        if (kind == "fixed" and len(nums) != 1) or not nums:
            raise ValueError(f"privacy-level spec {spec!r}: {kind} needs "
                             f"{'one value' if kind == 'fixed' else 'at least one value'}")
        if any(not 0.0 <= x <= EPS_MAX for x in nums):
            raise ValueError(f"privacy levels must lie in [0, {EPS_MAX:g}], got {spec!r}")
        if max(nums) <= 0:
            raise ValueError(f"privacy-level spec {spec!r}: every user declines")
        return PrivacyLevels(spec=spec, kind=kind, values=tuple(nums))
    if kind == "normal":
        if len(nums) != 2 or nums[1] <= 0:
            raise ValueError(f"privacy-level spec {spec!r}: normal needs MEAN,SD with SD > 0")
        lv = PrivacyLevels(spec=spec, kind="normal", loc=nums[0], scale=nums[1])
        lo, hi = lv._cdf_bounds()
        if hi - lo < 1e-12:
            raise ValueError(f"privacy-level spec {spec!r}: no mass in [0, {EPS_MAX:g}]")
        return lv
    raise ValueError(f"privacy-level spec {spec!r}: unknown kind {kind!r} (fixed, choice, normal)")


def levels_for(epsilon: float | None, epsilon_dist: str | None) -> PrivacyLevels:
    """The distribution a config describes: ``epsilon_dist`` if given, else fixed:epsilon."""
    if epsilon_dist is not None:
        return parse_levels(epsilon_dist)
    if epsilon is None:
        raise ValueError("need an epsilon or an epsilon distribution")
    text = f"{epsilon:g}"
    if float(text) != epsilon:  # keep every digit when the short form would round
        text = repr(float(epsilon))
    return parse_levels(f"fixed:{text}")


def heuristic_v(levels: PrivacyLevels, mechanism: str, eps_min: float) -> float:
    """V_L = (1 + 4√α0)²/p0 (``laplace``) or V_B = β0/p0 (``bernoulli``) at threshold eps_min."""
    if not eps_min > 0:
        raise ValueError("eps_min must be > 0")
    p0 = levels.prob_at_least(eps_min)
    if p0 <= 0:
        return math.inf
    if mechanism == "laplace":
        a0 = levels.expect(laplace_factor, eps_min)
        return (1.0 + 4.0 * math.sqrt(a0)) ** 2 / p0
    if mechanism == "bernoulli":
        return levels.expect(bernoulli_factor, eps_min) / p0
    raise ValueError(f"unknown mechanism {mechanism!r} (laplace, bernoulli)")


def choose_eps_min(levels: PrivacyLevels, mechanism: str) -> float:
    """The heuristic's ε_min: the candidate threshold with the smallest V (ties: the larger one)."""
    best, best_v = None, math.inf
    for x in levels.support_points():
        v = heuristic_v(levels, mechanism, x)
        if v <= best_v:
            best, best_v = x, v
    if best is None:
        raise ValueError(f"no usable threshold for {levels.spec!r}")
    return float(best)
