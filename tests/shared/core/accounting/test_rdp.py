"""Rényi DP of the Gaussian mechanism and its conversion (shared/accounting/rdp.py)."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant

from privbandit.shared.core.accounting.gaussian import gaussian_delta
from privbandit.shared.core.accounting.rdp import (
    DEFAULT_ORDERS,
    curve_to_dp,
    gaussian_dp_epsilon,
    gaussian_dp_epsilon_via_dp_accounting,
    gaussian_rdp_epsilon,
    gaussian_rdp_sigma,
    rdp_to_dp,
)

POINTS = [(2.0, 1.0, 1.0), (2.0, 0.1, 1.0), (8.0, 2.0, 0.5), (1.5, 0.5, 1.0), (32.0, 4.0, 3.0)]


@pytest.mark.parametrize(("alpha", "eps", "sens"), POINTS)
def test_sigma_gives_requested_rdp(alpha: float, eps: float, sens: float) -> None:
    sigma = gaussian_rdp_sigma(alpha, eps, sens)
    assert gaussian_rdp_epsilon(alpha, sigma, sens) == pytest.approx(eps, rel=1e-12)
    # dp-accounting's own RDP of the Gaussian at that single order.
    accountant = RdpAccountant(orders=[alpha])
    accountant.compose(dp_accounting.GaussianDpEvent(noise_multiplier=sigma / sens))
    assert accountant.rdp[0] == pytest.approx(eps, rel=1e-9)


@pytest.mark.parametrize(("alpha", "eps", "sens"), POINTS)
def test_conversion_matches_dp_accounting(alpha: float, eps: float, sens: float) -> None:
    delta = 1e-6
    sigma = gaussian_rdp_sigma(alpha, eps, sens)
    single = RdpAccountant(orders=[alpha])
    single.compose(dp_accounting.GaussianDpEvent(noise_multiplier=sigma / sens))
    ours = rdp_to_dp(alpha, eps, delta)
    # With one order, dp-accounting uses exactly the Canonne–Kamath–Steinke conversion (ours also
    # takes the min with the classic bound, which CKS never exceeds for α > 1).
    assert ours == pytest.approx(single.get_epsilon(delta), rel=1e-12)
    # The whole RDP curve can only do better.
    assert gaussian_dp_epsilon_via_dp_accounting(sigma, sens, delta) <= ours + 1e-12


def test_conversion_never_above_classic() -> None:
    for alpha in (1.05, 1.5, 2.0, 10.0, 100.0):
        for eps in (0.01, 0.5, 3.0):
            for delta in (1e-2, 1e-6, 1e-12):
                classic = eps + math.log(1 / delta) / (alpha - 1)
                assert rdp_to_dp(alpha, eps, delta) <= classic + 1e-12


@pytest.mark.parametrize(("alpha", "eps", "sens"), POINTS)
def test_conversion_is_a_valid_dp_guarantee(alpha: float, eps: float, sens: float) -> None:
    # The mechanism really is (ε_DP, δ)-DP: the exact Gaussian δ at ε_DP is at most δ.
    delta = 1e-6
    sigma = gaussian_rdp_sigma(alpha, eps, sens)
    assert gaussian_delta(rdp_to_dp(alpha, eps, delta), sigma, sens) <= delta
    curve = gaussian_dp_epsilon_via_dp_accounting(sigma, sens, delta)
    assert gaussian_delta(curve, sigma, sens) <= delta


def _curves() -> list[tuple[list[float], list[float], float]]:
    """RDP curves of every shape ``curve_to_dp`` sees or could see: the Skellam accountant's
    (integer orders, many μ, sensitivities, compositions and δ), the Gaussian's on dp-accounting's
    default orders (fractional, down to 1.1), curves with the KL shortcut (tiny ε, large δ), a
    negative value, infinite values, ties, and orders at most 1.01."""
    from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS

    from privbandit.shared.core.accounting.skellam import ORDERS, skellam_rdp

    rng = np.random.default_rng(21)
    curves: list[tuple[list[float], list[float], float]] = []
    for _ in range(300):
        mu = float(10.0 ** rng.uniform(-1, 7))
        l2 = float(10.0 ** rng.uniform(-1, 3))
        l1 = float(min(l2 * l2, l2 * math.sqrt(rng.integers(1, 400))))
        k = int(rng.integers(1, 30))
        delta = float(10.0 ** rng.uniform(-12, -1))
        curves.append((list(ORDERS), [k * skellam_rdp(a, mu, l1, l2) for a in ORDERS], delta))
    orders = [float(a) for a in DEFAULT_RDP_ORDERS]
    for z in (0.3, 0.7, 1.0, 2.5, 10.0, 100.0, 1e4):
        for delta in (1e-2, 1e-6, 1e-10):
            curves.append((orders, [a / (2 * z * z) for a in orders], delta))
    curves += [
        ([2, 4, 8], [1e-9, 1e-7, 1e-5], 0.5),  # δ² + expm1(−ε) > 0: ε = 0
        ([2, 4, 8], [-1e-3, 0.5, 1.0], 1e-6),  # a negative value: 0
        ([2, 4, 8], [math.inf, math.inf, math.inf], 1e-6),
        ([2, 4, 8], [math.inf, 3.0, math.inf], 1e-6),
        ([1.0, 1.005, 1.01], [0.1, 0.2, 0.3], 1e-6),  # every order ≤ 1.01: ∞
        ([1.0, 1.5, 2.0], [0.1, 0.2, 0.3], 1e-6),
        ([3, 3, 3], [1.0, 1.0, 1.0], 1e-6),  # a tie: the first order
    ]
    return curves


def test_curve_to_dp_is_dp_accountings_compute_epsilon_float_for_float() -> None:
    """The transcription gives exactly dp-accounting's floats and orders (``==``, no tolerance),
    so the services' ledgers and Skellam calibrations are what they were with dp-accounting."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    curves = _curves()
    assert len(curves) > 300
    for orders, rdp, delta in curves:
        theirs_eps, theirs_order = compute_epsilon(orders, rdp, delta)
        ours_eps, ours_order = curve_to_dp(orders, rdp, delta)
        assert (ours_eps, ours_order) == (theirs_eps, theirs_order), (orders[:3], rdp[:3], delta)
        assert type(ours_eps) is float


