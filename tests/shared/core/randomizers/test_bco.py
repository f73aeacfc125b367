"""Privacy of the BCO reports (Zheng et al. Alg. 1 and 2; shared/core/randomizers/bco.py).

The exact guarantee: each report is a one-dimensional Gaussian mechanism, so its privacy profile is
Balle–Wang's δ(ε) at the report's σ/Δ; we check it against the closed form, against
dp-accounting's PLD accountant, and by integrating the hockey-stick divergence of the two worst-case
output laws directly. The laws themselves (mean, variance, clipping) are checked by Monte Carlo
(fixed seeds, 5 standard errors).
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
from scipy.integrate import quad
from scipy.stats import norm

from privbandit.shared.core.accounting.bco_ledgers import ldp_bco_ledger
from privbandit.shared.core.accounting.gaussian import gaussian_delta, gaussian_sigma
from privbandit.shared.core.randomizers.bco import (
    OnePointReport,
    TwoPointReport,
    achieved_epsilon,
    classic_factor,
    one_point_sigma,
    two_point_sigma,
)

K_SE = 5.0
CASES = [(0.5, 1e-6), (1.0, 1e-6), (4.0, 1e-6), (1.0, 1e-3)]


def hockey_stick(mean_a: float, mean_b: float, sd: float, eps: float) -> float:
    """∫ (p_a − e^ε p_b)_+ for N(mean_a, sd²), N(mean_b, sd²), by quadrature."""
    def integrand(y: float) -> float:
        return max(norm.pdf(y, mean_a, sd) - math.exp(eps) * norm.pdf(y, mean_b, sd), 0.0)

    lo, hi = min(mean_a, mean_b) - 40 * sd, max(mean_a, mean_b) + 40 * sd
    return quad(integrand, lo, hi, points=[mean_a, mean_b], limit=500, epsabs=1e-14,
                epsrel=1e-10)[0]


def pld_delta(noise_multiplier: float, eps: float) -> float:
    accountant = PLDAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(noise_multiplier=noise_multiplier))
    return accountant.get_delta(eps)


@pytest.mark.parametrize(("eps", "delta"), CASES)
@pytest.mark.parametrize("B", [1.0, 0.25, 3.0])
def test_one_point_is_exactly_eps_delta_ldp_for_losses_in_0_B(eps, delta, B) -> None:
    sigma = one_point_sigma(eps, delta, B)
    assert sigma == gaussian_sigma(eps, delta, B)
    # Worst neighbours: losses 0 and B. Closed form, PLD accountant, direct integration.
    assert gaussian_delta(eps, sigma, B) <= delta
    assert gaussian_delta(eps, sigma, B) == pytest.approx(delta, rel=1e-9)  # and no slack
    assert delta * (1 - 1e-9) <= pld_delta(sigma / B, eps) <= delta * (1 + 1e-3)
    if delta >= 1e-3:  # quadrature is accurate to ~1e-10 absolute
        assert hockey_stick(B, 0.0, sigma, eps) == pytest.approx(delta, rel=1e-5)
    # A σ 1% smaller is not (ε, δ)-DP: the calibration is tight.
    assert gaussian_delta(eps, 0.99 * sigma, B) > delta


@pytest.mark.parametrize(("eps", "delta"), CASES)
@pytest.mark.parametrize("rho", [1e-5, 0.01, 0.3])
@pytest.mark.parametrize("G", [1.0, 0.5])
def test_two_point_is_eps_delta_ldp_with_sensitivity_G_times_distance(eps, delta, rho, G) -> None:
    """Reports clip(Δf, ±G‖Δx‖) + nᵀΔx with ‖Δx‖ = 2ρ: worst neighbours ±G‖Δx‖, noise sd σ‖Δx‖."""
    sigma = two_point_sigma(eps, delta, G)
    dist = 2 * rho
    sd, sens = sigma * dist, 2 * G * dist
    assert gaussian_delta(eps, sd, sens) <= delta * (1 + 1e-9)
    assert gaussian_delta(eps, sd, sens) == pytest.approx(delta, rel=1e-6)
    assert delta * (1 - 1e-6) <= pld_delta(sd / sens, eps) <= delta * (1 + 1e-3)
    if delta >= 1e-3:
        assert hockey_stick(G * dist, -G * dist, sd, eps) == pytest.approx(delta, rel=1e-5)


def test_paper_calibration_is_the_papers_sigma_and_private_below_eps_one() -> None:
    for eps, delta in [(0.5, 1e-6), (0.9, 1e-5)]:
        s1 = one_point_sigma(eps, delta, 1.0, "paper")
        assert s1 == pytest.approx(2 * math.sqrt(2 * math.log(1.25 / delta)) / eps)
        assert s1 == pytest.approx(2 * classic_factor(eps, delta))
        assert gaussian_delta(eps, s1, 1.0) <= delta  # range B: more than enough
        s2 = two_point_sigma(eps, delta, 0.7, "paper")
        assert s2 == pytest.approx(2 * 0.7 * classic_factor(eps, delta))
        assert gaussian_delta(eps, s2, 2 * 0.7) <= delta  # classic bound, valid for ε < 1


@pytest.mark.parametrize(("sigma", "delta", "sens"), [(4.0, 1e-6, 1.0), (1.0, 1e-5, 1.0),
                                                      (10.0, 1e-3, 2.0)])
def test_achieved_epsilon_is_the_smallest_epsilon(sigma, delta, sens) -> None:
    eps = achieved_epsilon(sigma, delta, sens)
    assert gaussian_delta(eps, sigma, sens) <= delta
    assert gaussian_delta(eps - 1e-6, sigma, sens) > delta
    assert gaussian_sigma(eps, delta, sens) == pytest.approx(sigma, rel=1e-6)


def test_one_point_report_law() -> None:
    rep = OnePointReport(1.0, 1e-6, 2.0)
    rng = np.random.default_rng(11)
    n = 200_000
    for loss, clean in [(0.7, 0.7), (-3.0, 0.0), (5.0, 2.0)]:  # clipped to [0, B]
        y = rep.report(np.full(n, loss), rng)
        se = rep.sigma / math.sqrt(n)
        assert abs(y.mean() - clean) < K_SE * se
        # Var estimate: s.e. of the sample variance of a Gaussian is σ²√(2/(n−1)).
        assert abs(y.var(ddof=1) - rep.sigma**2) < K_SE * rep.sigma**2 * math.sqrt(2 / (n - 1))
    with pytest.raises(ValueError):
        rep.report(np.array([np.nan]), rng)


def test_two_point_report_law_and_clipping() -> None:
    G, d, rho = 0.8, 5, 0.05
    rep = TwoPointReport(1.0, 1e-6, G)
    rng = np.random.default_rng(12)
    n = 200_000
    u = rng.standard_normal((n, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    y0 = np.full(d, 0.1)
    x1, x2 = y0 + rho * u, y0 - rho * u
    sd = rep.sigma * 2 * rho
    for diff, clean in [(0.03, 0.03), (1.0, G * 2 * rho), (-1.0, -G * 2 * rho)]:
        y = rep.report(np.full(n, diff), np.zeros(n), x1, x2, rng)
        assert abs(y.mean() - clean) < K_SE * sd / math.sqrt(n)
        assert abs(y.var(ddof=1) - sd**2) < K_SE * sd**2 * math.sqrt(2 / (n - 1))


def test_ledgers_state_the_calibration() -> None:
    s = one_point_sigma(1.0, 1e-6, 1.0)
    led = ldp_bco_ledger("ldp-bco", 1.0, 1e-6, s / 1.0, "analytic").model_dump()
    assert led["threat_model"] == "ldp"
    assert led["ldp_epsilon"] == led["central_epsilon"] == 1.0
    assert led["ldp_delta"] == led["central_delta"] == 1e-6
    assert led["calibration"] == "analytic" and "Balle–Wang" in led["accounting"]
    s = one_point_sigma(0.5, 1e-6, 1.0, "paper")
    led = ldp_bco_ledger("ldp-bco", 0.5, 1e-6, s / 1.0, "paper").model_dump()
    assert led["calibration"] == "paper" and "paper's σ" in led["accounting"]
    assert led["ldp_epsilon"] == pytest.approx(achieved_epsilon(s, 1e-6, 1.0))
    assert led["ldp_epsilon"] < 0.5  # range B, not 2B: the paper's σ over-protects
    s = two_point_sigma(4.0, 1e-6, 0.5, "paper")  # ε ≥ 1: the classic bound is not a proof
    led = ldp_bco_ledger("ldp-bco2", 4.0, 1e-6, s / 1.0, "paper").model_dump()
    assert gaussian_delta(led["ldp_epsilon"], s, 1.0) <= 1e-6
