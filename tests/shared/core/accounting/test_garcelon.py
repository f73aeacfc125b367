"""Garcelon et al. Theorem 5 / Eq. (3) (shared/accounting/garcelon.py)."""

from __future__ import annotations

import math

import pytest

from privbandit.shared.core.accounting.garcelon import (
    condition_i,
    eq3_slack,
    randomizer_probability,
    theorem5_epsilon,
)

D, M, DELTA = 5, 1, 1e-6


def test_randomizer_probability() -> None:
    # p = 2/(exp(2ε0/(m d(d+3))) + 1); one bit's ratio (1 - p/2)/(p/2) = exp(2ε0/(m d(d+3))).
    p = randomizer_probability(8.0, D, M)
    assert p == pytest.approx(2 / (math.exp(16 / 40) + 1), rel=1e-14)
    assert math.log((1 - p / 2) / (p / 2)) == pytest.approx(16 / 40, rel=1e-12)


def test_condition_i_threshold() -> None:
    # (i) l p ≥ 14 log(8mT/δ0) with δ0 = δ/2: at ε0 = 8, T = 10^12 the threshold is l ≈ 771.
    T, eps0 = 10**12, 8.0
    p = randomizer_probability(eps0, D, M)
    threshold = 14 * math.log(8 * M * T / (DELTA / 2)) / p
    assert 760 < threshold < 780
    below, above = math.floor(threshold), math.ceil(threshold)
    assert not condition_i(eps0, below, DELTA, T, D, M)
    assert condition_i(eps0, above, DELTA, T, D, M)
    assert theorem5_epsilon(eps0, below, DELTA, T, D, M) is None
    # Halving δ0 (i.e. using δ instead of δ/2) would move the threshold: the split is applied.
    assert condition_i(eps0, above, 2 * DELTA, T, D, M)
    assert not condition_i(eps0, math.floor(14 * math.log(8 * M * T / DELTA) / p), 2 * DELTA,
                           T, D, M)


def test_none_at_practical_sizes() -> None:
    # Eq. (3)'s constant 32 d(d+3) log(8mT/δ0) √(2T ln(2T/δ0)) is enormous: at l = 1000 no ε < 1.
    assert theorem5_epsilon(8.0, 1_000, DELTA, 100_000, D, M) is None


def closed_form(eps0: float, l: int, T: int) -> float:
    """Independent solution of Eq. (3) (derived constant): √((2+X²)²-4) - X² = c ⇔ X = c/√(4-2c)."""
    delta0 = DELTA / 2
    p = randomizer_probability(eps0, D, M)
    c = 2 - 2 * p + 2 * math.sqrt(2 * math.log(2 * M * T / delta0) / l)
    k = 32 * D * (D + 3) * math.log(8 * M * T / delta0)
    k *= math.sqrt(2 * T * math.log(2 * T / delta0))
    return c / math.sqrt(4 - 2 * c) * k / l


@pytest.mark.parametrize(
    ("eps0", "l", "T"), [(8.0, 10**10, 10**10), (8.0, 2 * 10**11, 10**12), (1.0, 10**11, 10**12)]
)
def test_matches_closed_form_and_eq3_boundary(eps0: float, l: int, T: int) -> None:
    eps = theorem5_epsilon(eps0, l, DELTA, T, D, M)
    assert eps is not None and 0 < eps < 1
    assert eps == pytest.approx(closed_form(eps0, l, T), rel=1e-9)
    assert eq3_slack(eps, eps0, l, DELTA, T, D, M) >= 0
    assert eq3_slack(eps * (1 - 1e-6), eps0, l, DELTA, T, D, M) < 0


def test_eq3_is_the_quadratic_of_prop13() -> None:
    # The derived Eq. (3) must be equivalent to Prop. 13's per-batch requirement (1-a)² ≤ X² a
    # with a = p - √(2 log(2mT/δ0)/l) — this is the check that "2 - 2p" (not the printed
    # "1 - 2p") is the right constant.
    eps0, l, T = 8.0, 10**10, 10**10
    delta0 = DELTA / 2
    p = randomizer_probability(eps0, D, M)
    a = p - math.sqrt(2 * math.log(2 * M * T / delta0) / l)
    k = 32 * D * (D + 3) * math.log(8 * M * T / delta0)
    k *= math.sqrt(2 * T * math.log(2 * T / delta0))
    for eps in (0.1, 0.5, 0.9, 0.95, 0.97, 0.98, 0.99):
        x = eps * l / k
        quadratic_ok = (1 - a) ** 2 <= x * x * a
        assert (eq3_slack(eps, eps0, l, DELTA, T, D, M) >= 0) == quadratic_ok, eps


def test_monotone_in_l() -> None:
    T = 10**12
    values = [theorem5_epsilon(8.0, l, DELTA, T, D, M) for l in (10**11, 2 * 10**11, 5 * 10**11,
                                                                  10**12)]
    defined = [v for v in values if v is not None]
    assert len(defined) >= 3
    assert all(b <= a for a, b in zip(defined, defined[1:], strict=False)), values


def test_printed_variant_is_looser_or_degenerate() -> None:
    # With "1 - 2p", (3) is easier to satisfy: smaller ε, or vacuous (None) when c ≤ 0.
    for eps0, l, T in ((30.0, 10**12, 10**12), (8.0, 10**10, 10**10)):
        derived = theorem5_epsilon(eps0, l, DELTA, T, D, M)
        printed = theorem5_epsilon(eps0, l, DELTA, T, D, M, variant="printed")
        assert derived is not None
        assert printed is None or printed < derived
