"""Monotone searches for the inverse privacy questions: the smallest batch size meeting a target
(integers), the largest ε0 meeting it and the smallest admissible ε (reals, by bisection)."""

from __future__ import annotations

from collections.abc import Callable


def smallest_satisfying(ok: Callable[[int], bool], max_n: int) -> int | None:
    """Smallest n in [1, max_n] with ``ok(n)``, for a predicate monotone in n (False…False True…).

    Doubling until ``ok`` holds, then bisection: O(log n) evaluations. ``None`` when even
    ``max_n`` fails. ``ok(1)`` is not evaluated (callers handle n = 1 in closed form).
    """
    lo, hi = 1, 2  # invariant: not ok(lo)
    while not ok(hi):
        if hi >= max_n:
            return None
        lo, hi = hi, min(2 * hi, max_n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def bisect_boundary(ok: Callable[[float], bool], bad: float, good: float, tol: float) -> float:
    """The point where a monotone predicate switches, to within ``tol``, from the ``good`` side:
    needs ``ok(good)`` and ``not ok(bad)`` (either order on the line); returns an x with
    ``ok(x)`` and |x − boundary| ≤ tol, or one float spacing where that is coarser than tol."""
    while abs(good - bad) > tol:
        mid = 0.5 * (bad + good)
        if mid in (bad, good):  # adjacent floats farther apart than tol (|x| ≳ 2^52 · tol)
            break
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good


def largest_satisfying(
    ok: Callable[[float], bool], start: float, tol: float, cap: float = 1e4
) -> float:
    """Largest x ≥ ``start`` (to ``tol``, rounded down) with ``ok(x)``, for a predicate that holds
    at ``start`` and is non-increasing in x (True…True False…): doubling, then bisection. Returns
    the last admissible point below ``cap`` if ``ok`` still holds there."""
    lo, hi = start, 2.0 * start  # invariant: ok(lo)
    while ok(hi):
        lo, hi = hi, 2.0 * hi
        if hi > cap:
            return lo
    return bisect_boundary(ok, hi, lo, tol)
