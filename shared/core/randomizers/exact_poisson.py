"""Exact Poisson and Skellam sampling from uniform random bits (the device's noise shares).

Why not floating point: a sampler that computes with rounded reals does not produce the
distribution the accountant assumes, and the difference can leak (Mironov 2012 on the Laplace
mechanism; Kairouz–Liu–Steinke 2021 §1 on why distributed DP must use integer noise). Here every
output is drawn *exactly* from Poisson(λ), λ a rational, using only uniform bits from the OS CSPRNG
(``secrets``) and integer comparisons.

Method: inversion with certified bounds and lazily refined precision (the bit-by-bit comparison of
Knuth & Yao 1976, as used for exact normal sampling by Karney, ACM TOMS 42(1), 2016). The output is
N = min{k : u < F(k)}, u uniform on [0, 1), F the Poisson CDF. We hold, for every k of a table,
integers lo_k ≤ 2^P F(k) ≤ hi_k (P bits), computed with MPFR (gmpy2) under directed rounding —
MPFR operations are correctly rounded, so rounding every step of e^{-λ} Π λ/j and of the
cumulative sums down (resp. up) gives rigorous lower (upper) bounds. We draw the first P bits of u
as an integer U, so u ∈ [U/2^P, (U+1)/2^P). If U + 1 ≤ lo_k then u < F(k) for sure; if U ≥ hi_k
then u ≥ F(k) for sure; two binary searches find N when these settle every k. When they do not
(probability about 2^{-P} per unresolved table entry near u, i.e. ≈ 2^{-120} at P = 128), more
bits of u are drawn and the bounds recomputed at higher precision — so the output distribution is
exactly Poisson(λ), with no truncation of either tail (the table is extended when u falls beyond
it). A draw costs one 128-bit ``secrets.randbits`` and two bisections in a table of ≈ λ + 40√λ
entries built once per λ (the device's λ is a task constant).

Alternatives considered: Poisson thinning (Poisson(⌈λ⌉) points each kept with probability λ/⌈λ⌉)
over an exact Poisson(1) sampler (Duchon & Duvignau 2016) is exact too but costs Θ(λ) random
integers per draw, and the shares here have λ between 10 and 10⁵ (λ = σ_s²/2 with σ_s² = μ/⌈γ l⌉):
up to 10⁵ × 40 draws per report, far slower than the Paillier encryption it precedes. The measured
cost of this sampler per report is in docs/benchmarks/ddp-linucb.md (``bench/ddp_device.py``).

Skellam: Sk(2λ) = Poisson(λ) − Poisson(λ), variance 2λ; shares add up exactly (Poisson is closed
under independent sums).
"""

from __future__ import annotations

import copy
import secrets
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache

import gmpy2

# Bits of u compared on the fast path.
FAST_BITS = 128
# Extra working precision of the MPFR bound computation above the bits compared.
GUARD_PRECISION = 64
# Bits added to u (and to the bounds' precision) per refinement.
REFINE_BITS = 64
# Denominator exponent of the rational λ: shares are rounded UP to a multiple of 2^-LAMBDA_BITS,
# so the noise is never smaller than the accountant's (more noise is post-processing).
LAMBDA_BITS = 20


