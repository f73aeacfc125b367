"""Device-side randomizers of the multi-armed tasks: one report per user, about one pulled arm.

A report row is a float array: ``[arm, value]``, or ``[arm, ε_t, value]`` for mechanisms with
per-user privacy levels (``heldp.py``): the user's own ε_t travels with her report, because the
analyzer needs it to weight the response (HeLDP Agents 2 and 4); or ``[arm, p, value]`` for a
sampling policy (Tsallis-INF in ``ldp-mab``), p being the probability the model the device held gave
the pulled arm, which the analyzer's importance weight ℓ/p needs (in the services a device may hold
an older model than the analyzer's latest). The arm and p are public: the device chose the arm from
the broadcast model, which depends on other users' reports only.

``values(r, eps, rng)`` is the mechanism itself on rewards of shape (n,) — or (n, K): the
simulator asks for the report each user would send for each arm it might pull, and the user's
randomness (one draw per user) is shared along the arm axis; only the pulled arm's entry is ever
used, so the law of what is sent is unchanged. ``randomize`` builds rows; ``to_bytes`` /
``from_bytes`` are the compact wire form (arm as uint16, ε as float64, the value as float64 or one
byte), and ``from_bytes`` refuses anything the honest mechanism cannot produce (wrong arm index,
non-finite numbers, ε outside [0, ε_max], a bit that is not 0/1), or produces with probability
below ``HONEST_REFUSAL`` = 2⁻⁴⁰ (a noisy value far outside the clean range): refusing is
post-processing, so privacy is unchanged, and a forged report cannot move a mean by 1e300.

This file holds the base class and the two mechanisms without per-user levels:
- ``IdentityArmRandomizer``: the raw reward (non-private UCB; AdaR-UCB's trusted analyzer).
- ``GaussianArmRandomizer``: Zheng et al. Alg. 1 for MAB (App. B.1): the user sends her loss plus
  N(0, σ²). With losses ℓ = 1/2 − r ∈ [−B, B], B = 1/2 (Thm 11), the sensitivity is 2B = 1; we
  send the centered reward y = r − 1/2 + Z (a sign flip of ℓ + Z, the same mechanism) and calibrate
  σ exactly with the analytic Gaussian mechanism (Balle–Wang 2018) instead of the paper's
  σ = 2B√(2 ln(1.25/δ))/ε (Theorem 2), which is looser and valid only for ε < 1.
"""

from __future__ import annotations

import functools
import math
import struct
from abc import ABC, abstractmethod
from statistics import NormalDist

import numpy as np

from privbandit.shared.core.accounting.gaussian import gaussian_sigma
from privbandit.shared.core.randomizers.base import unpack_row

HONEST_REFUSAL = 2.0**-40
MAX_ARMS = 65_535


def check_rewards(r: np.ndarray, bounded: bool) -> np.ndarray:
    """Finite rewards, in [0, 1] when ``bounded``."""
    r = np.asarray(r, dtype=float)
    if not np.isfinite(r).all():
        raise ValueError("rewards must be finite")
    if bounded and ((r < 0) | (r > 1)).any():
        raise ValueError("rewards must lie in [0, 1]")
    return r


