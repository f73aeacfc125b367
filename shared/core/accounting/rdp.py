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