def rational_rate(rate: float) -> Fraction:
    """λ as a dyadic rational ⌈rate · 2^20⌉ / 2^20 ≥ rate (never below the requested rate)."""
    if not (rate > 0 and rate < 2.0**40):
        raise ValueError(f"Poisson rate must be in (0, 2^40), got {rate}")
    scaled = Fraction(rate) * (1 << LAMBDA_BITS)
    return Fraction(-(-scaled.numerator // scaled.denominator), 1 << LAMBDA_BITS)


@lru_cache(maxsize=16)
def cdf_bounds(lam: Fraction, bits: int, last: int) -> tuple[list[int], list[int]]:
    """Integers lo_k ≤ 2^bits F(k) ≤ hi_k for k = 0..last, F the Poisson(λ) CDF (module doc).
    Cached: a device builds its λ's table once (callers must not mutate the lists)."""
    if lam <= 0:
        raise ValueError("λ must be positive")
    prec = bits + GUARD_PRECISION + max(lam.numerator.bit_length(), lam.denominator.bit_length())
    out: list[list[int]] = []
    for rounding, to_int in ((gmpy2.RoundDown, gmpy2.floor), (gmpy2.RoundUp, gmpy2.ceil)):
        with gmpy2.context(gmpy2.get_context(), precision=prec, round=rounding):
            lam_here = gmpy2.mpfr(lam.numerator) / lam.denominator
            # Lower bounds use e^{-λ_hi} ≤ e^{-λ}, upper bounds e^{-λ_lo} ≥ e^{-λ}.
            with gmpy2.context(gmpy2.get_context(), round=_opposite(rounding)):
                lam_other = gmpy2.mpfr(lam.numerator) / lam.denominator
            pmf = gmpy2.exp(-lam_other)
            cdf = pmf
            row = []
            for k in range(last + 1):
                if k:
                    pmf = pmf * lam_here / k
                    cdf = cdf + pmf
                row.append(int(to_int(gmpy2.mul_2exp(cdf, bits))))
        out.append(row)
    lo, hi = out
    return lo, [min(h, 1 << bits) for h in hi]


def _opposite(rounding: int) -> int:
    return gmpy2.RoundUp if rounding == gmpy2.RoundDown else gmpy2.RoundDown


def table_length(lam: Fraction) -> int:
    """Last index of the first table: λ + 40√λ + 64 (the tail beyond has mass < 2^-300)."""
    x = float(lam)
    return int(x + 40.0 * x**0.5 + 64)


class ExactPoisson:
    """Exact Poisson(λ) sampler for a rational λ from uniform bits (module docstring).

    ``randbits`` defaults to ``secrets.randbits`` (OS CSPRNG); tests inject a seeded source.
    ``fast_bits`` below 128 only serves to exercise the refinement path in tests.
    """

    def __init__(
        self,
        lam: Fraction,
        randbits: Callable[[int], int] = secrets.randbits,
        fast_bits: int = FAST_BITS,
    ) -> None:
        if not isinstance(lam, Fraction) or lam <= 0:
            raise ValueError("λ must be a positive Fraction")
        self.lam = lam
        self.randbits = randbits
        self.fast_bits = fast_bits
        self._last = table_length(lam)
        self._lo, self._hi = cdf_bounds(lam, fast_bits, self._last)

    def sample(self) -> int:
        u = self.randbits(self.fast_bits)
        found = _settle(u, self._lo, self._hi)
        if found is not None:
            return found
        return self._refine(u)

    def _refine(self, u: int) -> int:
        """Slow path: draw REFINE_BITS more bits of u, recompute bounds at that precision (and a
        longer table if u may lie beyond it), until every comparison is settled."""
        bits, last = self.fast_bits, self._last
        while True:
            u = (u << REFINE_BITS) | self.randbits(REFINE_BITS)
            bits += REFINE_BITS
            lo, hi = cdf_bounds(self.lam, bits, last)
            found = _settle(u, lo, hi)
            if found is not None:
                return found
            if u + 1 > lo[-1]:
                last = 2 * last + 64


def _settle(u: int, lo: list[int], hi: list[int]) -> int | None:
    """N if the bounds settle every comparison of u with F(k), else None.

    a = first k with U + 1 ≤ lo_k (u < F(k) certain); b = number of k with hi_k ≤ U (u ≥ F(k)
    certain, a prefix since hi is non-decreasing). N = a exactly when a = b < table length."""
    a = bisect_left(lo, u + 1)
    if a == len(lo):
        return None
    b = bisect_right(hi, u)
    return a if a == b else None


# Above this rate a Poisson(λ) is drawn as the sum of 2^k Poisson(λ/2^k) (exact: Poisson is
# closed under independent sums, and λ/2^k stays dyadic): the table costs O(λ) to build (≈ 1 s
# per 4·10⁴ here), which an aggregator's noise, λ ≈ 6·10⁵, would otherwise pay at every start.
MAX_TABLE_RATE = 1 << 14


class ExactSkellam:
    """Sk(2λ) = Poisson(λ) − Poisson(λ), exact, variance 2λ (λ = ``rational_rate(variance/2)``);
    a λ above ``MAX_TABLE_RATE`` is drawn as 2^k parts of λ/2^k each."""

    def __init__(
        self, variance: float, randbits: Callable[[int], int] = secrets.randbits
    ) -> None:
        self.lam = rational_rate(variance / 2.0)
        self.variance = float(2 * self.lam)
        self.parts = 1
        while self.lam / self.parts > MAX_TABLE_RATE:
            self.parts *= 2
        self._poisson = ExactPoisson(self.lam / self.parts, randbits)

    def sample(self) -> int:
        p = self._poisson
        return sum(p.sample() - p.sample() for _ in range(self.parts))

    def with_bits(self, randbits: Callable[[int], int]) -> ExactSkellam:
        """The same sampler (its tables shared, not rebuilt) drawing from ``randbits``."""
        twin = copy.copy(self)
        twin._poisson = copy.copy(self._poisson)
        twin._poisson.randbits = randbits
        return twin

    def sample_vector(self, n: int) -> list[int]:
        return [self.sample() for _ in range(n)]
