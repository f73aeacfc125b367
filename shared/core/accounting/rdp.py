"""Rényi DP of the Gaussian mechanism and its (ε, δ) conversion (``central`` threat model).

Azize & Basu, "Rényi Differentially Private Bandits" (AAAI 2023, file 002): the trusted analyzer
adds Gaussian noise per adaptive episode and the guarantee is stated as (α, ε)-RDP. Each user's
data enters one episode's sum, so the user's guarantee is that of one Gaussian mechanism.

- RDP of N(0, σ²) on a function of ℓ2-sensitivity Δ: ε(α) = α Δ² / (2σ²) (Mironov 2017, Prop. 7),
  hence σ = √(α Δ² / (2ε)).
- Single-order conversion to (ε, δ) (Canonne–Kamath–Steinke 2020, Prop. 12; the one dp-accounting
  uses): ε_DP = ε + log((α-1)/α) - (log δ + log α)/(α - 1), never worse than Mironov's classic
  ε + log(1/δ)/(α - 1), so the minimum of both is returned.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def _check_alpha(alpha: float) -> None:
    if not (alpha > 1 and math.isfinite(alpha)):
        raise ValueError(f"RDP order alpha must be > 1 and finite, got {alpha}")


def gaussian_rdp_epsilon(alpha: float, sigma: float, sensitivity: float) -> float:
    """RDP of the Gaussian mechanism at order α: α Δ² / (2σ²) (Mironov 2017, Prop. 7)."""
    _check_alpha(alpha)
    if not sigma > 0 or not sensitivity > 0:
        raise ValueError("sigma and sensitivity must be positive")
    return alpha * sensitivity**2 / (2.0 * sigma**2)


def gaussian_rdp_sigma(alpha: float, rdp_eps: float, sensitivity: float) -> float:
    """σ making the Gaussian mechanism (α, ε)-RDP: σ = √(α Δ² / (2ε))."""
    _check_alpha(alpha)
    if not (rdp_eps > 0 and math.isfinite(rdp_eps)):
        raise ValueError(f"RDP epsilon must be positive, got {rdp_eps}")
    if not sensitivity > 0:
        raise ValueError(f"sensitivity must be positive, got {sensitivity}")
    return math.sqrt(alpha * sensitivity**2 / (2.0 * rdp_eps))


def rdp_to_dp(alpha: float, rdp_eps: float, delta: float) -> float:
    """(ε, δ)-DP implied by a single (α, ε)-RDP guarantee.

    min( ε + log((α-1)/α) - (log δ + log α)/(α-1)   [Canonne–Kamath–Steinke, Prop. 12],
         ε + log(1/δ)/(α-1)                          [Mironov 2017, Prop. 3] ), floored at 0.
    """
    _check_alpha(alpha)
    if not (rdp_eps >= 0 and math.isfinite(rdp_eps)):
        raise ValueError(f"RDP epsilon must be non-negative, got {rdp_eps}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    cks = rdp_eps + math.log1p(-1.0 / alpha) - (math.log(delta) + math.log(alpha)) / (alpha - 1.0)
    classic = rdp_eps + math.log(1.0 / delta) / (alpha - 1.0)
    return max(0.0, min(cks, classic))


def curve_to_dp(
    orders: Sequence[float], rdp: Sequence[float], delta: float
) -> tuple[float, float]:
    """(ε, best order) of an RDP curve {(α_i, ε_i)} at δ > 0: dp-accounting's ``compute_epsilon``
    (``rdp.rdp_privacy_accountant``, 0.4–0.6), transcribed operation for operation so that the
    floats are the same, without importing dp-accounting (which loads scipy.signal and
    scipy.stats: about a second of CPU in every service process whose start-up computes an
    accountant, e.g. ``ddp-linucb``'s Skellam calibration). Per order, in this order:

    - ε_i < 0 (numerical trouble in the caller's curve): 0;
    - δ² + expm1(−ε_i) > 0: 0 (δ ≥ √(1 − e^{−KL}) already bounds the divergence, KL ≤ ε_i);
    - α_i > 1.01: ε_i + log(1 − 1/α_i) − log(δ α_i)/(α_i − 1) (Canonne–Kamath–Steinke 2020,
      Prop. 12);
    - otherwise ∞ (the bound is unstable as α → 1);

    and the minimum over the orders (the first on ties), floored at 0.
    ``tests/shared/core/accounting/test_rdp.py`` checks equality with dp-accounting's own."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if len(orders) != len(rdp):
        raise ValueError("orders and rdp must have the same length")
    if not orders:
        raise ValueError("need at least one order")
    best, best_order = math.inf, orders[0]
    for a, r in zip(orders, rdp, strict=True):
        if a < 1:
            raise ValueError(f"Rényi divergence order must be at least 1, got {a}")
        if math.isnan(r):
            raise ValueError(f"RDP value at order {a} is NaN")
        if r < 0 or delta**2 + math.expm1(-r) > 0:
            eps = 0.0
        elif a > 1.01:
            eps = r + math.log1p(-1 / a) - math.log(delta * a) / (a - 1)
        else:
            eps = math.inf
        if eps < best:  # strict: the first order wins a tie, as numpy's argmin
            best, best_order = eps, a
    return max(0.0, best), best_order


# dp-accounting's ``rdp_privacy_accountant.DEFAULT_RDP_ORDERS`` (0.4–0.6), as floats (the
# accountant keeps them in a float64 array).
DEFAULT_ORDERS: tuple[float, ...] = tuple(
    float(a) for a in [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64))
    + [128, 256, 512, 1024]
)


def gaussian_dp_epsilon(sigma: float, sensitivity: float, delta: float) -> float:
    """(ε, δ) of one Gaussian mechanism over its whole RDP curve α ↦ α/(2z²), z = σ/Δ, on
    ``DEFAULT_ORDERS``, converted by ``curve_to_dp``: what dp-accounting's ``RdpAccountant``
    gives for one ``GaussianDpEvent(z)`` (``gaussian_dp_epsilon_via_dp_accounting``; the same
    operations on the same doubles, checked for equality in ``tests/shared/core/accounting/
    test_rdp.py``), without importing dp-accounting."""
    if not sigma > 0 or not sensitivity > 0:
        raise ValueError("sigma and sensitivity must be positive")
    z = sigma / sensitivity
    return float(curve_to_dp(DEFAULT_ORDERS, [a / (2 * z**2) for a in DEFAULT_ORDERS], delta)[0])


def gaussian_dp_epsilon_via_dp_accounting(sigma: float, sensitivity: float, delta: float) -> float:
    """(ε, δ) of one Gaussian mechanism from dp-accounting's RDP accountant (all default orders).

    Converts the whole RDP curve (the best order wins), so it is at most ``rdp_to_dp`` at any
    single order.
    """
    if not sigma > 0 or not sensitivity > 0:
        raise ValueError("sigma and sensitivity must be positive")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    import dp_accounting  # here, not at import: it loads scipy.signal (seconds of start-up)

    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(noise_multiplier=sigma / sensitivity))
    return float(accountant.get_epsilon(delta))
