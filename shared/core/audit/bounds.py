"""From samples of a mechanism on two neighbouring inputs to a lower bound on its ε.

Hypothesis test view (Kairouz, Oh, Viswanath 2015; Jagielski, Ullman, Oprea 2020, §3): if M is
(ε, δ)-DP then every test that decides "D₁" on a region S of outputs has

    FPR = P[M(D₀) ∈ S],  FNR = P[M(D₁) ∉ S],   1 − δ − FNR ≤ e^ε FPR  and  1 − δ − FPR ≤ e^ε FNR,

so any (FPR, FNR) a test attains certifies

    ε ≥ ε_lo = max(log((1 − δ − FNR)/FPR), log((1 − δ − FPR)/FNR)).

The rates are estimated from N₀ and N₁ samples: a one-sided Clopper–Pearson upper bound on each
(``clopper_pearson_upper``, scipy.stats.beta) at level 1 − (1 − c)/2 makes both hold together
with probability ≥ c (union bound), and ε_lo is evaluated at the two upper bounds (the expression
decreases in both rates), so P[ε_lo > true ε] ≤ 1 − c.

The test is chosen on data independent of the measurement (``split_audit``): each side's samples
are split in halves; on the first halves the rule is fitted — a linear score w·o with
w = (mean₁ − mean₀)/pooled variance per coordinate (the likelihood-ratio direction of a Gaussian
of equal diagonal covariance, near it for the counts of the discrete mechanisms) and the threshold
maximising the same bound on the first halves' counts — and the second halves measure it. A rule
tuned on the data it is measured on would overstate ε_lo (the confidence would not hold).

The one-run audit (``one_run_epsilon``; Steinke, Nasr, Jagielski, NeurIPS 2023, Theorem 5.2 /
their Algorithm 2's p-value): m canaries each included independently with probability ½; the
auditor guesses membership for r of them and is right v times. Under (ε, δ)-DP,

    P[V ≥ v] ≤ P[Bin(r, q) ≥ v] + 2 m δ · max_{1 ≤ i ≤ v} P[v − i ≤ Bin(r, q) < v] / i,
    q = e^ε / (1 + e^ε),

and ε_lo is the largest ε whose p-value is below 1 − c (bisection; the p-value decreases as ε
grows smaller, so every smaller ε is rejected too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Candidate thresholds examined on the selection half (quantiles of its pooled scores, plus every
# distinct value when there are few: the discrete mechanisms).
THRESHOLDS = 400


def clopper_pearson_upper(k: np.ndarray | int, n: int, level: float) -> np.ndarray:
    """One-sided Clopper–Pearson upper bound on a binomial proportion: the p with
    P[Bin(n, p) ≤ k] = 1 − level, i.e. Beta(k + 1, n − k)'s ``level`` quantile (1 when k = n)."""
    from scipy.stats import beta

    if not 0 < level < 1 or n < 1:
        raise ValueError("need 0 < level < 1 and n >= 1")
    k = np.asarray(k, dtype=float)
    with np.errstate(invalid="ignore"):
        upper = beta.ppf(level, k + 1, np.maximum(n - k, 1e-300))
    return np.where(k >= n, 1.0, upper)


def epsilon_from_rates(fpr: np.ndarray | float, fnr: np.ndarray | float,
                       delta: float) -> np.ndarray:
    """ε_lo = max(log((1 − δ − FNR)/FPR), log((1 − δ − FPR)/FNR), 0) (module doc); a rate of 0
    with the other's complement above δ would certify ε = ∞ (only exact rates are 0 here: the
    callers pass Clopper–Pearson upper bounds, which are positive)."""
    fpr = np.asarray(fpr, dtype=float)
    fnr = np.asarray(fnr, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.log(np.maximum(1.0 - delta - fnr, 0.0) / fpr)
        b = np.log(np.maximum(1.0 - delta - fpr, 0.0) / fnr)
    out = np.maximum(np.nan_to_num(a, nan=0.0, neginf=0.0),
                     np.nan_to_num(b, nan=0.0, neginf=0.0))
    return np.maximum(out, 0.0)


def bound_at(false_pos: np.ndarray | int, n0: int, false_neg: np.ndarray | int, n1: int,
             delta: float, confidence: float) -> np.ndarray:
    """ε_lo from error counts: Clopper–Pearson upper bounds at 1 − (1 − c)/2 on FPR = fp/n₀ and
    FNR = fn/n₁, then ``epsilon_from_rates``."""
    level = 1.0 - (1.0 - confidence) / 2.0
    return epsilon_from_rates(clopper_pearson_upper(false_pos, n0, level),
                              clopper_pearson_upper(false_neg, n1, level), delta)


@dataclass(frozen=True)
class SplitAudit:
    """The outcome of ``split_audit``: the certified bound and the measured test."""

    epsilon_lower: float
    threshold: float
    false_positive_rate: float  # measured on the held-out half (point estimates)
    false_negative_rate: float
    measured: tuple[int, int]   # held-out samples of D₀ and D₁


def linear_rule(sel0: np.ndarray, sel1: np.ndarray) -> np.ndarray:
    """w = (mean₁ − mean₀)/pooled variance per coordinate, fitted on the selection halves (a
    coordinate constant on both sides but different gets a large finite weight; one constant and
    equal gets 0)."""
    m0, m1 = sel0.mean(axis=0), sel1.mean(axis=0)
    var = 0.5 * (sel0.var(axis=0) + sel1.var(axis=0))
    diff = m1 - m0
    floor = 1e-12 * max(1.0, float(np.abs(diff).max(initial=0.0)))
    return diff / np.maximum(var, floor)


def _scores(samples: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    samples = np.asarray(samples, dtype=float)
    if samples.ndim == 1:
        return samples
    assert w is not None
    return samples @ w


def _candidates(s0: np.ndarray, s1: np.ndarray) -> np.ndarray:
    pooled = np.concatenate([s0, s1])
    distinct = np.unique(pooled)
    if distinct.size <= THRESHOLDS:
        return distinct
    return np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, THRESHOLDS)))


