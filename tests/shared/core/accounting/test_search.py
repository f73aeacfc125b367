"""The monotone searches of ``accounting.search`` against closed forms."""

from __future__ import annotations

import math

import pytest

from privbandit.shared.core.accounting.search import (
    bisect_boundary,
    illinois,
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
