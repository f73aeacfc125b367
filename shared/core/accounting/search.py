"""Integer search for the inverse privacy questions (smallest batch size meeting a target)."""

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
