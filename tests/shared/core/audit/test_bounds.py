"""The audit's statistics (shared.core.audit.bounds): Clopper–Pearson bounds against their closed
forms and their coverage, ε from exact rates, the split-sample audit's validity (its bound exceeds
the true ε with probability at most 1 − confidence), and the one-run bound against closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.shared.core.audit.bounds import (
    bound_at,
    clopper_pearson_upper,
    epsilon_from_rates,
    one_run_epsilon,
    one_run_p_value,
    split_audit,
)


def test_clopper_pearson_closed_forms() -> None:
    # k = 0: P[Bin(n, p) = 0] = (1 − p)^n = 1 − level; k = n − 1: 1 − p^n = 1 − level.
    n, level = 50, 0.975
    assert clopper_pearson_upper(0, n, level) == pytest.approx(1 - (1 - level) ** (1 / n),
                                                                rel=1e-10)
    assert clopper_pearson_upper(n - 1, n, level) == pytest.approx(level ** (1 / n), rel=1e-10)
    assert clopper_pearson_upper(n, n, level) == 1.0


def test_clopper_pearson_coverage() -> None:
    """The one-sided bound holds with probability ≥ level: 4000 draws at p = 0.03, n = 200; the
    miss rate must stay below 1 − level + 3 standard errors."""
    rng = np.random.default_rng(1)
    p, n, level, trials = 0.03, 200, 0.95, 4000
    k = rng.binomial(n, p, size=trials)
    miss = float(np.mean(clopper_pearson_upper(k, n, level) < p))
    se = math.sqrt(0.05 * 0.95 / trials)
    assert miss <= 0.05 + 3 * se


def test_epsilon_from_exact_rates() -> None:
    """Randomised response at ε: FPR = FNR = 1/(1 + e^ε) gives exactly ε; with δ, the Gaussian
    mechanism's exact rates at any threshold give at most its ε(δ)."""
    for eps in (0.1, 1.0, 3.0):
        rate = 1 / (1 + math.exp(eps))
        assert float(epsilon_from_rates(rate, rate, 0.0)) == pytest.approx(eps, rel=1e-12)
    from scipy.stats import norm

    from privbandit.shared.core.accounting.gaussian import gaussian_sigma

    sigma = gaussian_sigma(1.0, 1e-5, 1.0)
    t = np.linspace(-10, 40, 20001)  # the tangent point lies far in the tail
    fpr, fnr = norm.sf(t / sigma), norm.cdf((t - 1) / sigma)
    eps = epsilon_from_rates(fpr, fnr, 1e-5)
    assert eps.max() <= 1.0 + 1e-9
    assert eps.max() > 0.999  # the (ε, δ) line touches the Gaussian's trade-off curve


@pytest.mark.parametrize("eps", [0.0, 1.0])
def test_split_audit_validity(eps: float) -> None:
    """Over 300 independent audits of randomised response at ε (2000 samples a side), ε_lo > ε
    happens at most 1 − confidence of the time (+3 standard errors); at ε = 1 the mean bound is
    within 0.5 of ε (the test is the right one)."""
    rng = np.random.default_rng(7)
    q = 1 / (1 + math.exp(eps))
    trials, confidence = 300, 0.95
    lows = []
    for _ in range(trials):
        s0 = (rng.random(2000) < q).astype(float)
        s1 = (rng.random(2000) < 1 - q).astype(float)
        lows.append(split_audit(s0, s1, 0.0, confidence).epsilon_lower)
    over = float(np.mean(np.array(lows) > eps + 1e-12))
    assert over <= (1 - confidence) + 3 * math.sqrt(0.05 * 0.95 / trials)
    if eps > 0:
        assert np.mean(lows) > eps - 0.5


def test_split_audit_vector_rule_finds_the_direction() -> None:
    """A 6-dimensional Gaussian shift along one coordinate: the fitted linear rule recovers it
    (ε_lo close to what the 1-D projection gives)."""
    rng = np.random.default_rng(3)
    n = 100_000
    shift = np.zeros(6)
    shift[4] = 1.0
    s0 = rng.normal(size=(n, 6))
    s1 = rng.normal(size=(n, 6)) + shift
    vec = split_audit(s0, s1, 1e-6, 0.95).epsilon_lower
    one = split_audit(s0[:, 4], s1[:, 4], 1e-6, 0.95).epsilon_lower
    assert vec == pytest.approx(one, abs=0.1)
    assert one > 1.0


def test_bound_at_counts() -> None:
    # no errors at all among 1000 and 1000: CP bounds at 0.975 are 1 − 0.025^(1/1000)
    hi = 1 - 0.025 ** (1 / 1000)
    assert float(bound_at(0, 1000, 0, 1000, 0.0, 0.95)) == pytest.approx(
        math.log((1 - hi) / hi), rel=1e-9)


def test_one_run_closed_form() -> None:
    """δ = 0, every guess right: P[Bin(r, q) ≥ r] = q^r, so ε_lo solves q^r = 1 − confidence."""
    r, conf = 200, 0.95
    q = (1 - conf) ** (1 / r)
    expected = math.log(q / (1 - q))
    assert one_run_epsilon(r, r, r, 0.0, conf) == pytest.approx(expected, abs=1e-6)
    # δ only adds to the p-value, so it can only lower ε_lo
    assert one_run_epsilon(1000, r, r, 1e-5, conf) <= expected + 1e-9
    # nothing beyond chance: no bound
    assert one_run_epsilon(1000, 200, 100, 1e-6, conf) == 0.0
    assert one_run_p_value(10, 10, 0, 1.0, 0.0) == 1.0


def test_one_run_validity() -> None:
    """Guesses from ε-DP randomised response on 400 canaries: ε_lo > ε in at most 5% (+3 SE) of
    300 runs."""
    rng = np.random.default_rng(11)
    eps, m, trials = 1.0, 400, 300
    q = 1 / (1 + math.exp(-eps))
    v = rng.binomial(m, q, size=trials)
    lows = {int(k): one_run_epsilon(m, m, int(k), 0.0, 0.95) for k in np.unique(v)}
    over = np.mean([lows[int(k)] > eps for k in v])
    assert over <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / trials)
