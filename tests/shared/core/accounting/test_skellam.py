"""The Skellam accountant (shared/core/accounting/skellam.py) against an independent computation:
the exact Rényi divergence between Sk(μ) + w and Sk(μ), summed directly over the support."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.special import ive, logsumexp

from privbandit.shared.core.accounting.rdp import rdp_to_dp
from privbandit.shared.core.accounting.skellam import (
    ddp_ledger,
    honest_shares,
    replacement_sensitivities,
    skellam_epsilon,
    skellam_mu,
    skellam_rdp,
)


def skellam_logpmf(k: np.ndarray, mu: float) -> np.ndarray:
    """log P[Sk(μ) = k] = log(e^{-μ} I_|k|(μ)), Sk(μ) = Poisson(μ/2) − Poisson(μ/2)
    (the difference of two Poisson(λ) has pmf e^{-2λ} I_|k|(2λ))."""
    with np.errstate(divide="ignore"):
        return np.log(ive(np.abs(k), mu))


def exact_renyi_shift(alpha: int, mu: float, shift: int) -> float:
    """D_α(Sk(μ) + w ‖ Sk(μ)) = 1/(α−1) log Σ_k P(k − w)^α P(k)^{1−α}, summed over |k| ≤ M.

    All terms are positive, so truncation can only lower the sum: M is chosen so wide
    (60 standard deviations beyond the shift) that the dropped terms are far below double
    precision, and the comparison with the bound is not weakened."""
    if shift == 0:
        return 0.0
    M = int(60 * math.sqrt(mu) + 60 + abs(shift) * (alpha + 1))
    k = np.arange(-M, M + 1)
    lp = skellam_logpmf(k - shift, mu)
    lq = skellam_logpmf(k, mu)
    keep = np.isfinite(lp) & np.isfinite(lq)
    return float(logsumexp(alpha * lp[keep] + (1 - alpha) * lq[keep]) / (alpha - 1))


ALPHAS = [2, 3, 5, 10, 32]
MUS = [0.5, 2.0, 10.0, 50.0, 400.0]


@pytest.mark.parametrize("mu", MUS)
@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("shift", [1, 2, 3, 7])
def test_bound_never_below_exact_one_coordinate(alpha: int, mu: float, shift: int) -> None:
    exact = exact_renyi_shift(alpha, mu, shift)
    bound = skellam_rdp(alpha, mu, l1=abs(shift), l2=abs(shift))
    assert exact > 0
    assert bound >= exact * (1 - 1e-9)


@pytest.mark.parametrize("mu", [1.0, 5.0, 40.0])
@pytest.mark.parametrize("alpha", [2, 4, 16])
@pytest.mark.parametrize(("dim", "l2"), [(2, 2.0), (2, 3.0), (3, 2.5), (3, 3.0)])
def test_bound_covers_worst_case_vector_shift(alpha: int, mu: float, dim: int, l2: float) -> None:
    """Every integer shift w with ‖w‖₂ ≤ Δ₂ (Δ₁ from ``replacement_sensitivities``' rule):
    the divergence of a product is the sum over coordinates; the bound must hold for the worst."""
    l1 = min(math.sqrt(dim) * l2, l2 * l2)
    r = int(math.floor(l2))
    cache: dict[int, float] = {}
    worst = 0.0
    for w in itertools.product(range(-r, r + 1), repeat=dim):
        if sum(x * x for x in w) > l2 * l2 + 1e-12 or sum(abs(x) for x in w) > l1 + 1e-12:
            continue
        div = 0.0
        for x in w:
            if x not in cache:
                cache[x] = exact_renyi_shift(alpha, mu, x)
            div += cache[x]
        worst = max(worst, div)
    assert worst > 0
    assert skellam_rdp(alpha, mu, l1, l2) >= worst * (1 - 1e-9)


def test_bound_tends_to_gaussian_and_is_above_it() -> None:
    """Large μ: the discreteness term vanishes relative to the Gaussian one α Δ²/(2μ)."""
    g = 4 * 100.0 / (2 * 1e6)
    val = skellam_rdp(4, 1e6, 10.0, 10.0)
    assert g < val < g * 1.001


def test_conversion_is_dp_accountings_and_no_worse_than_one_order() -> None:
    mu, l1, l2, delta = 2.0e4, 300.0, 100.0, 1e-6
    eps, order = skellam_epsilon(mu, l1, l2, delta)
    assert eps <= rdp_to_dp(order, skellam_rdp(order, mu, l1, l2), delta) + 1e-12
    for a in (2, 8, 32, 128):
        assert eps <= rdp_to_dp(a, skellam_rdp(a, mu, l1, l2), delta) + 1e-12


@pytest.mark.parametrize("target", [0.5, 1.0, 4.0])
def test_mu_is_inverse_and_minimal(target: float) -> None:
    l1, l2, delta = 2000.0, 700.0, 1e-6
    mu = skellam_mu(target, delta, l1, l2)
    assert skellam_epsilon(mu, l1, l2, delta)[0] <= target
    assert skellam_epsilon(mu * (1 - 1e-4), l1, l2, delta)[0] > target


def test_replacement_sensitivities() -> None:
    l1, l2 = replacement_sensitivities(10.0, 20)
    assert l2 == 20.0 and l1 == pytest.approx(math.sqrt(20) * 20)
    l1, l2 = replacement_sensitivities(10.0, 20, pair_bound=15.0)
    assert l2 == 15.0
    l1, l2 = replacement_sensitivities(1.0, 20)  # tiny integers: ‖w‖₁ ≤ ‖w‖₂²
    assert l1 == 4.0


def test_honest_shares() -> None:
    assert honest_shares(1.0, 1000) == 1000
    assert honest_shares(0.5, 1000) == 500
    assert honest_shares(0.3, 7) == 3  # ⌈2.1⌉
    assert honest_shares(1e-9, 10) == 1
    with pytest.raises(ValueError):
        honest_shares(0.0, 10)
    with pytest.raises(ValueError):
        honest_shares(1.5, 10)


def test_ledger_monotone_in_mu_gamma_l() -> None:
    """More noise per share, more honest devices or larger batches never raise ε."""
    l1, l2, delta = 2000.0, 700.0, 1e-6

    def eps(share: float, gamma: float, l: int) -> float:
        value = ddp_ledger(share, gamma, l, l1, l2, delta).central_epsilon
        assert value is not None
        return value

    shares = [50.0, 200.0, 1000.0, 5000.0]
    assert all(eps(a, 1.0, 1000) > eps(b, 1.0, 1000) for a, b in itertools.pairwise(shares))
    gammas = [0.1, 0.25, 0.5, 0.75, 1.0]
    assert all(eps(500.0, a, 1000) > eps(500.0, b, 1000) for a, b in itertools.pairwise(gammas))
    sizes = [10, 100, 1000, 10000]
    assert all(eps(500.0, 0.5, a) > eps(500.0, 0.5, b) for a, b in itertools.pairwise(sizes))


def test_ledger_says_what_each_observer_sees() -> None:
    mu = skellam_mu(1.0, 1e-6, 2000.0, 700.0)
    ledger = ddp_ledger(mu / 500, 0.5, 1000, 2000.0, 700.0, 1e-6)
    assert ledger.threat_model == "shuffle"
    assert ledger.ldp_epsilon is None
    assert ledger.central_epsilon == pytest.approx(1.0, abs=1e-4)
    assert ledger.central_delta == 1e-6
    dumped = ledger.model_dump()
    assert dumped["honest_shares"] == 500
    assert dumped["skellam_mu"] == pytest.approx(mu)
    # The policy's ledger is transport-free; the analyzer states its task's transport's view
    # (``Policy.ledger(secure_sum=…)``, tests/services/prio3/test_ledger_observers.py).
    for phrase in ("only the batch sums", "no local guarantee", "replacement"):
        assert phrase in ledger.accounting
