"""Privacy amplification by shuffling whole reports (spec §3, transport ``reports``).

Feldman, McMillan, Talwar, "Hiding Among the Clones: A Simple and Nearly Optimal Analysis of
Privacy Amplification by Shuffling" (FOCS 2021), Theorem 3.2 and the numerical procedure of their
Section 5, implemented here from the statement in spec §3.

For an ε0-LDP randomizer whose outputs are shuffled among ``n`` reports, let

    q = e^{-ε0},   p1 = e^{ε0} / (e^{ε0} + 1),
    C ~ Bin(n - 1, q)           (number of other users acting as "clones" of the target),
    A ~ Bin(C, 1/2)             (clones that look like input x0 rather than x1),
    Δ ~ Bern(p1),
    P = A + Δ,  Q = A + 1 - Δ   (given C).

The shuffled output is (ε, δ)-DP whenever

    δ ≥ δ(ε) := E_C[ Σ_k max(0, P(k | C) - e^ε Q(k | C)) ].

(FMT state the pair as (A + Δ, C - A + 1 - Δ) vs (A + 1 - Δ, C - A + Δ); the second coordinate is
a function of the first and C, so its hockey-stick divergence is exactly this expectation.)

Evaluating the inner sum in O(1) per C. Given C = c, write b(k) = Bin(c, 1/2)(k). Then
P(k) = p1 b(k-1) + (1-p1) b(k) and Q(k) = p1 b(k) + (1-p1) b(k-1), so P(k)/Q(k) is increasing in
r = b(k-1)/b(k) = k/(c-k+1) (because p1 > 1/2), and P(k) > e^ε Q(k) iff r > R with

    R = (e^{ε+ε0} - 1) / (e^{ε0} - e^{ε})        (for ε < ε0; for ε ≥ ε0 the sum is 0).

The positive part is therefore a tail {k ≥ k*}, k* = ceil(R (c+1)/(1+R)), and with
S(j) = Pr[A ≥ j]:

    Σ_{k ≥ k*} P(k) - e^ε Q(k) = (p1 - e^ε (1-p1)) S(k*-1) + ((1-p1) - e^ε p1) S(k*).

The hockey-stick divergence is the maximum over all events, so evaluating the tail sum at
k*-1, k*, k*+1 and keeping the largest is exact and immune to rounding of k*.

Large ε0. Nothing above is evaluated by forming e^{ε0} or e^ε (both overflow a double above
≈ 709.78) or 1 - p1 by subtraction (it rounds to 0 above ε0 ≈ 37):

    p1 - e^ε (1-p1)  =  p1 (1 - e^{ε-ε0}),
    (1-p1) - e^ε p1  = -p1 e^ε (1 - e^{-(ε+ε0)}),
    R/(1+R)          =  (1 - e^{-(ε+ε0)}) / ((1 - e^{-ε0})(1 + e^{-ε})),

and the tail sum is formed from the logs of its two terms (``_conditional_divergence``), so the
bound is exact, not merely finite, for any ε0. When (n-1) e^{-ε0} is negligible, C = 0 but for
that mass and δ(ε) is the randomized-response divergence p1 (1 - e^{ε-ε0}): the central ε is
ε0 + log(1 - δ/p1) < ε0, i.e. no amplification.

Everything is vectorised over the support of C with ``scipy.stats.binom``'s functions
(``accounting.binom``). The C-support is truncated to a Bernstein window of tail mass τ
(``binomial.truncated_binomial``, which also takes the pmf from its log when q = e^{-ε0} is near
the smallest double); the truncated mass (each conditional divergence is ≤ 1) is ADDED to δ so
the bound stays an upper bound.
"""

from __future__ import annotations

import math

import numpy as np

from privbandit.shared.core.accounting import binom
from privbandit.shared.core.accounting.binomial import truncated_binomial
from privbandit.shared.core.accounting.memo import remembered
from privbandit.shared.core.accounting.search import (
    Bracket,
    bisect_boundary,
    illinois,
    largest_satisfying,
    smallest_satisfying,
)

# Largest batch size the inverse search `shuffle_min_batch` will consider.
MAX_BATCH_SIZE = 10**8
# Default absolute truncation mass per tail of C in `shuffle_delta` (≤ 1e-12·δ for δ ≥ 1e-6).
DEFAULT_TAIL_MASS = 1e-18
# δ below this counts as this in ``shuffle_epsilon``'s search (it only steers the search).
_LOG_FLOOR = 1e-300
# Absolute tolerance in ε of the bisections (the returned ε is always the sound upper end).
EPS_TOL = 1e-9


