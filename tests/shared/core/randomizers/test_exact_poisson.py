"""Exact Poisson / Skellam sampling (shared/core/randomizers/exact_poisson.py).

Distribution tests use a seeded bit source and a chi-square statistic over bins with expected
count ≥ 20; the tolerance is the 0.999 quantile of the chi-square law with (bins − 1) degrees of
freedom (a correct sampler fails with probability 1e-3 per test at a random seed; the seeds are
fixed, so the outcome is deterministic)."""

from __future__ import annotations

import random
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy.special import ive
from scipy.stats import chi2, poisson

from privbandit.shared.core.randomizers.exact_poisson import (
    ExactPoisson,
    ExactSkellam,
    cdf_bounds,
    rational_rate,
)


def chi_square_ok(samples: np.ndarray, pmf_at) -> None:  # type: ignore[no-untyped-def]
    """Bins of single values with expected count ≥ 20, tails pooled; assert the statistic is
    below the 0.999 chi-square quantile."""
    n = samples.size
    lo, hi = int(samples.min()) - 50, int(samples.max()) + 50
    ks = np.arange(lo, hi + 1)
    expected = n * pmf_at(ks)
    observed = np.array([(samples == k).sum() for k in ks], dtype=float)
    big = expected >= 20
    e = np.append(expected[big], n - expected[big].sum())
    o = np.append(observed[big], n - observed[big].sum())
    stat = float(((o - e) ** 2 / e).sum())
    assert stat < chi2.ppf(0.999, e.size - 1), (stat, e.size)


def test_rational_rate_never_below_request() -> None:
    for rate in (0.3, 1.0, 7.123456789, 39144.95426):
        q = rational_rate(rate)
        assert q >= Fraction(rate) and q - Fraction(rate) <= Fraction(1, 1 << 20)


@pytest.mark.parametrize("lam", [Fraction(3, 2), Fraction(149, 4)])
def test_cdf_bounds_are_certified(lam: Fraction) -> None:
    """lo_k ≤ 2^P F(k) ≤ hi_k, F computed independently with mpmath at 400 bits."""
    bits, last = 128, 60 + int(lam) * 3
    lo, hi = cdf_bounds(lam, bits, last)
    mpmath.mp.prec = 400
    lam_mp = mpmath.mpf(lam.numerator) / lam.denominator
    cdf = mpmath.mpf(0)
    for k in range(last + 1):
        cdf += mpmath.exp(-lam_mp) * lam_mp**k / mpmath.factorial(k)
        exact = cdf * mpmath.mpf(2) ** bits
        assert lo[k] <= exact <= hi[k]
        assert hi[k] - lo[k] <= 2


@pytest.mark.parametrize(("lam", "fast_bits", "seed"), [
    (Fraction(1, 3), 128, 1), (Fraction(3, 2), 128, 2), (Fraction(149, 4), 128, 3),
    # 6 bits: most draws need the refinement path, which must give the same law.
    (Fraction(3, 2), 6, 4), (Fraction(149, 4), 6, 5),
])
def test_poisson_distribution(lam: Fraction, fast_bits: int, seed: int) -> None:
    source = random.Random(seed)
    sampler = ExactPoisson(lam, source.getrandbits, fast_bits=fast_bits)
    refine, refined = sampler._refine, []
    sampler._refine = lambda u: refined.append(u) or refine(u)  # type: ignore[method-assign]
    samples = np.array([sampler.sample() for _ in range(20_000)])
    if fast_bits < 16:
        assert len(refined) > 1000  # the slow path really ran
    chi_square_ok(samples, lambda k: poisson.pmf(k, float(lam)))
    # Mean within 5 standard errors.
    assert abs(samples.mean() - float(lam)) < 5 * (float(lam) / samples.size) ** 0.5


def test_sum_of_shares_is_skellam() -> None:
    """50 devices each add Sk(σ²); their sum must be Sk(50 σ²) (pmf e^{-μ} I_|k|(μ))."""
    source = random.Random(11)
    share = ExactSkellam(0.8, source.getrandbits)
    total_var = 50 * share.variance
    sums = np.array([sum(share.sample() for _ in range(50)) for _ in range(6000)])
    chi_square_ok(sums, lambda k: ive(np.abs(k), total_var))
    assert abs(sums.var() / total_var - 1) < 5 * (2 / sums.size) ** 0.5 * 1.2