def test_curve_to_dp_refuses_what_it_cannot_convert() -> None:
    for delta in (0.0, 1.0, -1e-6):
        with pytest.raises(ValueError, match="delta"):
            curve_to_dp([2], [1.0], delta)
    with pytest.raises(ValueError, match="same length"):
        curve_to_dp([2, 3], [1.0], 1e-6)
    with pytest.raises(ValueError, match="at least 1"):
        curve_to_dp([0.5], [1.0], 1e-6)
    with pytest.raises(ValueError, match="NaN"):
        curve_to_dp([2], [math.nan], 1e-6)
    with pytest.raises(ValueError, match="one order"):
        curve_to_dp([], [], 1e-6)


def test_gaussian_dp_epsilon_is_dp_accountings_rdp_accountant_float_for_float() -> None:
    """The adar-oful/adar-gope ledgers' curve conversion without dp-accounting: equal (``==``)
    to dp-accounting's RdpAccountant of one Gaussian event, over σ/Δ and δ of every scale."""
    from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS

    assert [float(a) for a in DEFAULT_RDP_ORDERS] == list(DEFAULT_ORDERS)
    rng = np.random.default_rng(26)
    points = [(float(10.0 ** rng.uniform(-1, 4)), float(10.0 ** rng.uniform(-1, 1)),
               float(10.0 ** rng.uniform(-12, -1))) for _ in range(200)]
    points.append((math.sqrt(4.0 / 2.0), 1.0, 1e-6))
    points += [(math.sqrt(alpha / (2 * eps)), 1.0, 1e-6) for alpha, eps, _ in POINTS]
    for sigma, sens, delta in points:
        assert gaussian_dp_epsilon(sigma, sens, delta) == gaussian_dp_epsilon_via_dp_accounting(
            sigma, sens, delta), (sigma, sens, delta)