def user_axis(noise: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Broadcast one draw per user (shape (n,)) against rewards of shape (n,) or (n, K)."""
    return noise if r.ndim == 1 else noise[:, None]


class ArmRandomizer(ABC):
    """Base: row layout, validation and wire form of one-arm reports."""

    exact = False
    per_user_epsilon = False
    value_code = "d"  # struct code of the value on the wire

    def __init__(self, K: int, bounded: bool = True, carries_probability: bool = False) -> None:
        if not 2 <= K <= MAX_ARMS:
            raise ValueError(f"need 2 <= K <= {MAX_ARMS}")
        self.K = int(K)
        self.bounded = bool(bounded)
        # Rows carry p, the pulled arm's probability under the device's model (sampling policies).
        self.carries_probability = bool(carries_probability)

    @property
    def width(self) -> int:
        return 2 + int(self.per_user_epsilon) + int(self.carries_probability)

    @property
    def probability_column(self) -> int | None:
        """Index of p in a row, or None when rows carry no probability."""
        return 1 + int(self.per_user_epsilon) if self.carries_probability else None

    @property
    def _format(self) -> str:
        middle = "d" * (self.width - 2)
        return "<H" + middle + self.value_code

    @abstractmethod
    def values(self, r: np.ndarray, eps: np.ndarray | None, rng: np.random.Generator
               ) -> np.ndarray:
        """The reported value for rewards r ((n,) or (n, K)); eps (n,) for per-user mechanisms."""

    def randomize(self, arms: np.ndarray, r: np.ndarray, rng: np.random.Generator,
                  eps: np.ndarray | None = None, prob: np.ndarray | None = None) -> np.ndarray:
        """Report rows for users who pulled ``arms`` (with probabilities ``prob`` when rows carry
        them) and received rewards ``r``."""
        arms = np.asarray(arms)
        if arms.ndim != 1 or ((arms < 0) | (arms >= self.K)).any():
            raise ValueError(f"arms must be indices in [0, {self.K})")
        if self.carries_probability and prob is None:
            raise ValueError("this task's reports carry the pulled arm's probability")
        v = self.values(np.asarray(r, dtype=float), eps, rng)
        cols = [arms.astype(float)]
        if self.per_user_epsilon:
            cols.append(np.asarray(eps, dtype=float))
        if self.carries_probability:
            cols.append(np.asarray(prob, dtype=float))
        return np.stack(cols + [v.astype(float)], axis=1)

    def check_row(self, row: np.ndarray) -> np.ndarray:
        """Validate one row (raises ValueError); returns it as floats."""
        row = np.asarray(row, dtype=float)
        if row.shape != (self.width,) or not np.isfinite(row).all():
            raise ValueError(f"a report is {self.width} finite numbers")
        arm = row[0]
        if arm != int(arm) or not 0 <= arm < self.K:
            raise ValueError(f"arm index must be an integer in [0, {self.K})")
        col = self.probability_column
        if col is not None and not 0 <= row[col] <= 1:
            raise ValueError("the pulled arm's probability must lie in [0, 1]")
        self._check_value(row)
        return row

    @abstractmethod
    def _check_value(self, row: np.ndarray) -> None: ...

    def to_bytes(self, row: np.ndarray) -> bytes:
        row = self.check_row(row)
        parts = [int(row[0])] + [float(x) for x in row[1:-1]]
        last = int(row[-1]) if self.value_code == "B" else float(row[-1])
        return struct.pack(self._format, *parts, last)

    def from_bytes(self, data: bytes) -> np.ndarray:
        return self.check_row(unpack_row(self._format, data))


class IdentityArmRandomizer(ArmRandomizer):
    """The raw reward (no local privacy): ``ucb`` and the trusted analyzer of ``adar-ucb``."""

    exact = True

    def values(self, r: np.ndarray, eps: np.ndarray | None, rng: np.random.Generator
               ) -> np.ndarray:
        return check_rewards(r, self.bounded)

    def _check_value(self, row: np.ndarray) -> None:
        check_rewards(row[-1:], self.bounded)


class GaussianArmRandomizer(ArmRandomizer):
    """Zheng et al. Alg. 1 (App. B.1): y = r − 1/2 + N(0, σ²), (ε, δ)-LDP at sensitivity 1."""

    SENSITIVITY = 1.0  # 2B with B = 1/2 (Thm 11): |(r − 1/2) − (r' − 1/2)| ≤ 1 for r, r' ∈ [0, 1]

    def __init__(self, K: int, epsilon: float, delta: float,
                 carries_probability: bool = False) -> None:
        super().__init__(K, bounded=True, carries_probability=carries_probability)
        self.epsilon, self.delta = float(epsilon), float(delta)
        self.paper_sigma = 2 * 0.5 * math.sqrt(2 * math.log(1.25 / self.delta)) / self.epsilon

    # On first use: the analytic calibration needs scipy (a second of start-up), which a
    # service that builds the randomizer only for its row length never needs.
    @functools.cached_property
    def sigma(self) -> float:
        """σ of Balle–Wang's analytic calibration at (ε, δ), sensitivity 1."""
        return gaussian_sigma(self.epsilon, self.delta, self.SENSITIVITY)

    @functools.cached_property
    def report_bound(self) -> float:
        """0.5 + τσ with P(|N(0, 1)| > τ) = HONEST_REFUSAL."""
        # norm.isf(q) = −Φ⁻¹(q): the standard library's normal quantile (Wichura's AS 241,
        # within a few ulps of scipy's ndtri), as services load this module and need no scipy.
        tail = -NormalDist().inv_cdf(HONEST_REFUSAL / 2)
        return 0.5 + tail * self.sigma

    def calibrate(self) -> None:
        """σ and the report bound now (``base.calibrate``)."""
        _ = self.report_bound

    def values(self, r: np.ndarray, eps: np.ndarray | None, rng: np.random.Generator
               ) -> np.ndarray:
        r = check_rewards(r, True)
        n: int = r.shape[0]  # typed, so that numpy's stubs pick the array-valued overload
        z = rng.standard_normal(n)
        return r - 0.5 + self.sigma * user_axis(z, r)

    def _check_value(self, row: np.ndarray) -> None:
        # |y| ≤ 1/2 is always admissible (the bound is 1/2 + τσ): such a row, e.g. the zero row
        # ``hpke.row_length`` measures, needs no σ.
        if abs(row[-1]) > 0.5 and abs(row[-1]) > self.report_bound:
            raise ValueError("report outside what the mechanism produces "
                             f"(|y| > 1/2 + {self.report_bound - 0.5:.3g})")
