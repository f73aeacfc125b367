"""The worst case over the other users' data of one released count's privacy profile, fast
(``sum_only``'s ``"worst-case"`` method; notation of ``sum_only``'s docstring).

One bit position, batch of l reports, q = p/2: of the other l − 1 users, a hold 0 (their randomised
bit is Bern(q)) and b = l − 1 − a hold 1 (Bern(1 − q)), so the others' count is

    X_a = Bin(a, q) + Bin(b, 1 − q),

and δ_a(ε) is the hockey-stick divergence of (X_a + own bit 0, X_a + own bit 1), in both orders.
The profile is the envelope δ*(ε) = max_a δ_a(ε); a ↔ l − 1 − a mirrors the count and swaps the
orders, so a ≤ (l − 1)/2 suffices.

Exact (blocks of one a). Every a is evaluated: O(l) convolutions of O(√l)-wide pmf windows.

Blocks of a. Past a few thousand reports that is too slow (minutes at l = 10⁵), so consecutive
a ∈ [a0, a0 + g] are bounded together. Write X_{a0+j} = Y + Z_j with independent

    Y = Bin(a0, q) + Bin(l − 1 − a0 − g, 1 − q),   Z_j = Bin(j, q) + Bin(g − j, 1 − q).

Each Bern(q) is I·C and each Bern(1 − q) is I·C + (1 − I), with I ~ Bern(2q) and C ~ Bern(1/2)
independent (the privacy blanket of Balle, Bell, Gascón, Nissim, CRYPTO 2019). Given the block's g
indicators I, Z_j = Bin(M, 1/2) + s_j(I) with M = ΣI ~ Bin(g, 2q), whose law is the same for every
j. The hockey-stick divergence is jointly convex and invariant under a shift common to both
distributions, so for every a in the block

    δ_a(ε) ≤ E_M[D_M(ε)],   D_m = divergence of (Y + Bin(m, 1/2) + own 0, Y + Bin(m, 1/2) + own 1).

D_m is non-increasing in m (one more independent coin added to both is a post-processing), so
with m1 the lower end of M's Bernstein window (Pr[M < m1] ≤ TAIL_MASS)

    δ_a(ε) ≤ D_{m1}(ε) + Pr[M < m1]                                   (the block's bound).

And D_{m1} ≤ D_0, which is δ_{a0} of a batch of l − g: the computed profile lies between the
exact envelope of a batch of l and that of a batch of l − g (plus the tail masses), so the central
ε it gives lies between the exact worst-case figures at l and at l − g — sound, and never worse
than losing g users. (The blanket keeps most of the block's noise, so the excess is far smaller:
at ε0 = 2, d = 5, δ = 1e-6, l = 10⁵ with blocks of 79 it is +0.04 %.)

The block size is ``block_size(l)``: 1 (exact) up to l ≈ 6,600, then the number of blocks falls
as the cost of one (∝ l) grows, so that a profile costs about the same at any l.

Truncation: every binomial is cut to its Bernstein window of two-sided tail mass ≤ TAIL_MASS
(``binomial``), the pmf inside taken from the ratios of consecutive terms and normalised over the
window (so each term is ≥ its exact value); the mass cut off is added to δ.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from privbandit.shared.core.accounting.binomial import bernstein_window

# Two-sided tail mass cut from each binomial (added to δ).
TAIL_MASS = 1e-18
# Block plan: at most this many blocks of a, fewer as l grows (cost of one block ∝ l)...
MAX_BLOCKS = 4096
# ... halving the number of blocks at this batch size.
BLOCK_COST_SCALE = 16384


def block_size(l: int) -> int:
    """Number of consecutive a bounded together in a batch of ``l`` (1: exact); a block of s
    loses at most g = s − 1 users (module docstring)."""
    a_count = (l - 1) // 2 + 1
    blocks = max(1, int(MAX_BLOCKS / (1.0 + l / BLOCK_COST_SCALE)))
    return max(1, -(-a_count // blocks))


def _window(trials: int, prob: float) -> tuple[int, np.ndarray]:
    """(offset, pmf ≥ the exact one) of Bin(trials, prob) on its Bernstein window, whose two-sided
    tail mass is ≤ TAIL_MASS (``binomial.bernstein_window``, as in ``truncated_binomial``).

    Terms from the ratios pmf(k+1)/pmf(k) = (n − k)/(k + 1) · prob/(1 − prob) (relative error
    ≲ 3u per step from the mode), normalised over the window: the window holds 1 − (mass cut),
    so every term is the exact one times 1/(1 − mass cut) ≥ 1.
    """
    if trials == 0 or prob <= 0.0:
        return 0, np.ones(1)
    lo, hi = bernstein_window(trials, prob, TAIL_MASS)
    mode = min(max(math.floor((trials + 1) * prob), lo), hi)
    odds = prob / (1.0 - prob)
    up = np.arange(mode, hi, dtype=float)  # pmf(k+1)/pmf(k) for k = mode … hi − 1
    down = np.arange(mode, lo, -1, dtype=float)  # pmf(k−1)/pmf(k) for k = mode … lo + 1
    with np.errstate(under="ignore"):
        above = np.cumprod((trials - up) / (up + 1.0) * odds)
        below = np.cumprod(down / (trials - down + 1.0) / odds)
    pmf = np.concatenate([below[::-1], [1.0], above])
    return lo, pmf / pmf.sum()


def released_pair(f: np.ndarray, p: float) -> tuple[np.ndarray, np.ndarray]:
    """(P, Q): released count = others (pmf f) + own bit, own bit 0 vs 1."""
    f_here = np.concatenate([f, [0.0]])
    f_prev = np.concatenate([[0.0], f])
    low, high = 0.5 * p, 1.0 - 0.5 * p
    return high * f_here + low * f_prev, low * f_here + high * f_prev


class EpsGrid:
    """An ascending grid of ε with e^ε, computed once for the many hockey-stick evaluations of
    one profile (two per block of a, and a profile has up to thousands of blocks)."""

    __slots__ = ("eps", "exp")

    def __init__(self, eps: np.ndarray) -> None:
        eps = np.asarray(eps, dtype=float)
        if eps.ndim != 1 or not np.all(eps[1:] > eps[:-1]):
            raise ValueError("the ε grid must be one-dimensional and strictly increasing")
        self.eps = eps
        self.exp = np.exp(eps)

    @classmethod
    def of(cls, grid: np.ndarray | EpsGrid) -> EpsGrid:
        """``grid`` itself if it is one, else the grid of its values."""
        return grid if isinstance(grid, EpsGrid) else cls(grid)


def hockey_stick(p_mass: np.ndarray, q_mass: np.ndarray,
                 eps_grid: np.ndarray | EpsGrid) -> np.ndarray:
    """δ(ε) = Σ_k max(0, P(k) - e^ε Q(k)) at every ε of ``eps_grid`` (P, Q sub-probabilities;
    the grid ascending).

    Sort outcomes by privacy loss log(P/Q) (descending); the positive part at ε is the set of
    outcomes with loss > ε, so δ(ε) = ΣP - e^ε ΣQ over that prefix. The prefix length falls
    from n to 0 along the grid, one step at each outcome's loss: the grid is cut into n + 1 runs
    where it is constant, instead of searching the n losses for each of the grid's points (the
    grid has 2ε_bit/DISCRETIZATION points, tens of thousands, the losses O(√l)).
    """
    grid = EpsGrid.of(eps_grid)
    keep = p_mass > 0.0
    p_mass, q_mass = p_mass[keep], q_mass[keep]
    with np.errstate(divide="ignore"):
        loss = np.log(p_mass) - np.log(q_mass)  # +inf where Q = 0
    # The released count's loss is monotone in the count (its pmf is log-concave), so the sort is
    # mostly a reversal or nothing; it is checked, not assumed.
    if np.all(loss[1:] <= loss[:-1]):
        pass
    elif np.all(loss[1:] >= loss[:-1]):
        loss, p_mass, q_mass = loss[::-1], p_mass[::-1], q_mass[::-1]
    else:
        order = np.argsort(-loss, kind="stable")
        loss, p_mass, q_mass = loss[order], p_mass[order], q_mass[order]
    cum_p = np.concatenate([[0.0], np.cumsum(p_mass)])
    cum_q = np.concatenate([[0.0], np.cumsum(q_mass)])
    # below[k]: the grid points under loss_k (non-increasing in k). The prefix has n outcomes
    # on the grid's first below[n−1] points, then n − 1 up to below[n−2], …, 0 from below[0].
    below = np.searchsorted(grid.eps, loss, side="left")
    runs = np.diff(np.concatenate([[0], below[::-1], [grid.eps.shape[0]]]))
    delta = np.repeat(cum_q[::-1], runs)
    np.multiply(grid.exp, delta, out=delta)
    np.subtract(np.repeat(cum_p[::-1], runs), delta, out=delta)
    return np.maximum(delta, 0.0, out=delta)


def block_profile(p: float, l: int, a0: int, g: int,
                  eps_grid: np.ndarray | EpsGrid) -> np.ndarray:
    """Upper bound on δ_a(ε), both orders, for every a in [a0, a0 + g] (module docstring;
    g = 0: δ_{a0} itself, up to the tail masses)."""
    grid = EpsGrid.of(eps_grid)
    q = 0.5 * p
    ones = l - 1 - a0 - g
    _, f_zeros = _window(a0, q)
    _, f_ones = _window(ones, q)
    # Bin(n, 1 − q) = n − Bin(n, q): its pmf is Bin(n, q)'s reversed (offsets shift P and Q alike
    # and the divergence is shift-invariant, so they are dropped).
    f = np.convolve(f_zeros, f_ones[::-1])
    cut = 2.0 * TAIL_MASS
    if g > 0:
        m1, _ = _window(g, p)  # Pr[M < m1] ≤ TAIL_MASS
        cut += TAIL_MASS
        if m1 > 0:
            f = np.convolve(f, _window(m1, 0.5)[1])
            cut += TAIL_MASS
    big_p, big_q = released_pair(f, p)
    both = hockey_stick(big_p, big_q, grid)
    np.maximum(both, hockey_stick(big_q, big_p, grid), out=both)
    both += cut
    return np.minimum(both, 1.0, out=both)


@functools.lru_cache(maxsize=512)
def _profile(p: float, l: int, grid: tuple[float, ...], size: int) -> np.ndarray:
    eps_grid = EpsGrid(np.array(grid))
    envelope = np.zeros_like(eps_grid.eps)
    for a0 in range(0, (l - 1) // 2 + 1, size):
        # the last block may reach past (l − 1)/2: its bound covers those a too, harmlessly
        g = min(size - 1, l - 1 - a0)
        np.maximum(envelope, block_profile(p, l, a0, g, eps_grid), out=envelope)
    envelope.setflags(write=False)
    return envelope


def worst_case_profile(p: float, l: int, eps_grid: np.ndarray) -> np.ndarray:
    """Upper bound on δ*(ε) = max_a δ_a(ε) at each ε of ``eps_grid``, flip probability ``p``, batch
    of ``l``: exact up to the tail masses when ``block_size(l)`` is 1, else at most the exact
    envelope of a batch of l − block_size(l) + 1 (module docstring). Cached (read-only)."""
    return _profile(p, l, tuple(float(e) for e in eps_grid), block_size(l))
