"""Feldman–McMillan–Talwar whole-report amplification (shared/accounting/shuffle.py)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy.stats import binom

from privbandit.shared.core.accounting.shuffle import (
    EPS_TOL,
    _conditional_divergence,
    shuffle_closed_form_epsilon,
    shuffle_delta,
    shuffle_epsilon,
    shuffle_max_eps0,
    shuffle_min_batch,
)


def brute_force_delta(eps: float, eps0: float, n: int) -> float:
    """E_C Σ_k max(0, P(k|C) - e^ε Q(k|C)) by explicit enumeration of every (C, k) (spec §3)."""
    q = math.exp(-eps0)
    p1 = math.exp(eps0) / (math.exp(eps0) + 1.0)
    p0 = 1.0 / (math.exp(eps0) + 1.0)  # 1 - p1, without the cancellation of forming 1 - p1
    total = 0.0
    for c in range(n):
        b = binom.pmf(np.arange(c + 1), c, 0.5)  # A ~ Bin(c, 1/2)
        b_here = np.concatenate([b, [0.0]])  # Pr[A = k]
        b_prev = np.concatenate([[0.0], b])  # Pr[A = k - 1]
        p_k = p1 * b_prev + p0 * b_here  # A + Δ
        q_k = p1 * b_here + p0 * b_prev  # A + 1 - Δ
        total += binom.pmf(c, n - 1, q) * np.maximum(p_k - math.exp(eps) * q_k, 0.0).sum()
    return total


@pytest.mark.parametrize(
    ("eps", "eps0", "n"),
    [(0.1, 1.0, 40), (0.5, 2.0, 60), (1.5, 3.0, 30), (0.0, 0.5, 25), (0.05, 0.2, 80)],
)
def test_delta_matches_brute_force(eps: float, eps0: float, n: int) -> None:
    # The O(1)-per-C tail formula must equal explicit enumeration (1e-12 relative + 1e-15 abs).
    assert shuffle_delta(eps, eps0, n) == pytest.approx(
        brute_force_delta(eps, eps0, n), rel=1e-12, abs=1e-15
    )


def test_published_figure() -> None:
    # FMT / spec §3: n = 10^4, ε0 = 2, δ = 1e-6 → ε ≈ 0.155 (tolerance ±0.01 from the brief).
    assert shuffle_epsilon(2.0, 10_000, 1e-6) == pytest.approx(0.155, abs=0.01)


def test_returned_epsilon_is_sound_and_tight() -> None:
    eps = shuffle_epsilon(2.0, 10_000, 1e-6)
    assert shuffle_delta(eps, 2.0, 10_000) <= 1e-6
    assert shuffle_delta(eps - 1e-6, 2.0, 10_000) > 1e-6


@pytest.mark.parametrize(
    ("eps0", "n", "delta"),
    [(0.5, 10_000, 1e-6), (1.0, 10_000, 1e-6), (2.0, 10_000, 1e-6), (1.0, 100_000, 1e-8),
     (3.0, 1_000_000, 1e-6), (0.1, 2_000, 1e-5)],
)
def test_below_closed_form(eps0: float, n: int, delta: float) -> None:
    closed = shuffle_closed_form_epsilon(eps0, n, delta)
    assert closed is not None  # every point above is inside Thm 3.1's range
    assert shuffle_epsilon(eps0, n, delta) <= closed


def test_closed_form_range() -> None:
    # Valid only when ε0 ≤ log(n / (16 log(2/δ))).
    n, delta = 10_000, 1e-6
    limit = math.log(n / (16 * math.log(2 / delta)))
    assert shuffle_closed_form_epsilon(limit - 1e-9, n, delta) is not None
    assert shuffle_closed_form_epsilon(limit + 1e-9, n, delta) is None


def test_monotone_in_n() -> None:
    for eps0 in (0.5, 2.0, 4.0):
        values = [shuffle_epsilon(eps0, n, 1e-6) for n in (2, 10, 100, 1_000, 10_000, 100_000)]
        assert all(b <= a for a, b in zip(values, values[1:], strict=False)), values


def test_monotone_in_eps0_and_capped() -> None:
    grid = [0.1, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 10.0]
    values = [shuffle_epsilon(e0, 1_000, 1e-6) for e0 in grid]
    assert all(b >= a for a, b in zip(values, values[1:], strict=False)), values
    assert all(v <= e0 for v, e0 in zip(values, grid, strict=True))


def test_n_one_is_pure_ldp() -> None:
    assert shuffle_epsilon(1.7, 1, 1e-6) == 1.7
    # The n = 1 divergence is that of randomized response: (e^{ε0} - e^ε)/(e^{ε0} + 1).
    assert shuffle_delta(0.3, 1.7, 1) == pytest.approx(
        (math.exp(1.7) - math.exp(0.3)) / (math.exp(1.7) + 1), rel=1e-12
    )


def test_truncation_adds_mass() -> None:
    # A coarser C-window can only increase δ (the cut mass is added, never dropped).
    tight = shuffle_delta(0.2, 2.0, 5_000)
    coarse = shuffle_delta(0.2, 2.0, 5_000, tail_mass=1e-4)
    assert coarse >= tight
    assert coarse - tight <= 2e-4


def test_max_eps0_round_trip() -> None:
    for target, n in ((0.5, 10_000), (1.0, 1_000)):
        e0 = shuffle_max_eps0(target, n, 1e-6)
        assert shuffle_epsilon(e0, n, 1e-6) <= target + 1e-8
        assert shuffle_epsilon(e0 + 1e-3, n, 1e-6) > target


def test_min_batch_round_trip() -> None:
    n = shuffle_min_batch(2.0, 0.3, 1e-6)
    assert n is not None
    assert shuffle_epsilon(2.0, n, 1e-6) <= 0.3 + 1e-8
    assert shuffle_epsilon(2.0, n - 1, 1e-6) > 0.3
    assert shuffle_min_batch(2.0, 3.0, 1e-6) == 1
    # Unreachable under a small cap.
    assert shuffle_min_batch(8.0, 0.01, 1e-6, max_n=10_000) is None


# ---- Large ε0 (no overflow of e^{ε0} or e^ε) and agreement with the formula it replaced ----


def mp_conditional_divergence(eps: float, eps0: float, c: int) -> mpmath.mpf:
    """Σ_k max(0, P(k|c) - e^ε Q(k|c)) by enumeration of k in 60-digit arithmetic (module doc)."""
    with mpmath.workdps(60):
        p1 = 1 / (1 + mpmath.exp(-mpmath.mpf(eps0)))
        p0 = 1 / (1 + mpmath.exp(mpmath.mpf(eps0)))  # 1 - p1 (not formed by subtraction)
        e_eps = mpmath.exp(mpmath.mpf(eps))
        b = [mpmath.binomial(c, k) / mpmath.mpf(2) ** c for k in range(c + 1)] + [0]
        total = mpmath.mpf(0)
        for k in range(c + 2):
            prev = b[k - 1] if k >= 1 else 0
            p_k, q_k = p1 * prev + p0 * b[k], p1 * b[k] + p0 * prev
            total += max(mpmath.mpf(0), p_k - e_eps * q_k)
        return total


@pytest.mark.parametrize(
    ("eps", "eps0"),
    [(0.5, 1.0), (7.9, 8.0), (39.0, 40.0), (300.0, 301.0), (705.0, 709.0), (709.9, 710.0),
     (999.0, 1000.0), (4999.99, 5000.0), (2.0, 5000.0)],
)
def test_conditional_divergence_exact_for_any_eps0(eps: float, eps0: float) -> None:
    # Regression: the linear-space coefficients p1 - e^ε (1 - p1) lost all accuracy once
    # 1 - p1 = 1/(e^{ε0} + 1) fell below the rounding of p1 (ε0 ≳ 37: (39, 40) gave 1 instead of
    # 1 - e^{-1}), and e^ε overflowed above ε ≈ 709.78. Now: 60-digit enumeration to 1e-12 rel.
    clones = [0, 1, 2, 3, 7, 20]
    got = _conditional_divergence(eps, eps0, np.array(clones, dtype=float))
    for value, c in zip(got, clones, strict=True):
        assert float(value) == pytest.approx(
            float(mp_conditional_divergence(eps, eps0, c)), rel=1e-12, abs=1e-300
        ), c


def mp_shuffle_delta(eps: float, eps0: float, n: int, max_clones: int = 6) -> float:
    """δ(ε) = E_C[...] with C ~ Bin(n-1, e^{-ε0}) summed over C ≤ max_clones in 60 digits; for
    (n - 1) e^{-ε0} ≤ 1e-10 the rest of the sum is below 1e-70."""
    with mpmath.workdps(60):
        q = mpmath.exp(-mpmath.mpf(eps0))
        return float(mpmath.fsum(
            mpmath.binomial(n - 1, c) * q**c * (1 - q) ** (n - 1 - c)
            * mp_conditional_divergence(eps, eps0, c)
            for c in range(min(n - 1, max_clones) + 1)
        ))


LARGE_EPS0 = [40.0, 300.0, 700.0, 709.0, 710.0, 800.0, 1000.0, 5000.0]


@pytest.mark.parametrize("eps0", LARGE_EPS0)
def test_large_eps0_delta_exact(eps0: float) -> None:
    # Before the log-space rewrite: OverflowError (scipy's binomial pmf at e^{-ε0} ≈ 1e-308 for
    # ε0 ∈ [697, 709.75], math.exp(ε) for ε > 709.78) or a wrong value (ε0 ≳ 37).
    for gap in (1e-7, 1e-3, 0.5, 3.0):
        eps = eps0 - gap
        assert shuffle_delta(eps, eps0, 10_000) == pytest.approx(
            mp_shuffle_delta(eps, eps0, 10_000), rel=1e-12
        ), gap
    assert shuffle_delta(1.0, eps0, 1) == pytest.approx(mp_shuffle_delta(1.0, eps0, 1), rel=1e-12)


@pytest.mark.parametrize("eps0", LARGE_EPS0)
def test_large_eps0_epsilon_is_randomized_response(eps0: float) -> None:
    # n = 10^4 and (n - 1) e^{-ε0} ≤ 5e-14: C = 0 but for that mass, so δ(ε) = p1 (1 - e^{ε-ε0})
    # (randomized response) and the central ε is ε0 + log(1 - δ/p1): finite, strictly below ε0,
    # and the bisection returns it rounded up by at most EPS_TOL.
    delta = 1e-6
    p1 = 1.0 / (1.0 + math.exp(-eps0))
    exact = eps0 + math.log1p(-delta / p1)
    got = shuffle_epsilon(eps0, 10_000, delta)
    assert exact - 1e-12 * eps0 <= got <= exact + EPS_TOL + 1e-12 * eps0
    assert got < eps0


def test_monotone_in_eps0_and_capped_up_to_large_eps0() -> None:
    # Central ε is non-decreasing in ε0 and never above it (post-processing of ε0-LDP reports),
    # through and beyond the range where e^{ε0} overflows a double.
    grid = [1.0, 2.0, 4.0, 8.0, 20.0, 50.0, 300.0, 700.0, 709.0, 710.0, 800.0, 1000.0, 5000.0]
    values = [shuffle_epsilon(e0, 10_000, 1e-6) for e0 in grid]
    assert all(math.isfinite(v) for v in values), values
    assert all(b >= a for a, b in zip(values, values[1:], strict=False)), values
    assert all(v <= e0 for v, e0 in zip(values, grid, strict=True)), values


def test_huge_eps0_bisection_terminates() -> None:
    # At ε0 = 1e8 adjacent doubles are 1.5e-8 > EPS_TOL apart; the bisection stops there.
    got = shuffle_epsilon(1e8, 10_000, 1e-6)
    assert 1e8 - 1e-6 - 2e-8 <= got <= 1e8


@pytest.mark.parametrize("target", [300.0, 710.0, 1000.0])
def test_max_eps0_beyond_exp_overflow(target: float) -> None:
    # Before: OverflowError for target ≥ 710 (the search evaluates δ(target) at ε0 = 2·target),
    # and exactly `target` (no gain) at 300. The largest ε0 is where randomized response meets δ:
    # p1 (1 - e^{target - ε0}) = δ, i.e. ε0 = target - log(1 - δ/p1) ≈ target + 1e-6.
    delta = 1e-6
    exact = target - math.log1p(-delta)  # p1 = 1 to double precision here
    e0 = shuffle_max_eps0(target, 10_000, delta)
    assert exact - 1e-7 - 1e-12 * target <= e0 <= exact + 1e-12 * target
    assert shuffle_epsilon(e0, 10_000, delta) <= target


def test_min_batch_at_large_eps0() -> None:
    # Before: OverflowError inside scipy's binomial pmf (clone probability e^{-700} ≈ 1e-304).
    # Mathematically no batch below ~e^{ε0} helps, so None under the cap.
    assert shuffle_min_batch(700.0, 4.0, 1e-6, max_n=10**6) is None
    assert shuffle_min_batch(1000.0, 4.0, 1e-6, max_n=10**6) is None


@pytest.mark.parametrize("eps0", [0.1, 0.5, 1.0, 2.0, 4.0, 8.0, 10.0])
def test_delta_matches_linear_space_formula(eps0: float) -> None:
    # Agreement with the linear-space formula on the range where the former code was used:
    # explicit enumeration (`brute_force_delta`: P(k) - e^ε Q(k) formed in linear space),
    # 1e-12 relative + 1e-15 absolute (the absolute part covers the truncated C-mass, ≤ 2e-18,
    # that shuffle_delta adds). The former code met this only for ε0 ≤ 5: its 1 - p1, formed by
    # subtraction, carried a relative error ~1e-16 e^{ε0} (4e-12 at ε0 = 8, ε = 0.99 ε0).
    for n in (1, 2, 50, 400):
        for frac in (0.0, 0.25, 0.5, 0.9, 0.99):
            eps = frac * eps0
            assert shuffle_delta(eps, eps0, n) == pytest.approx(
                brute_force_delta(eps, eps0, n), rel=1e-12, abs=1e-15
            ), (n, eps)


def test_unchanged_from_linear_space_code() -> None:
    # Values printed by the code before the log-space rewrite (main at c78eecd):
    #   PYTHONPATH=. python -c "from shared.core.accounting.shuffle import *; print(repr(
    #   shuffle_epsilon(0.5, 10_000, 1e-6)), ...)"
    # Bisection outputs; each lies within EPS_TOL (or 1e-7 for shuffle_max_eps0) above (below) the
    # same boundary, so old and new may differ by at most that.
    old = {
        (0.5, 10_000, 1e-6): 0.020401455461978912,
        (2.0, 10_000, 1e-6): 0.15504524298012257,
        (4.0, 1_000, 1e-6): 3.989963598549366,
        (3.0, 1_000_000, 1e-6): 0.02687252825126052,
        (1.0, 100_000, 1e-8): 0.02059341501444578,
    }
    for (eps0, n, delta), value in old.items():
        assert shuffle_epsilon(eps0, n, delta) == pytest.approx(value, rel=0, abs=EPS_TOL)
    assert shuffle_max_eps0(0.5, 10_000, 1e-6) == pytest.approx(3.7024171352386475, abs=1e-7)
    assert shuffle_max_eps0(4.0, 10_000, 1e-6) == pytest.approx(5.903928995132446, abs=1e-7)
    assert shuffle_min_batch(2.0, 0.3, 1e-6) == 2944
