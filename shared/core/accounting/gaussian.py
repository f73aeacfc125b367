"""The Gaussian mechanism in (ε, δ)-DP: exact ("analytic") calibration and the classic one.

Balle & Wang, "Improving the Gaussian Mechanism for Differential Privacy: Analytical Calibration
and Optimal Denoising" (ICML 2018), Theorem 8: adding N(0, σ² I) to a function of ℓ2-sensitivity Δ
is (ε, δ)-DP if and only if

    δ ≥ Φ(Δ/(2σ) - εσ/Δ) - e^ε Φ(-Δ/(2σ) - εσ/Δ).

Used by the ``ldp`` threat model (Zheng et al. Alg. 5 adds Gaussian noise on the device).
"""

from __future__ import annotations

import functools
import math

from privbandit.shared.core.accounting.search import brentq


def _check(eps: float, sensitivity: float) -> None:
    if not (eps >= 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a non-negative finite number, got {eps}")
    if not (sensitivity > 0 and math.isfinite(sensitivity)):
        raise ValueError(f"sensitivity must be positive, got {sensitivity}")


def _log_gaussian_delta(eps: float, sigma: float, sensitivity: float) -> float:
    """log δ(ε) of Balle–Wang Thm 8, evaluated without cancellation.

    δ = Φ(a) - e^ε Φ(b) with a = Δ/(2σ) - εσ/Δ and b = -Δ/(2σ) - εσ/Δ. Factor out Φ(a):
    δ = Φ(a) · (1 - exp(ε + log Φ(b) - log Φ(a))), and 1 - exp(x) = -expm1(x). The bracket is
    positive because Φ(a) > e^ε Φ(b) for every σ > 0 (the divergence of two distinct Gaussians).
    """
    from scipy.special import log_ndtr  # here: the shuffler reaches this module, needs no scipy

    a = sensitivity / (2.0 * sigma) - eps * sigma / sensitivity
    b = -sensitivity / (2.0 * sigma) - eps * sigma / sensitivity
    log_pa = float(log_ndtr(a))
    x = eps + float(log_ndtr(b)) - log_pa
    if x >= 0.0:  # only reachable through floating-point error in extreme corners
        return -math.inf
    return log_pa + math.log(-math.expm1(x))


def gaussian_delta(eps: float, sigma: float, sensitivity: float) -> float:
    """Exact δ(ε) of the Gaussian mechanism N(0, σ²), ℓ2-sensitivity Δ (Balle–Wang Thm 8).

    δ = Φ(Δ/(2σ) - εσ/Δ) - e^ε Φ(-Δ/(2σ) - εσ/Δ).
    """
    _check(eps, sensitivity)
    if not sigma > 0:
        raise ValueError(f"sigma must be positive, got {sigma}")
    return math.exp(_log_gaussian_delta(eps, sigma, sensitivity))


@functools.lru_cache(maxsize=256)
def gaussian_sigma(eps: float, delta: float, sensitivity: float) -> float:
    """Smallest σ with ``gaussian_delta(ε, σ, Δ) ≤ δ`` (Balle–Wang Algorithm 1, by root finding).

    δ(ε; σ) is strictly decreasing in σ, so the root of log δ(ε; σ) = log δ in log σ is unique.
    Brent's method in log space (``search.brentq``, scipy's iteration) finds it to machine
    precision; the result is then nudged up by ulps until the inequality holds, so the returned σ
    is always sufficient. Cached: a process asks for the same few calibrations again and again
    (one per randomizer built), and the answer is a pure function of the three floats.
    """
    _check(eps, sensitivity)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    log_target = math.log(delta)

    def f(log_sigma: float) -> float:
        return _log_gaussian_delta(eps, math.exp(log_sigma), sensitivity) - log_target

    # Bracket: at σ → 0 δ → 1 > δ_target; grow σ until δ(σ) ≤ δ_target.
    lo = math.log(sensitivity) - 10.0
    while f(lo) <= 0.0:
        lo -= 10.0
    hi = math.log(sensitivity)
    while f(hi) > 0.0:
        hi += 2.0
    root = brentq(f, lo, hi, xtol=1e-15, rtol=4.0 * 2.0**-52, maxiter=500)
    sigma = math.exp(root)
    while _log_gaussian_delta(eps, sigma, sensitivity) > log_target:
        sigma = math.nextafter(sigma, math.inf)
    return sigma


def classic_gaussian_sigma(eps: float, delta: float, sensitivity: float) -> float:
    """Classic calibration σ = Δ √(2 ln(1.25/δ)) / ε (Dwork & Roth Thm A.1; valid for ε < 1)."""
    _check(eps, sensitivity)
    if eps == 0.0:
        raise ValueError("eps must be positive for the classic calibration")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / eps
