"""The monotone searches of ``accounting.search`` against closed forms, and its Brent root
finder against scipy's."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from privbandit.shared.core.accounting.search import (
    bisect_boundary,
    brentq,
    illinois,
    largest_at_most,
    largest_satisfying,
    smallest_satisfying,
)


def test_smallest_satisfying_finds_the_threshold() -> None:
    for threshold in (2, 3, 17, 1000, 4096):
        assert smallest_satisfying(lambda n, t=threshold: n >= t, 10**6) == threshold
    assert smallest_satisfying(lambda n: False, 100) is None


def test_bisect_and_largest_satisfying_stay_on_the_admissible_side() -> None:
    x = bisect_boundary(lambda v: v <= math.pi, bad=10.0, good=0.0, tol=1e-9)
    assert x <= math.pi and math.pi - x <= 1e-9
    y = largest_satisfying(lambda v: v * v <= 2.0, start=0.5, tol=1e-10)
    assert y * y <= 2.0 and math.sqrt(2.0) - y <= 1e-10


@pytest.mark.parametrize("bisect_every", [0, 4])
def test_illinois_keeps_a_valid_bracket_and_converges(bisect_every: int) -> None:
    """g(x) = e^x − 5 (root ln 5): the bracket stays g(lo) ≤ 0 < g(hi) at every step, shrinks to
    the stop width, and takes far fewer evaluations than bisection's ≈ 40 for 10⁻¹² here."""
    calls: list[float] = []

    def g(x: float) -> float:
        calls.append(x)
        return math.exp(x) - 5.0

    lo, g_lo, hi, g_hi = illinois(g, (0.0, g(0.0), 4.0, g(4.0)),
                                  lambda b: b[2] - b[0] <= 1e-12 or b[1] == 0.0,
                                  bisect_every=bisect_every)
    assert g_lo <= 0 < g_hi or g_lo == 0.0
    assert lo <= math.log(5.0) <= hi + 1e-15 and (hi - lo <= 1e-12 or g_lo == 0.0)
    assert len(calls) - 2 < 25


def test_illinois_respects_its_margin_and_iteration_cap() -> None:
    seen: list[float] = []

    def g(x: float) -> float:
        seen.append(x)
        return x - 0.999  # the secant would land next to the upper end

    illinois(g, (0.0, -0.999, 1.0, 0.001), lambda b: False, margin=0.01, max_iter=3)
    assert len(seen) == 3
    assert all(0.01 <= x for x in seen)


def _brent_cases(rng: random.Random, count: int) -> list[tuple[Callable[[float], float], float,
                                                               float, float, float]]:
    """Functions with one root r in a random bracket (either order), of four shapes (linear
    with a wobble, exponential, a flat cubic, an arctangent with a varying slope), and the
    tolerances of both kinds of caller (to the ulp; loose)."""
    cases = []
    for i in range(count):
        c0, c1, c2 = (rng.uniform(-3.0, 3.0) for _ in range(3))
        r = rng.uniform(-2.0, 2.0)
        shape = i % 4
        if shape == 0:
            def f(x: float, r: float = r, c0: float = c0, c1: float = c1) -> float:
                return (x - r) * (1.0 + c0 * c0 + 0.1 * c1 * math.sin(x) ** 2)
        elif shape == 1:
            def f(x: float, r: float = r, k: float = 0.3 * c0 or 1.0) -> float:
                return math.exp(k * x) - math.exp(k * r)
        elif shape == 2:
            def f(x: float, r: float = r, c1: float = c1) -> float:
                return (x - r) ** 3 + 1e-3 * abs(c1) * (x - r)
        else:
            def f(x: float, r: float = r, c2: float = c2) -> float:
                return math.atan(x - r) * (2.0 + math.cos(c2 * x))
        a, b = r - rng.uniform(0.01, 5.0), r + rng.uniform(0.01, 5.0)
        if rng.random() < 0.5:
            a, b = b, a
        cases.append((f, a, b, rng.choice([1e-15, 2e-12, 1e-6, 1e-3]),
                      rng.choice([4 * 2.0**-52, 1e-10])))
    return cases


def test_brentq_returns_scipys_root_to_the_bit() -> None:
    """``gaussian_sigma`` used scipy's brentq; the port must give the very same floats (same
    σ, same noise, same regrets), here on 4,000 functions of four shapes and both kinds of
    tolerance, and on the analytic Gaussian's objective at 500 random (ε, δ, Δ)."""
    from scipy.optimize import brentq as scipy_brentq

    from privbandit.shared.core.accounting.gaussian import _log_gaussian_delta

    rng = random.Random(20261127)
    for f, a, b, xtol, rtol in _brent_cases(rng, 4000):
        assert brentq(f, a, b, xtol, rtol, 500) == scipy_brentq(
            f, a, b, xtol=xtol, rtol=rtol, maxiter=500)
    for _ in range(500):
        eps = rng.choice([0.0, 0.1, 0.5, 1.0, 2.0, 8.0, rng.uniform(0.01, 20.0)])
        delta = rng.choice([1e-6, 1e-8, 0.1, 10 ** rng.uniform(-12.0, -1.0)])
        sens = rng.choice([1.0, 2.0, math.sqrt(2.0), rng.uniform(0.01, 100.0)])

        def g(log_sigma: float, eps: float = eps, sens: float = sens,
              target: float = math.log(delta)) -> float:
            return _log_gaussian_delta(eps, math.exp(log_sigma), sens) - target

        lo, hi = math.log(sens) - 10.0, math.log(sens)  # gaussian_sigma's bracket
        while g(lo) <= 0.0:
            lo -= 10.0
        while g(hi) > 0.0:
            hi += 2.0
        assert brentq(g, lo, hi, 1e-15, 4 * 2.0**-52, 500) == scipy_brentq(
            g, lo, hi, xtol=1e-15, rtol=4 * 2.0**-52, maxiter=500)


def test_brentq_refuses_a_bracket_without_a_sign_change_and_a_nan() -> None:
    with pytest.raises(ValueError, match="different signs"):
        brentq(lambda x: x * x + 1.0, -1.0, 1.0, 1e-12, 1e-12, 100)
    with pytest.raises(ValueError, match="NaN"):
        brentq(lambda x: math.nan if x > 0.25 else x, -1.0, 1.0, 1e-12, 1e-12, 100)
    assert brentq(lambda x: x - 1.0, 1.0, 3.0, 1e-12, 1e-12, 100) == 1.0  # a root at an end


@pytest.mark.parametrize("boundary", [700.0, 999.0, 513.0])
def test_a_boundary_between_the_last_doubling_and_the_cap_is_found(boundary: float) -> None:
    # Doubling from 1 reaches 512, and 1024 is past the cap of 1000: the answer lies in
    # (512, 1000], which the search must still bracket instead of stopping at 512.
    x = largest_satisfying(lambda v: v <= boundary, start=1.0, tol=1e-6, cap=1000.0)
    assert boundary - 1e-6 <= x <= boundary
    y = largest_at_most(lambda v: v, boundary, start=1.0, tol=1e-6, cap=1000.0)
    assert boundary - 1e-6 <= y <= boundary


def test_the_cap_itself_when_admissible_there() -> None:
    assert largest_satisfying(lambda v: True, start=1.0, tol=1e-6, cap=1000.0) == 1000.0
    assert largest_at_most(lambda v: 0.0, 1.0, start=1.0, tol=1e-6, cap=1000.0) == 1000.0
