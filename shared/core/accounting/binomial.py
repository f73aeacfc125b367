"""A binomial distribution truncated to where its mass is, with the mass left out accounted for.

Accountants sum over binomial counts of up to millions of trials; almost all of the mass lies in a
window of width O(√n) around the mean. The window is mean ± t with t from Bernstein's inequality,
Pr[|C − μ| ≥ t] ≤ 2 exp(−t² / (2 (var + t/3))), solved for a tail of ``tail_mass``.
(``scipy.stats.binom.isf`` returns n for tails this small in scipy 1.17, so it is not used.) The
mass actually left out is computed from the binomial cdf/sf and returned, so a caller can add it
to δ and stay sound whatever the window.

Tiny success probabilities (e.g. the clone probability e^{-ε0} of the shuffle accountant at
ε0 ≳ 700): scipy's ``binom.pmf`` (Boost; ``accounting.binom``) raises OverflowError for p near
the smallest normal double (observed for p ∈ [e^{-709.75}, e^{-696.75}], scipy 1.17). Below
``TINY_PROB`` the pmf is instead exp of the log-pmf log C(N, k) + k log p + (N − k) log1p(−p),
which at k = 0 is exactly N log1p(−p) and elsewhere is at most (N p)^k ≤ (N · 1e-290)^k,
negligible beside any δ.
"""

from __future__ import annotations

import math

import numpy as np

from privbandit.shared.core.accounting import binom

# Below this success probability the pmf is computed from scipy's log-pmf (module docstring).
TINY_PROB = 1e-290


def bernstein_window(trials: int, prob: float, tail_mass: float) -> tuple[int, int]:
    """(lo, hi): the counts mean ± t of Bin(trials, prob), clipped to [0, trials], with t from
    Bernstein's inequality for a two-sided tail of ``tail_mass`` (module docstring)."""
    mean = trials * prob
    var = trials * prob * (1.0 - prob)
    log_inv = math.log(2.0 / tail_mass)
    t = log_inv / 3.0 + math.sqrt(log_inv**2 / 9.0 + 2.0 * var * log_inv)
    return max(0, math.floor(mean - t)), min(trials, math.ceil(mean + t))


def truncated_binomial(trials: int, prob: float, tail_mass: float) -> tuple[int, np.ndarray, float]:
    """(offset, pmf of Bin(trials, prob) on offset…offset+len−1, probability mass left out)."""
    if trials == 0:
        return 0, np.ones(1), 0.0
    lo, hi = bernstein_window(trials, prob, tail_mass)
    support = np.arange(lo, hi + 1)
    if prob < TINY_PROB:
        pmf = np.exp(binom.logpmf(support, trials, prob))
    else:
        pmf = binom.pmf(support, trials, prob)
    left_out = (float(binom.cdf(lo - 1, trials, prob)) if lo > 0 else 0.0) + (
        float(binom.sf(hi, trials, prob)) if hi < trials else 0.0
    )
    return lo, pmf, left_out
