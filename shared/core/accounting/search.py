"""Monotone searches for the inverse privacy questions: the smallest batch size meeting a target
(integers), the largest ε0 meeting it and the smallest admissible ε (reals, by bisection), and
a root bracket shrunk by regula falsi (``illinois``) where each evaluation is costly, and
Brent's root finder (``brentq``) where evaluations are cheap and the root is wanted to the ulp."""

from __future__ import annotations

import math
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
    ``cap`` itself if ``ok`` still holds there."""
    lo, hi = start, 2.0 * start  # invariant: ok(lo)
    while ok(hi):
        if hi >= cap:
            return hi
        # The last doubling stops at the cap, so a boundary between it and the cap is found.
        lo, hi = hi, min(2.0 * hi, cap)
    return bisect_boundary(ok, hi, lo, tol)


def largest_at_most(
    f: Callable[[float], float], target: float, start: float, tol: float, cap: float = 1e4
) -> float:
    """Largest x ≥ ``start`` (to ``tol``, rounded down) with f(x) ≤ ``target``, for f
    non-decreasing with f(start) ≤ target: doubling, then regula falsi on f − target
    (``illinois``, every third step a bisection) — fewer costly evaluations than bisection where
    f is smooth. ``cap`` itself if f stays ≤ target there."""
    lo, g_lo = start, -0.0  # g(start) ≤ 0; its value is only needed if no doubling succeeds
    hi = 2.0 * start
    g_hi = f(hi) - target
    while g_hi <= 0:
        if hi >= cap:
            return hi
        lo, g_lo = hi, g_hi
        hi = min(2.0 * hi, cap)  # the last doubling stops at the cap: answers below it are found
        g_hi = f(hi) - target
    if lo == start:
        g_lo = f(lo) - target

    def narrow(b: Bracket) -> bool:
        return b[2] - b[0] <= tol or 0.5 * (b[0] + b[2]) in (b[0], b[2])

    return illinois(lambda x: f(x) - target, (lo, g_lo, hi, g_hi), narrow, margin=0.1 * tol,
                    bisect_every=3)[0]


# One bracket's state: (lo, g(lo), hi, g(hi)) with g(lo) ≤ 0 < g(hi).
Bracket = tuple[float, float, float, float]


def illinois(
    g: Callable[[float], float],
    bracket: Bracket,
    stop: Callable[[Bracket], bool],
    *,
    margin: float = 0.0,
    bisect_every: int = 0,
    max_iter: int | None = None,
) -> Bracket:
    """Shrink a bracket of a non-decreasing g, g(lo) ≤ 0 < g(hi), until ``stop(bracket)`` (or
    ``max_iter`` evaluations), by regula falsi in its Illinois variant: the next point is the
    secant's root x = hi − g(hi)(hi − lo)/(g(hi) − g(lo)), kept ``margin`` inside the bracket; it
    replaces the end of its sign, and an end retained twice in a row has its value halved, so the
    stale side cannot stall the search (superlinear convergence; Dowell & Jarratt 1971). With
    ``bisect_every`` = k every k-th step bisects instead, so a flat or jumpy g still halves the
    bracket. The bracket stays valid throughout (the lower end always has g ≤ 0)."""
    lo, g_lo, hi, g_hi = bracket
    side = 0
    it = 0
    while not stop((lo, g_lo, hi, g_hi)) and (max_iter is None or it < max_iter):
        bisect = g_hi == g_lo or (bisect_every > 0 and it % bisect_every == bisect_every - 1)
        x = 0.5 * (lo + hi) if bisect else hi - g_hi * (hi - lo) / (g_hi - g_lo)
        x = min(max(x, lo + margin), hi - margin)
        gx = g(x)
        if gx <= 0:
            lo, g_lo = x, gx
            if side == -1:
                g_hi *= 0.5  # the upper end went stale twice in a row
            side = -1
        else:
            hi, g_hi = x, gx
            if side == 1:
                g_lo *= 0.5
            side = 1
        it += 1
    return lo, g_lo, hi, g_hi


def brentq(f: Callable[[float], float], a: float, b: float, xtol: float, rtol: float,
           maxiter: int) -> float:
    """A root of f in [a, b] (f(a), f(b) of opposite signs) by Brent's method (Brent 1973, ch. 4:
    inverse quadratic interpolation or secant steps, falling back to bisection), returned when the
    bracket is narrower than xtol + rtol·|x|.

    The same iteration, in the same order of floating-point operations, as
    ``scipy.optimize.brentq`` (scipy's ``Zeros/brentq.c``, BSD-3-Clause), so its root is the same
    float (``tests/shared/core/accounting/test_search.py`` compares the two on thousands of
    functions). It is here because ``scipy.optimize`` costs ~0.5 s of CPU to import, paid by
    every process that calibrates a Gaussian mechanism (``gaussian.gaussian_sigma``) for one root.
    """
    xpre, xcur = a, b
    xblk = fblk = spre = scur = 0.0
    fpre, fcur = f(xpre), f(xcur)
    if math.isnan(fpre) or math.isnan(fcur):
        raise ValueError("f is NaN at an end of the bracket")
    if fpre * fcur > 0:
        raise ValueError("f(a) and f(b) must have different signs")
    if fpre == 0:
        return xpre
    if fcur == 0:
        return xcur
    for _ in range(maxiter):
        if fpre != 0 and fcur != 0 and math.copysign(1.0, fpre) != math.copysign(1.0, fcur):
            xblk, fblk = xpre, fpre
            spre = scur = xcur - xpre
        if abs(fblk) < abs(fcur):  # the best estimate is the end with the smaller |f|
            xpre, xcur, xblk = xcur, xblk, xcur
            fpre, fcur, fblk = fcur, fblk, fcur
        delta = (xtol + rtol * abs(xcur)) / 2
        sbis = (xblk - xcur) / 2
        if fcur == 0 or abs(sbis) < delta:
            return xcur
        if abs(spre) > delta and abs(fcur) < abs(fpre):
            if xpre == xblk:  # secant
                stry = -fcur * (xcur - xpre) / (fcur - fpre)
            else:  # inverse quadratic interpolation
                dpre = (fpre - fcur) / (xpre - xcur)
                dblk = (fblk - fcur) / (xblk - xcur)
                stry = -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))
            if 2 * abs(stry) < min(abs(spre), 3 * abs(sbis) - delta):
                spre, scur = scur, stry  # the interpolation step is accepted
            else:
                spre, scur = sbis, sbis  # bisection
        else:
            spre, scur = sbis, sbis
        xpre, fpre = xcur, fcur
        xcur += scur if abs(scur) > delta else (delta if sbis > 0 else -delta)
        fcur = f(xcur)
        if math.isnan(fcur):
            raise ValueError(f"f is NaN at {xcur}")
    raise RuntimeError(f"Brent's method did not converge in {maxiter} iterations")
