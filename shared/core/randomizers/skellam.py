"""Device side of distributed DP (``ddp-linucb``): clip, scale, round, add a Skellam share.

A user with feature x (‖x‖ ≤ L) and reward r ∈ [0, 1] holds the statistics
v = (upper(x xᵀ), r x) ∈ ℝⁿ, n = d(d+3)/2. The device

1. clips: x to ‖x‖ ≤ L, r to [0, 1], then v to ‖v‖₂ ≤ C = √(L⁴ + L²) (‖upper(x xᵀ)‖₂ ≤ ‖x xᵀ‖_F =
   ‖x‖² and ‖r x‖ ≤ L, so valid inputs are never changed);
2. scales by s and rounds each coordinate of y = s v to ⌊y_i⌋ + Bernoulli(y_i − ⌊y_i⌋): unbiased,
   E z = y. Norm after rounding (Kairouz–Liu–Steinke 2021, the deterministic bound of §4 / their
   ``bound_1``): every coordinate moves by less than 1, so ‖z − y‖₂ < √n and
   ‖z‖₂ ≤ B = s C + √n, always — no conditional resampling, so rounding stays exactly unbiased;
3. adds to every coordinate an independent Skellam share Sk(σ_s²) = Poisson(λ) − Poisson(λ),
   λ = σ_s²/2 a dyadic rational (``exact_poisson.rational_rate``, never below the requested rate).

The analyzer learns S = Σ_i z_i + Σ_i (shares) for the l users of a batch and estimates
Σ v_i by S / s (unbiased: rounding and noise have mean zero). Sensitivity for the accountant
(``accounting.skellam``): replacing one user moves S by z − z' with ‖z − z'‖₂ ≤ min(2B,
s Δ_v + 2√n), Δ_v = √(2L⁴ + 4L²) the pair bound of the clean statistics
(``randomizers.gaussian.report_sensitivity``); Δ₁ = min(√n Δ₂, Δ₂²).

Two samplers, one distribution: the simulator draws rounding and shares from an injected
``numpy.random.Generator`` (``randomize``: numpy's Poisson sampler, a floating-point
approximation, fine for measuring regret); a device uses ``device_report``, which draws every bit
from the OS CSPRNG and samples Poisson exactly (``exact_poisson``) — the only form whose output
distribution the ledger's guarantee covers.

Noise proxies (for the confidence widths of the ``paper`` regularizer): per report and entry of
(G, u) in real units, rounding is bounded in an interval of length 1/s (Hoeffding proxy 1/(4s²)),
and a Skellam share of variance σ² has E e^{tX} = exp(σ²(cosh t − 1)) ≤ exp(c σ² t²/2) for
|t| ≤ 1 with c = 2(cosh 1 − 1) ≈ 1.086 — a sub-Gaussian proxy c σ² for deviations up to c σ²,
which is where the widths' deviations lie for the variances used (σ² ≫ log terms).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from functools import cached_property, lru_cache

import numpy as np

from shared.core.accounting.ledger import PrivacyLedger
from shared.core.accounting.skellam import (
    ddp_ledger,
    honest_shares,
    replacement_sensitivities,
    skellam_mu,
)
from shared.core.randomizers.base import Estimate, check_inputs, symmetric_from_upper, upper_indices
from shared.core.randomizers.exact_poisson import ExactSkellam, rational_rate
from shared.core.randomizers.gaussian import report_sensitivity

# Sub-Gaussian factor of a Skellam share for |t| ≤ 1 (module docstring).
SKELLAM_SUBGAUSSIAN = 2.0 * (math.cosh(1.0) - 1.0)
# Relative slack on the norm bounds for floating-point error in computing s·v.
FLOAT_SLACK = 1e-9


def n_coords(d: int) -> int:
    """n = d(d+1)/2 + d = d(d+3)/2 coordinates of (upper(x xᵀ), r x)."""
    return d * (d + 3) // 2


def clean_statistics(x: np.ndarray, r: np.ndarray, L: float) -> np.ndarray:
    """Rows v = (upper(x xᵀ), r x) after clipping x to ‖x‖ ≤ L, r to [0, 1], v to √(L⁴ + L²)."""
    x = np.asarray(x, dtype=float)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = x * np.minimum(1.0, L / np.maximum(norms, 1e-300))
    r = np.clip(np.asarray(r, dtype=float), 0.0, 1.0)
    iu = upper_indices(x.shape[1])
    v = np.concatenate([x[:, iu[0]] * x[:, iu[1]], r[:, None] * x], axis=1)
    clip = math.sqrt(L**4 + L**2)
    vn = np.linalg.norm(v, axis=1, keepdims=True)
    return v * np.minimum(1.0, clip / np.maximum(vn, 1e-300))


def skellam_tail_bound(variance: float, prob: float) -> float:
    """t with P(|X| ≥ t) ≤ prob for X a symmetric Skellam (or a sum of independent ones) of total
    variance V: Bernstein's inequality for Poisson variables, log E e^{t(P−λ)} ≤ λt²/(2(1 − t/3)),
    applied to both Poisson parts gives P(|X| ≥ t) ≤ 2 exp(−t²/(2(V + t/3))); solved for t."""
    if not (variance > 0 and 0 < prob < 1):
        raise ValueError("need variance > 0 and prob in (0, 1)")
    a = math.log(2.0 / prob)
    return a / 3.0 + math.sqrt(a * a / 9.0 + 2.0 * a * variance)


def exact_bernoulli(p: float, randbelow: Callable[[int], int] = secrets.randbelow) -> int:
    """1 with probability exactly p (a float in [0, 1), a dyadic rational num/2^k)."""
    num, den = p.as_integer_ratio()
    return int(randbelow(den) < num)


def batch_noise_sd(d: int, epsilon: float, delta: float, scale: float = 128.0,
                   L: float = 1.0) -> float:
    """σ_b = √μ / s: the standard deviation, in the statistics' real units, of the central
    Skellam noise one batch's sum carries per coordinate at (ε, δ) (μ does not depend on the
    batch length; only its split into shares does)."""
    _, l1, l2 = rounded_sensitivities(d, scale, L)
    return math.sqrt(central_mu(epsilon, delta, l1, l2)) / scale


@lru_cache(maxsize=256)
def central_mu(epsilon: float, delta: float, l1: float, l2: float) -> float:
    """``accounting.skellam.skellam_mu``, remembered: a batch schedule builds one randomizer per
    batch length, all with the same target μ (a bisection over the accountant each time)."""
    return skellam_mu(epsilon, delta, l1, l2)


def rounded_sensitivities(d: int, scale: float, L: float) -> tuple[float, float, float]:
    """(B, Δ₁, Δ₂): the norm bound of one user's rounded statistics and the replacement
    sensitivities of their sum (module docstring)."""
    n = n_coords(d)
    root_n = math.sqrt(n)
    norm_bound = scale * math.sqrt(L**4 + L**2) * (1 + FLOAT_SLACK) + root_n
    pair = scale * report_sensitivity(L) * (1 + FLOAT_SLACK) + 2 * root_n
    l1, l2 = replacement_sensitivities(norm_bound, n, pair)
    return norm_bound, l1, l2


class SkellamRandomizer:
    """Clip, scale by s, round unbiasedly, add Sk(σ_s²) per coordinate (module docstring).

    σ_s² = μ / ⌈γ l⌉ where μ is the smallest central Skellam variance giving (ε, δ) for the
    rounded statistics' sensitivities (``accounting.skellam.skellam_mu``).
    """

    exact = False

    def __init__(
        self,
        d: int,
        epsilon: float,
        delta: float,
        batch_size: int,
        honest_fraction: float = 1.0,
        scale: float = 128.0,
        L: float = 1.0,
    ) -> None:
        if d < 1 or not L > 0 or not (scale >= 1 and math.isfinite(scale)):
            raise ValueError("need d >= 1, L > 0, scale >= 1")
        self.d, self.L, self.scale = d, float(L), float(scale)
        self.epsilon, self.delta = float(epsilon), float(delta)
        self.batch_size, self.honest_fraction = int(batch_size), float(honest_fraction)
        self.n = n_coords(d)
        self._iu = upper_indices(d)
        self.n_upper = d * (d + 1) // 2
        self.clip = math.sqrt(self.L**4 + self.L**2)
        self.norm_bound, self.l1, self.l2 = rounded_sensitivities(d, self.scale, self.L)
        self.mu_target = central_mu(epsilon, delta, self.l1, self.l2)
        self.honest = honest_shares(self.honest_fraction, self.batch_size)
        self.lam = rational_rate(self.mu_target / (2.0 * self.honest))
        self.share_variance = float(2 * self.lam)
        # Packing offset O (``shared.crypto.slots``): an honest value |z_i + share| exceeds O with
        # probability below 2⁻⁶⁴ per report (|z_i| ≤ B; Bernstein tail of the share, union over
        # the n coordinates).
        self.offset = math.ceil(
            self.norm_bound + skellam_tail_bound(self.share_variance, 2.0**-64 / self.n)
        )

    def sum_bound(self, count: int) -> float:
        """|S_j| an honest sum of ``count`` reports exceeds with probability below 2⁻⁶⁴ (per
        batch, union over coordinates): count·B plus the tail of count shares. The analyzer
        refuses a decoded sum beyond it (``slots.unpack_signed``)."""
        return count * self.norm_bound + skellam_tail_bound(
            count * self.share_variance, 2.0**-64 / self.n
        )

    @property
    def width(self) -> int:
        return self.n

    def ledger(self) -> PrivacyLedger:
        return ddp_ledger(
            self.share_variance, self.honest_fraction, self.batch_size, self.l1, self.l2,
            self.delta, scale=self.scale,
        )

    # -- simulator path (injected numpy Generator) ------------------------------------------
    def round_rows(self, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Unbiased randomized rounding of every entry of y to an adjacent integer."""
        low = np.floor(y)
        return (low + (rng.random(y.shape) < (y - low))).astype(np.int64)

    def randomize(self, x: np.ndarray, r: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x, r = check_inputs(x, r, self.d, self.L)
        z = self.round_rows(self.scale * clean_statistics(x, r, self.L), rng)
        lam = float(self.lam)
        return z + rng.poisson(lam, size=z.shape) - rng.poisson(lam, size=z.shape)

    # -- device path (OS CSPRNG, exact sampling) ---------------------------------------------
    @cached_property
    def exact_noise(self) -> ExactSkellam:
        """The exact share sampler (its CDF table is built once, on first use)."""
        return ExactSkellam(self.share_variance)

    def rounded(
        self, x: np.ndarray, r: float, randbelow: Callable[[int], int] = secrets.randbelow
    ) -> list[int]:
        """One user's rounded statistics z (no noise), every coin from the CSPRNG."""
        xs, rs = check_inputs(np.asarray(x, dtype=float)[None, :], np.array([r]), self.d, self.L)
        y = self.scale * clean_statistics(xs, rs, self.L)[0]
        out = []
        for value in y.tolist():
            low = math.floor(value)
            out.append(low + exact_bernoulli(value - low, randbelow))
        if math.sqrt(sum(v * v for v in out)) > self.norm_bound:
            raise AssertionError("rounded statistics exceed the stated norm bound")
        return out

    def device_report(self, x: np.ndarray, r: float) -> list[int]:
        """What a device packs and encrypts: rounded statistics plus an exact Skellam share per
        coordinate. A value beyond the packing offset ±O (probability below 2⁻⁶⁴ per report)
        gets its share drawn again: the share's law is then Skellam truncated at total variation
        below 2⁻⁶⁴ per report, which adds at most l·2⁻⁶⁴ (< 10⁻¹⁵) to the central δ."""
        z = self.rounded(x, r)
        noise = self.exact_noise
        out = []
        for v in z:
            value = v + noise.sample()
            while abs(value) > self.offset:
                value = v + noise.sample()
            out.append(value)
        return out

    # -- analyzer side -------------------------------------------------------------------------
    def sufficient(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray(rows, dtype=np.int64).sum(axis=0)

    def estimate(self, stat: np.ndarray, n: int) -> Estimate:
        """(G, u) ≈ (Σ x xᵀ, Σ r x) from the decoded batch sum S: S / s, upper triangle mirrored."""
        values = np.asarray(stat, dtype=float)
        if values.shape != (self.n,):
            raise ValueError(f"expected a statistic of length {self.n}, got {values.shape}")
        values = values / self.scale
        return Estimate(
            n=n, G=symmetric_from_upper(values[: self.n_upper], self.d), u=values[self.n_upper :]
        )

    def _proxy(self) -> float:
        return (0.25 + SKELLAM_SUBGAUSSIAN * self.share_variance) / self.scale**2

    def matrix_proxy(self) -> float:
        return self._proxy()

    def vector_proxy(self) -> float:
        return self._proxy()

    def to_bytes(self, row: np.ndarray) -> bytes:
        row = np.asarray(row)
        if row.shape != (self.n,) or row.dtype.kind not in "iu":
            raise ValueError(f"a report is {self.n} integers")
        return row.astype("<i8").tobytes()

    def from_bytes(self, data: bytes) -> np.ndarray:
        """Decode and refuse entries an honest report reaches with probability below 2⁻⁴⁰:
        |z_i| ≤ B plus the share's Bernstein tail (refusing is post-processing)."""
        if len(data) != 8 * self.n:
            raise ValueError(f"a report is {8 * self.n} bytes, got {len(data)}")
        row = np.frombuffer(data, dtype="<i8").astype(np.int64)
        limit = self.norm_bound + skellam_tail_bound(self.share_variance, 2.0**-40 / self.n)
        if (np.abs(row) > limit).any():
            raise ValueError(f"report entry beyond what the mechanism produces (|z| ≤ {limit:.0f})")
        return row
