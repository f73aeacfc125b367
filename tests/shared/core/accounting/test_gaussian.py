"""Analytic Gaussian mechanism (shared/accounting/gaussian.py)."""

from __future__ import annotations

import math

import dp_accounting
import pytest
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
from scipy.stats import norm

from privbandit.shared.core.accounting.gaussian import (
    classic_gaussian_sigma,
    gaussian_delta,
    gaussian_sigma,
)

CASES = [
    (1.0, 1e-6, 1.0),
    (0.1, 1e-5, 2.0),
    (5.0, 1e-10, 1.0),
    (0.5, 1e-3, 0.3),
    (20.0, 1e-6, 1.0),
    (1e-3, 1e-6, 1.0),
]


@pytest.mark.parametrize(("eps", "delta", "sens"), CASES)
def test_sigma_round_trip(eps: float, delta: float, sens: float) -> None:
    sigma = gaussian_sigma(eps, delta, sens)
    assert gaussian_delta(eps, sigma, sens) == pytest.approx(delta, rel=1e-9)
    assert gaussian_delta(eps, sigma, sens) <= delta  # the returned σ is sufficient


@pytest.mark.parametrize(("eps", "sigma", "sens"), [(0.5, 2.0, 1.0), (1.0, 1.0, 1.0), (2, 3, 4)])
def test_delta_formula(eps: float, sigma: float, sens: float) -> None:
    # Balle–Wang Thm 8 written directly (no cancellation at these values).
    direct = norm.cdf(sens / (2 * sigma) - eps * sigma / sens) - math.exp(eps) * norm.cdf(
        -sens / (2 * sigma) - eps * sigma / sens
    )
    assert gaussian_delta(eps, sigma, sens) == pytest.approx(direct, rel=1e-12)


@pytest.mark.parametrize(("eps", "delta", "sens"), CASES)
def test_against_dp_accounting_pld(eps: float, delta: float, sens: float) -> None:
    # dp-accounting's PLD accountant is pessimistic with discretisation 1e-4 (connect-the-dots):
    # its δ may exceed the exact δ by the discretisation error only (stated: 1e-3 relative).
    sigma = gaussian_sigma(eps, delta, sens)
    accountant = PLDAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(noise_multiplier=sigma / sens))
    pld_delta = accountant.get_delta(eps)
    assert delta * (1 - 1e-9) <= pld_delta <= delta * (1 + 1e-3)


def test_classic_is_larger_for_small_eps() -> None:
    for eps in (0.01, 0.1, 0.5, 0.9, 0.99):
        for delta in (1e-3, 1e-6, 1e-10):
            assert classic_gaussian_sigma(eps, delta, 1.0) >= gaussian_sigma(eps, delta, 1.0)


def test_delta_decreasing_in_sigma() -> None:
    values = [gaussian_delta(1.0, s, 1.0) for s in (0.2, 0.5, 1.0, 2.0, 5.0, 10.0)]
    assert all(b < a for a, b in zip(values, values[1:], strict=False))
    assert gaussian_delta(1.0, 1e-3, 1.0) == pytest.approx(1.0, abs=1e-12)
