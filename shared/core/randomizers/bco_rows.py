"""Report rows of bandit-convex-optimisation tasks in the services (issue 12, item 3).

A row is ``[version, u_1 … u_d, value]``: the model version the device played from, its direction u
(unit vector, drawn on the device), and the reported value — Zheng et al. Alg. 1 line 5's noisy
loss clip(f(x), 0, B) + N(0, σ²) for one point, Alg. 2 line 5's noisy difference
clip(f(x₁) − f(x₂), ±G‖x₁ − x₂‖) + nᵀ(x₁ − x₂) for two points (``shared.core.randomizers.bco``,
where the exact (ε, δ) is stated and tested). The version and u are independent of the loss (the
device draws u before the user acts), so they cost no privacy; the analyzer needs them to rebuild
the gradient estimate (``shared.core.policies.bco_service``).

Wire form (little-endian): version as uint32, then d + 1 float64. ``from_bytes`` refuses what the
honest device cannot produce: non-finite numbers, ‖u‖ off 1 by more than ``UNIT_TOLERANCE``, a value
outside the clean range widened by τσ with τ the two-sided normal quantile at ``HONEST_REFUSAL`` =
2⁻⁴⁰ (as the Gaussian arm randomizer's check); refusing is post-processing, so privacy is unchanged.
The version's freshness is the policy's check (``BCOServicePolicy.admit_row``).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable

# norm.isf(q) = −Φ⁻¹(q): the standard library's normal quantile (Wichura's AS 241, within a few
# ulps of scipy's ndtri), as services load this module and need no scipy.
from statistics import NormalDist

import numpy as np

from privbandit.shared.core.randomizers.arms import HONEST_REFUSAL
from privbandit.shared.core.randomizers.base import settle, versioned_row
from privbandit.shared.core.randomizers.bco import OnePointReport, TwoPointReport

UNIT_TOLERANCE = 1e-9
TAIL = -NormalDist().inv_cdf(HONEST_REFUSAL / 2)


class BCORowRandomizer:
    """Row layout, device-side report and validation of one BCO task's reports."""

    exact = False

    def __init__(self, d: int, points: int, *, loss_bound: float, lipschitz: float,
                 rho: float, sigma: float | Callable[[], float],
                 report: OnePointReport | TwoPointReport | None) -> None:
        """``sigma``: a number, or the function that calibrates it, called on first use of σ
        (a shuffler that builds the randomizer for a row's width never needs it)."""
        if points not in (1, 2):
            raise ValueError("a BCO user plays one or two points")
        self.d, self.points = int(d), int(points)
        self.B, self.G, self.rho = float(loss_bound), float(lipschitz), float(rho)
        self._sigma = sigma
        self.report = report  # None: the non-private baseline sends the clean value
        self.L = 1.0
        self._format = "<I" + "d" * (self.d + 1)

    @functools.cached_property
    def sigma(self) -> float:
        """Of the loss (one point) or per unit of ‖x₁ − x₂‖ (two)."""
        self._sigma = settle(self._sigma)
        return self._sigma

    @functools.cached_property
    def value_range(self) -> tuple[float, float]:
        """The admissible reported values: the clean range ± τ times the noise's σ."""
        if self.points == 1:
            lo, hi = 0.0, self.B
            slack = TAIL * self.sigma
        else:
            # |f(x₁) − f(x₂)| ≤ G‖x₁ − x₂‖ = 2ρG‖u‖: the device clips at G‖x₁ − x₂‖ computed
            # from its u, whose norm is 1 only up to UNIT_TOLERANCE (as ``check_row`` accepts).
            hi = 2.0 * self.rho * self.G * (1.0 + UNIT_TOLERANCE)
            lo = -hi
            slack = TAIL * 2.0 * self.rho * self.sigma  # nᵀ(x₁ − x₂) ~ N(0, 4ρ²σ²)
        return (lo - slack, hi + slack)

    def calibrate(self) -> None:
        """σ, the admissible values and the report's σ now (``base.calibrate``)."""
        _ = self.value_range
        if self.report is not None:
            _ = self.report.sigma

    @property
    def width(self) -> int:
        return self.d + 2

    def value(self, losses: np.ndarray, points: np.ndarray, rng: np.random.Generator) -> float:
        """The reported value for the user's losses at the point(s) she played."""
        losses = np.asarray(losses, dtype=float)
        if self.points == 1:
            if self.report is None:
                return float(np.clip(losses[0], 0.0, self.B))
            assert isinstance(self.report, OnePointReport), "one point, one-point report"
            return float(self.report.report(losses[:1], rng)[0])
        if self.report is None:
            bound = self.G * float(np.linalg.norm(points[0] - points[1]))
            return float(np.clip(losses[0] - losses[1], -bound, bound))
        assert isinstance(self.report, TwoPointReport), "two points, two-point report"
        return float(self.report.report(losses[:1], losses[1:2], points[:1], points[1:2], rng)[0])

    def row(self, version: int, u: np.ndarray, value: float) -> np.ndarray:
        return np.concatenate([[float(version)], np.asarray(u, dtype=float), [value]])

    def check_row(self, row: np.ndarray) -> np.ndarray:
        """Validate one row (raises ValueError); returns it as floats."""
        row = versioned_row(row, self.width, "the model version must be a non-negative integer")
        if abs(float(np.linalg.norm(row[1:-1])) - 1.0) > UNIT_TOLERANCE:
            raise ValueError("the direction u must be a unit vector")
        lo, hi = self.value_range
        if not lo <= row[-1] <= hi:
            raise ValueError(f"value {row[-1]!r} outside what the device produces [{lo:.6g}, "
                             f"{hi:.6g}]")
        return row

    def to_bytes(self, row: np.ndarray) -> bytes:
        row = np.asarray(row, dtype=float)
        if row.shape != (self.width,) or not np.isfinite(row).all():
            raise ValueError(f"a report is {self.width} finite numbers")
        return struct.pack(self._format, int(row[0]), *(float(x) for x in row[1:]))

    def from_bytes(self, data: bytes) -> np.ndarray:
        size = struct.calcsize(self._format)
        if len(data) != size:
            raise ValueError(f"a report is {size} bytes, got {len(data)}")
        return self.check_row(np.array(struct.unpack(self._format, data), dtype=float))
