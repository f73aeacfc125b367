"""Per-user privacy levels (shared/core/privacy_levels.py): specs, seeded draws, the paper's p0,
α0, β0 and the V_L / V_B heuristic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.shared.core.privacy_levels import (
    EPS_MAX,
    bernoulli_factor,
    choose_eps_min,
    heuristic_v,
    laplace_factor,
    levels_for,
    parse_levels,
)

K_SE = 5  # standard errors allowed for Monte Carlo comparisons


@pytest.mark.parametrize("spec", ["fixed:1", "choice:0,0.2,1,2,100", "normal:1,1", "normal:3,0.5"])
def test_draws_match_the_distribution(spec: str) -> None:
    levels = parse_levels(spec)
    x = levels.sample(200_000, np.random.default_rng(7))
    assert ((x >= 0) & (x <= EPS_MAX)).all()
    se = max(x.std() / math.sqrt(x.size), 1e-12)
    assert abs(x.mean() - levels.mean()) < K_SE * se + 1e-12
    for thr in (0.1, 0.5, 1.0, 2.0):
        p = levels.prob_at_least(thr)
        assert abs((x >= thr).mean() - p) < K_SE * math.sqrt(p * (1 - p) / x.size) + 1e-12
    assert (x == 0).mean() == pytest.approx(levels.prob_declined(), abs=0.005)


def test_draws_are_seeded() -> None:
    levels = parse_levels("normal:1,1")
    a = levels.sample(10, np.random.default_rng(3))
    assert np.array_equal(a, levels.sample(10, np.random.default_rng(3)))
    assert not np.array_equal(a, levels.sample(10, np.random.default_rng(4)))


def test_truncated_normal_mean_is_the_conditional_one() -> None:
    # E[X | X > 0] for N(1, 1): 1 + φ(1)/Φ(1) (the upper bound 100 is irrelevant).
    phi, Phi = math.exp(-0.5) / math.sqrt(2 * math.pi), 0.5 * (1 + math.erf(1 / math.sqrt(2)))
    assert parse_levels("normal:1,1").mean() == pytest.approx(1 + phi / Phi, rel=1e-9)


@pytest.mark.parametrize("bad", ["", "fixed", "fixed:1,2", "fixed:-1", "choice:", "choice:0,0",
                                 "choice:1,200", "normal:1", "normal:1,0", "normal:-1000,1",
                                 "uniform:0,1", "fixed:nan", "choice:a"])
def test_malformed_specs_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_levels(bad)


def test_homogeneous_and_common() -> None:
    assert levels_for(2.0, None).common == 2.0
    assert parse_levels("choice:1,1").common == 1.0
    assert parse_levels("choice:0,1").common is None
    assert parse_levels("normal:1,1").common is None
    assert levels_for(0.123456789, None).common == 0.123456789  # no digit lost


def test_heuristic_matches_the_theorems_closed_form() -> None:
    """choice:{0, 0.2, 1, 2, 100}: at ε_min = 1 the used levels are {1, 2, 100}, p0 = 3/5."""
    levels = parse_levels("choice:0,0.2,1,2,100")
    kept = np.array([1.0, 2.0, 100.0])
    a0 = float(np.mean(1 / kept**2))
    b0 = float(np.mean(((np.exp(kept) + 1) / (np.exp(kept) - 1)) ** 2))
    assert heuristic_v(levels, "laplace", 1.0) == pytest.approx((1 + 4 * math.sqrt(a0)) ** 2 / 0.6)
    assert heuristic_v(levels, "bernoulli", 1.0) == pytest.approx(b0 / 0.6)
    # Homogeneous ε: V is exactly the Corollary 8 / 11 factor.
    one = levels_for(1.0, None)
    assert heuristic_v(one, "laplace", 1.0) == pytest.approx((1 + 4 / 1.0) ** 2)
    assert heuristic_v(one, "bernoulli", 1.0) == pytest.approx(((math.e + 1) / (math.e - 1)) ** 2)


def test_choose_eps_min_minimises_v() -> None:
    for spec in ("choice:0,0.2,1,2,100", "normal:1,1"):
        levels = parse_levels(spec)
        for mech in ("laplace", "bernoulli"):
            best = choose_eps_min(levels, mech)
            v = heuristic_v(levels, mech, best)
            assert all(v <= heuristic_v(levels, mech, x) + 1e-12 for x in levels.support_points())


def test_quadrature_agrees_with_monte_carlo() -> None:
    levels = parse_levels("normal:1,1")
    x = levels.sample(400_000, np.random.default_rng(11))
    kept = x[x >= 0.8]
    for f in (laplace_factor, bernoulli_factor):
        vals = f(kept)
        assert levels.expect(f, 0.8) == pytest.approx(vals.mean(), abs=K_SE * vals.std()
                                                      / math.sqrt(vals.size))
