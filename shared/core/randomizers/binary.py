"""The 0/1 encoder and randomizer of Garcelon et al. (ALT 2022), Algorithms 2 and 3.

Encoder (Alg. 2). For a feature x (‖x‖ ≤ L) and reward r ∈ [0, 1] the n_c = d(d+3)/2 coordinates
    ỹ = r x / (2L) + 1/2            (d entries)
    z̃ = x xᵀ / (2L²) + 1/2          (upper triangle incl. diagonal, d(d+1)/2 entries)
all lie in [0, 1]. Each value v is written as m bits by stochastic unary rounding: with
μ = ⌈v m⌉ the bits are 1 for k < μ, Ber(m v − μ + 1) for k = μ, 0 for k > μ, so
E[Σ_k b_k] = m v.

Randomizer R_p^{0/1} (Alg. 3). Each bit is kept with probability 1 − p and replaced by a fair coin
with probability p, with p = 2 / (exp(2ε0 / (m d (d+3))) + 1). One bit then has likelihood ratio
(1 − p/2)/(p/2) = e^{2ε0/(m d(d+3))}, and the m·d(d+3)/2 independent bits of one report compose to
exactly ε0-LDP (Prop. 4 / Prop. 12).

Estimator (Alg. 1 step b, Eqs. 11–12). Summing n reports gives counts Z_c = Σ_reports Σ_k b̃. Since
E[b̃] = (1 − p) b + p/2,
    Σ_reports v_c  ≈  (Z_c − n m p/2) / (m (1 − p))
is unbiased, and so are Σ r x = 2L (Σ ỹ − n/2) and Σ x xᵀ = 2L² (Σ z̃ − n/2). The paper writes
the same thing in units of Σ x xᵀ/(2L²); we keep raw units so that every policy shares one ridge
solver (the factor 1/L in θ̃ = L⁻¹ Ṽ⁻¹ B̃ of Alg. 1 is exactly this change of units).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from privbandit.shared.core.randomizers.base import (
    Estimate,
    SumEncoding,
    check_inputs,
    settle,
    symmetric_from_upper,
    upper_indices,
)


def n_coords(d: int) -> int:
    """Number of encoded coordinates d + d(d+1)/2 = d(d+3)/2."""
    return d * (d + 3) // 2


def flip_probability(eps0: float, d: int, m: int) -> float:
    """p = 2 / (exp(2ε0/(m d(d+3))) + 1) (Alg. 1 / Alg. 2); written with expm1-safe tanh.

    2/(e^a + 1) = 1 − tanh(a/2), which stays accurate when a is small (p → 1).
    """
    if eps0 <= 0:
        raise ValueError("eps0 must be > 0")
    a = 2.0 * eps0 / (m * d * (d + 3))
    return float(1.0 - math.tanh(a / 2.0))


def encode_values(x: np.ndarray, r: np.ndarray, L: float) -> np.ndarray:
    """The values (ỹ, upper(z̃)) in [0, 1], shape (n, d(d+3)/2) (Alg. 2, first line)."""
    d = x.shape[1]
    y = r[:, None] * x / (2 * L) + 0.5
    iu = upper_indices(d)
    z = x[:, iu[0]] * x[:, iu[1]] / (2 * L * L) + 0.5
    return np.clip(np.concatenate([y, z], axis=1), 0.0, 1.0)


def unary_bits(values: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """Stochastic unary rounding of values in [0, 1] to m bits each: shape (n, c, m), uint8.

    With u = v m, f = ⌊u⌋: bits 1..f are 1, bit f+1 is Ber(u − f), the rest 0 — the same law as
    Alg. 2's μ = ⌈v m⌉, p_j = m v − μ + 1 (they differ only in naming when u is an integer).
    """
    u = values * m
    f = np.floor(u)
    frac = u - f
    last = (rng.random(values.shape) < frac).astype(np.int64)
    count = (f.astype(np.int64) + last)  # Σ_k b_k, in 0..m
    k = np.arange(1, m + 1)
    return (k[None, None, :] <= count[:, :, None]).astype(np.uint8)


def randomized_response(bits: np.ndarray, p: float, rng: np.random.Generator) -> np.ndarray:
    """R_p^{0/1} on every bit (Alg. 3): keep w.p. 1 − p, else a fair coin."""
    replace = rng.random(bits.shape) < p
    coin = (rng.random(bits.shape) < 0.5).astype(np.uint8)
    return np.where(replace, coin, bits).astype(np.uint8)


def output_probability(out: np.ndarray, bits: np.ndarray, p: float) -> np.ndarray:
    """Exact P(R_p^{0/1}(bits) = out) for bit arrays of shape (..., n): Π (1 − p/2 or p/2)."""
    same = np.asarray(out) == np.asarray(bits)
    return np.prod(np.where(same, 1 - p / 2, p / 2), axis=-1)


class BinaryRandomizer:
    """M_LDP of Garcelon Alg. 2 with R_p^{0/1}; rows are the m·d(d+3)/2 randomised bits."""

    exact = False

    def __init__(self, d: int, eps0: float | Callable[[], float], m: int = 1, L: float = 1.0,
                 batch_size: int | None = None) -> None:
        """``eps0``: a number, or a function that finds it (a central target's ε0*(l) is a
        search, seconds under the sum-only accountant): called once, on first use of ε0 or p —
        a shuffler that builds the randomizer for its row length never needs it."""
        if d < 1 or m < 1 or L <= 0:
            raise ValueError("need d >= 1, m >= 1, L > 0")
        self.d, self.m, self.L = d, m, float(L)
        self._eps0 = eps0
        if not callable(eps0):
            flip_probability(eps0, d, m)  # a number is checked at once
        # The batch length ε0 was sized for, under a growing schedule (sblb, issue 22): a device
        # states it with its report so the shuffler can refuse one sized for a longer batch than
        # its next; None when ε0 is not tied to a length.
        self.batch_size = batch_size
        self.c = n_coords(d)

    @functools.cached_property
    def eps0(self) -> float:
        self._eps0 = settle(self._eps0)
        return self._eps0

    @functools.cached_property
    def p(self) -> float:
        return flip_probability(self.eps0, self.d, self.m)

    def calibrate(self) -> None:
        """ε0 and p now (``base.calibrate``)."""
        _ = self.p

    @property
    def width(self) -> int:
        return self.c * self.m

    def randomize(self, x: np.ndarray, r: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x, r = check_inputs(x, r, self.d, self.L)
        bits = unary_bits(encode_values(x, r, self.L), self.m, rng)
        return randomized_response(bits, self.p, rng).reshape(x.shape[0], self.width)

    def counts(self, rows: np.ndarray) -> np.ndarray:
        """Per-report coordinate counts Σ_k b̃_k ∈ 0..m, shape (n, c) — what secure-sum encrypts."""
        return rows.reshape(rows.shape[0], self.c, self.m).sum(axis=2, dtype=np.int64)

    def sum_encoding(self) -> SumEncoding:
        """c counts of 0..m per report (``base.Summable``)."""
        return SumEncoding(self.c, self.m)

    def summand(self, row: np.ndarray) -> np.ndarray:
        """One report's coordinate counts: what it adds to a batch sum (``base.Summable``)."""
        return self.counts(np.asarray(row)[None, :])[0]

    def sufficient(self, rows: np.ndarray) -> np.ndarray:
        """Batch counts Z (length c): the statistic the paper's shuffler releases."""
        return self.counts(rows).sum(axis=0)

    def estimate(self, stat: np.ndarray, n: int) -> Estimate:
        """Debiased Σ r x and Σ x xᵀ from counts of n reports (Alg. 1 step b, Eq. 12)."""
        stat = np.asarray(stat, dtype=float)
        if stat.shape != (self.c,):
            raise ValueError(f"expected {self.c} counts, got shape {stat.shape}")
        v = (stat - n * self.m * self.p / 2) / (self.m * (1 - self.p))  # ≈ Σ values
        u = 2 * self.L * (v[: self.d] - n / 2)
        G = symmetric_from_upper(2 * self.L**2 * (v[self.d :] - n / 2), self.d)
        return Estimate(n=n, G=G, u=u)

    def value_proxy(self) -> float:
        """Sub-Gaussian proxy of one report's estimation error on one value v ∈ [0, 1].

        The error is Σ_k (b̃_k − E[b̃_k | b_k]) / (m(1−p)) + (Σ_k b_k − m v)/m: m randomized-response
        terms in intervals of length 1/(m(1−p)) and one rounding term in an interval of length
        1/m, a martingale of bounded increments, so by Hoeffding the proxy is
        1/(4 m (1−p)²) + 1/(4 m²). (Eq. 13–15 bound the same three sums.)
        """
        return 1.0 / (4 * self.m * (1 - self.p) ** 2) + 1.0 / (4 * self.m**2)

    def matrix_proxy(self) -> float:
        return (2 * self.L**2) ** 2 * self.value_proxy()

    def vector_proxy(self) -> float:
        return (2 * self.L) ** 2 * self.value_proxy()

    def to_bytes(self, row: np.ndarray) -> bytes:
        row = np.asarray(row)
        if row.shape != (self.width,) or not np.isin(row, (0, 1)).all():
            raise ValueError(f"a report is {self.width} bits in {{0,1}}")
        return np.packbits(row.astype(np.uint8)).tobytes()

    def from_bytes(self, data: bytes) -> np.ndarray:
        if len(data) != (self.width + 7) // 8:
            raise ValueError(f"a report is {(self.width + 7) // 8} bytes, got {len(data)}")
        bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8))
        if bits[self.width :].any():
            raise ValueError("padding bits must be zero")
        return bits[: self.width]