def _errors(s0: np.ndarray, s1: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For the rule "D₁ iff score > t": false positives among s0, false negatives among s1."""
    s0, s1 = np.sort(s0), np.sort(s1)
    fp = s0.size - np.searchsorted(s0, t, side="right")
    fn = np.searchsorted(s1, t, side="right")
    return fp, fn


def split_audit(samples0: np.ndarray, samples1: np.ndarray, delta: float,
                confidence: float) -> SplitAudit:
    """ε_lo at ``confidence`` from samples of M(D₀) and M(D₁) (rows: one output each, 1-D for a
    scalar output): the rule is fitted on the first half of each side, measured on the second
    (module doc)."""
    samples0, samples1 = np.asarray(samples0), np.asarray(samples1)
    h0, h1 = samples0.shape[0] // 2, samples1.shape[0] // 2
    if min(h0, h1) < 2:
        raise ValueError("need at least 4 samples of each input")
    sel0, sel1 = samples0[:h0], samples1[:h1]
    w = None if samples0.ndim == 1 else linear_rule(np.asarray(sel0, float),
                                                    np.asarray(sel1, float))
    s0, s1 = _scores(sel0, w), _scores(sel1, w)
    ts = _candidates(s0, s1)
    fp, fn = _errors(s0, s1, ts)
    eps = bound_at(fp, s0.size, fn, s1.size, delta, confidence)
    t = float(ts[int(np.argmax(eps))])
    m0, m1 = _scores(samples0[h0:], w), _scores(samples1[h1:], w)
    fp_m, fn_m = _errors(m0, m1, np.array([t]))
    lower = float(bound_at(fp_m, m0.size, fn_m, m1.size, delta, confidence)[0])
    return SplitAudit(lower, t, float(fp_m[0]) / m0.size, float(fn_m[0]) / m1.size,
                      (int(m0.size), int(m1.size)))


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """P[≥ v correct of r guesses] under (ε, δ)-DP with m canaries (module doc; Steinke et al.
    2023, Theorem 5.2)."""
    from scipy.stats import binom

    if not 0 <= v <= r <= m or epsilon < 0 or not 0 <= delta <= 1:
        raise ValueError("need 0 <= v <= r <= m, epsilon >= 0, 0 <= delta <= 1")
    q = 1.0 / (1.0 + math.exp(-epsilon))
    tail = float(binom.sf(v - 1, r, q))
    if v == 0 or delta == 0:
        return min(tail, 1.0)
    i = np.arange(1, v + 1)
    below = np.cumsum(binom.pmf(v - i, r, q))  # P[v − i ≤ Bin < v]
    return min(tail + 2.0 * m * delta * float(np.max(below / i)), 1.0)


def one_run_epsilon(m: int, r: int, v: int, delta: float, confidence: float) -> float:
    """The largest ε rejected at level 1 − ``confidence`` by ``one_run_p_value`` (0 if none):
    ε_lo of the one-run audit."""
    alpha = 1.0 - confidence
    if one_run_p_value(m, r, v, 0.0, delta) >= alpha:
        return 0.0
    lo, hi = 0.0, 1.0
    while one_run_p_value(m, r, v, hi, delta) < alpha:
        lo, hi = hi, 2 * hi
        if hi > 200:
            return lo
    for _ in range(50):
        mid = (lo + hi) / 2
        if one_run_p_value(m, r, v, mid, delta) < alpha:
            lo = mid
        else:
            hi = mid
    return lo