def _conditional_divergence(eps: float, eps0: float, c: np.ndarray) -> np.ndarray:
    """Σ_k max(0, P(k|c) - e^ε Q(k|c)) for each clone count in ``c`` (see module docstring).

    Computed in log space so that it is exact for every ε < ε0, however large (module docstring,
    "Large ε0"): with S(j) = Pr[A ≥ j], the tail sum at k is

        p1 [(1 - e^{ε-ε0}) S(k-1) - e^ε (1 - e^{-(ε+ε0)}) S(k)] = e^a (1 - e^{b-a}),
        a = log p1 + log(1 - e^{ε-ε0}) + log S(k-1),
        b = log p1 + ε + log(1 - e^{-(ε+ε0)}) + log S(k).
    """
    c = np.asarray(c, dtype=float)
    if eps >= eps0:
        return np.zeros_like(c)
    log_p1 = -float(np.logaddexp(0.0, -eps0))  # log(e^{ε0}/(e^{ε0}+1))
    # log of p1 - e^ε (1-p1) = p1 (1 - e^{ε-ε0}), the coefficient of S(k-1) (> 0 for ε < ε0).
    log_coef_prev = log_p1 + math.log(-math.expm1(eps - eps0))
    # log of -[(1-p1) - e^ε p1] = p1 e^ε (1 - e^{-(ε+ε0)}), minus the coefficient of S(k).
    log_coef_here = log_p1 + eps + math.log(-math.expm1(-(eps + eps0)))
    # R/(1+R), R = (e^{ε+ε0} - 1)/(e^{ε0} - e^ε): R/(1+R) = (e^{ε+ε0} - 1)/((e^{ε0} - 1)(e^ε + 1))
    # = (1 - e^{-(ε+ε0)}) / ((1 - e^{-ε0})(1 + e^{-ε})), in [1/2, 1) for 0 ≤ ε < ε0.
    frac = math.expm1(-(eps + eps0)) / (math.expm1(-eps0) * (1.0 + math.exp(-eps)))
    k_star = np.ceil(frac * (c + 1.0))
    best = np.zeros_like(c)
    for shift in (-1.0, 0.0, 1.0):
        k = np.clip(k_star + shift, 0.0, c + 1.0)
        # log Pr[A ≥ j] = binom.logsf(j - 1, c, 1/2): 0 for j ≤ 0 and -inf for j > c.
        a = log_coef_prev + binom.logsf(k - 2.0, c, 0.5)
        b = log_coef_here + binom.logsf(k - 1.0, c, 0.5)
        # The tail sum is positive iff b < a; elsewhere it is ≤ 0 and max(0, ·) is exactly 0
        # (this also covers a = b = -inf, an empty tail).
        positive = b < a
        gap = np.subtract(b, a, out=np.zeros_like(c), where=positive)
        tail = np.where(positive, np.exp(a) * -np.expm1(gap), 0.0)
        best = np.maximum(best, tail)
    return best


