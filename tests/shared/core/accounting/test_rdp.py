"""Rényi DP of the Gaussian mechanism and its conversion (shared/accounting/rdp.py)."""

from __future__ import annotations

import math

import dp_accounting
import pytest
from dp_accounting.rdp import RdpAccountant

from privbandit.shared.core.accounting.gaussian import gaussian_delta
from privbandit.shared.core.accounting.rdp import (
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