def _clone_support(eps0: float, n: int, tail_mass: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Truncated support of C ~ Bin(n-1, e^{-ε0}): (values, pmf, mass left out).

    Window and accounting of the left-out mass: ``shared.core.accounting.binomial``.
    """
    lo, pmf, left_out = truncated_binomial(n - 1, math.exp(-eps0), tail_mass)
    return np.arange(lo, lo + pmf.shape[0], dtype=float), pmf, left_out


def _check(eps0: float, n: int) -> None:
    if not (eps0 > 0 and math.isfinite(eps0)):
        raise ValueError(f"eps0 must be a positive finite number, got {eps0}")
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")


def shuffle_delta(
    eps: float, eps0: float, n: int, *, tail_mass: float = DEFAULT_TAIL_MASS
) -> float:
    """δ(ε) of FMT Thm 3.2 for an ε0-LDP randomizer shuffled among ``n`` reports.

    δ(ε) = E_{C ~ Bin(n-1, e^{-ε0})}[ Σ_k max(0, P(k|C) - e^ε Q(k|C)) ] plus the probability mass
    of C left out by the truncation (an upper bound on its contribution, since every conditional
    divergence is at most 1). For n = 1 this is the randomized-response divergence
    (e^{ε0} - e^ε)/(e^{ε0} + 1).
    """
    _check(eps0, n)
    if eps >= eps0:
        return 0.0
    eps = max(eps, 0.0)
    if n == 1:
        return float(_conditional_divergence(eps, eps0, np.zeros(1))[0])
    c, pmf, left_out = _clone_support(eps0, n, tail_mass)
    inner = _conditional_divergence(eps, eps0, c)
    return float(min(1.0, np.dot(pmf, inner) + left_out))


def _tail_mass(delta: float) -> float:
    """The binomial tail left out of the δ sum for a target δ (its mass is added to δ, so it is
    kept 10¹² times smaller than δ); checks δ ∈ (0, 1)."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return min(DEFAULT_TAIL_MASS, 1e-12 * delta)


def shuffle_epsilon(eps0: float, n: int, delta: float) -> float:
    """Smallest ε (to ``EPS_TOL``, rounded up) with ``shuffle_delta(ε, ε0, n) ≤ δ``.

    Never above ε0: the shuffled output of an ε0-LDP randomizer is ε0-DP by post-processing, so
    ε0 is returned when shuffling gives no amplification. With ``n == 1`` there is no shuffling
    and ε0 is returned (the pure-LDP figure, δ = 0).
    """
    _check(eps0, n)
    tail = _tail_mass(delta)
    if n == 1:
        return eps0
    # A pure function asked at the same arguments by every process that builds a shuffle task
    # (the ε0 searches and the ledgers): remembered across processes under
    # ``PRIVBANDIT_ACCOUNTING_CACHE`` (``memo``).
    return remembered("shuffle_epsilon", (float(eps0), int(n), float(delta)),
                      lambda: _shuffle_epsilon(eps0, n, delta, tail))


def _shuffle_epsilon(eps0: float, n: int, delta: float, tail: float) -> float:
    """``shuffle_epsilon`` computed (n ≥ 2, ``tail`` = ``_tail_mass(delta)``)."""

    def ok(e: float) -> bool:
        return shuffle_delta(e, eps0, n, tail_mass=tail) <= delta

    if ok(0.0):
        return 0.0
    # δ(ε0) = 0: ε0 is admissible, 0 is not. Regula falsi on log δ(ε) − log δ (about linear in ε
    # near the answer: a handful of evaluations where bisection to EPS_TOL takes ~35), over x = −ε
    # so that it rises; every fourth step bisects. The last float-spacing steps are bisected.
    log_delta = math.log(delta)

    def g(x: float) -> float:
        return math.log(max(shuffle_delta(-x, eps0, n, tail_mass=tail), _LOG_FLOOR)) - log_delta

    def narrow(b: Bracket) -> bool:
        return b[2] - b[0] <= EPS_TOL or 0.5 * (b[0] + b[2]) in (b[0], b[2])

    floor = math.log(_LOG_FLOOR) - log_delta  # g(−ε0): δ(ε0) = 0
    lo, _, hi, _ = illinois(g, (-eps0, floor, 0.0, g(0.0)), narrow, margin=0.1 * EPS_TOL,
                            bisect_every=4, max_iter=80)
    return min(bisect_boundary(ok, -hi, -lo, EPS_TOL), eps0)


def shuffle_max_eps0(target_eps: float, n: int, delta: float) -> float:
    """Largest ε0 (to 1e-7, rounded down) with ``shuffle_epsilon(ε0, n, δ) ≤ target_eps``.

    Uses the equivalent test ``shuffle_delta(target_eps, ε0, n) ≤ δ`` (δ(ε) is non-increasing in
    ε, so the smallest admissible ε is ≤ target iff the target itself is admissible), which is
    non-increasing in ε0. For n = 1 no amplification is claimed and the answer is target_eps.
    """
    if not target_eps > 0:
        raise ValueError(f"target_eps must be positive, got {target_eps}")
    tail = _tail_mass(delta)
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if n == 1:
        return target_eps

    def ok(e0: float) -> bool:
        return shuffle_delta(target_eps, e0, n, tail_mass=tail) <= delta

    # ε0 ≤ target is always admissible; above about 1e4, C would be ≡ 0 (no amplification).
    # Remembered across processes, as ``shuffle_epsilon`` (the start of every ε0 search).
    return remembered("shuffle_max_eps0", (float(target_eps), int(n), float(delta)),
                      lambda: largest_satisfying(ok, target_eps, 1e-7))


def shuffle_min_batch(
    eps0: float, target_eps: float, delta: float, *, max_n: int = MAX_BATCH_SIZE
) -> int | None:
    """Smallest batch size n with ``shuffle_epsilon(ε0, n, δ) ≤ target_eps``; None above ``max_n``.

    Tested through ``shuffle_delta(target_eps, ε0, n) ≤ δ`` (non-increasing in n), by doubling
    then integer bisection. ``max_n`` defaults to ``MAX_BATCH_SIZE`` = 10^8.
    """
    _check(eps0, 1)
    if not target_eps > 0:
        raise ValueError(f"target_eps must be positive, got {target_eps}")
    tail = _tail_mass(delta)
    if target_eps >= eps0:
        return 1

    def ok(n: int) -> bool:
        return shuffle_delta(target_eps, eps0, n, tail_mass=tail) <= delta

    return smallest_satisfying(ok, max_n)


def shuffle_closed_form_epsilon(eps0: float, n: int, delta: float) -> float | None:
    """FMT Theorem 3.1 closed form, or None outside its range of validity.

    ε = log(1 + (e^{ε0} - 1)/(e^{ε0} + 1) · (8 √(e^{ε0} log(4/δ)) / √n + 8 e^{ε0} / n)),
    valid when ε0 ≤ log(n / (16 log(2/δ))).
    """
    _check(eps0, n)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    limit_arg = n / (16.0 * math.log(2.0 / delta))
    if limit_arg <= 1.0 or eps0 > math.log(limit_arg):
        return None
    e0 = math.exp(eps0)
    factor = (e0 - 1.0) / (e0 + 1.0)
    inner = 8.0 * math.sqrt(e0 * math.log(4.0 / delta)) / math.sqrt(n) + 8.0 * e0 / n
    return math.log1p(factor * inner)
