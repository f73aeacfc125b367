"""The local-randomizer interface (device side) and the matching estimator (analyzer side).

A randomizer turns a user's chosen feature vector x (‖x‖ ≤ L) and reward r ∈ [0, 1] into a report
row. Reports of many users form a 2-D array (one row per report), so the simulator randomises a
whole window of users in one call and the analyzer ingests one shuffled batch in one call.

The analyzer never looks at rows individually for the noisy mechanisms: it sums them
(``sufficient``) and turns the sum into unbiased estimates of G = Σ x xᵀ and u = Σ r x
(``estimate``). The variance proxies exported by each randomizer feed the confidence widths in
``shared.core.confidence``.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np


@functools.lru_cache(maxsize=64)
def upper_indices(d: int) -> tuple[np.ndarray, np.ndarray]:
    """Row/column indices of the upper triangle (diagonal included) of a d×d matrix.

    Remembered per d, read-only: every report row and estimate of the linear randomizers asks
    for them (``np.triu_indices`` builds a d×d mask each time: 4 % of the in-process tests'
    CPU)."""
    rows, cols = np.triu_indices(d)
    rows.flags.writeable = False
    cols.flags.writeable = False
    return rows, cols


def symmetric_from_upper(vals: np.ndarray, d: int) -> np.ndarray:
    """Rebuild a symmetric d×d matrix from its upper-triangle entries (row-major order)."""
    iu = upper_indices(d)
    out = np.zeros((d, d))
    out[iu] = vals
    out[(iu[1], iu[0])] = vals
    return out


@dataclass(frozen=True)
class Estimate:
    """Unbiased estimates from ``n`` reports: G ≈ Σ x xᵀ (symmetric d×d) and u ≈ Σ r x."""

    n: int
    G: np.ndarray
    u: np.ndarray


class Randomizer(Protocol):
    """A local randomizer with its analyzer-side estimator.

    ``exact`` is True when reports carry the raw data (central mode): then the analyzer may use
    each row (e.g. for per-report rare-switching checks) and the estimate has no noise.
    """

    d: int
    L: float
    exact: bool

    @property
    def width(self) -> int: ...

    def randomize(self, x: np.ndarray, r: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Report rows (n, width) for features x (n, d) and rewards r (n,)."""
        ...

    def sufficient(self, rows: np.ndarray) -> np.ndarray:
        """The batch statistic the analyzer needs (a sum over rows)."""
        ...

    def estimate(self, stat: np.ndarray, n: int) -> Estimate:
        """Unbiased (G, u) increments from a batch statistic of ``n`` reports."""
        ...

    def matrix_proxy(self) -> float:
        """Sub-Gaussian variance proxy of one report's noise on each entry of G (0 if exact)."""
        ...

    def vector_proxy(self) -> float:
        """Sub-Gaussian variance proxy of one report's noise on each entry of u (0 if exact)."""
        ...

    def to_bytes(self, row: np.ndarray) -> bytes:
        """Compact wire form of one report row."""
        ...

    def from_bytes(self, data: bytes) -> np.ndarray:
        """Inverse of ``to_bytes``; raises ValueError on malformed input."""
        ...


def settle(value: float | Callable[[], float]) -> float:
    """A randomizer's parameter given as a number or as the function that finds it (called
    once, on first use: ``BinaryRandomizer.eps0``, ``BCORowRandomizer.sigma``)."""
    return float(value() if callable(value) else value)


def calibrate(randomizer: object) -> None:
    """Compute now what a randomizer calibrates on first use — its noise (σ, by the analytic
    Gaussian calibration, which imports scipy) or its ε0 (a central target's, a search of seconds
    under the sum-only accountant): a device does so at start, off its request path. A randomizer
    without a ``calibrate`` method has nothing to compute."""
    method = getattr(randomizer, "calibrate", None)
    if method is not None:
        method()


# Relative slack on an intercept x[0] = c for floating-point error (1/√2 computed two ways can
# differ in the last bit); a centered randomizer then uses c exactly.
INTERCEPT_TOLERANCE = 1e-9


def off_intercept(first: np.ndarray | float, c: float) -> np.ndarray:
    """Where a first coordinate (or an array of them) is not the intercept c, beyond the
    relative slack ``INTERCEPT_TOLERANCE``: the one rule the randomizers, the device, the API
    and the command line apply."""
    return np.abs(np.asarray(first, dtype=float) - c) > INTERCEPT_TOLERANCE * max(1.0, c)


def check_inputs(x: np.ndarray, r: np.ndarray, d: int, L: float) -> tuple[np.ndarray, np.ndarray]:
    """Validate a batch of (x, r): shapes, finiteness, ‖x‖ ≤ L, r ∈ [0, 1]."""
    x = np.asarray(x, dtype=float)
    r = np.asarray(r, dtype=float)
    if x.ndim != 2 or x.shape[1] != d:
        raise ValueError(f"x must have shape (n, {d}), got {x.shape}")
    if r.shape != (x.shape[0],):
        raise ValueError(f"r must have shape ({x.shape[0]},), got {r.shape}")
    if not (np.isfinite(x).all() and np.isfinite(r).all()):
        raise ValueError("x and r must be finite")
    if (np.linalg.norm(x, axis=1) > L * (1 + 1e-9)).any():
        raise ValueError(f"feature vectors must satisfy ||x|| <= L = {L}")
    if ((r < 0) | (r > 1)).any():
        raise ValueError("rewards must lie in [0, 1]")
    return x, r


def unpack_row(fmt: str, data: bytes) -> np.ndarray:
    """A report row from its fixed-size ``struct`` wire form ``fmt`` (ValueError if ``data`` is
    not exactly that size); the caller validates the values."""
    size = struct.calcsize(fmt)
    if len(data) != size:
        raise ValueError(f"a report is {size} bytes, got {len(data)}")
    return np.array(struct.unpack(fmt, data), dtype=float)


# Model versions in a report row travel as a uint32 (struct "I").
MAX_VERSION = 2**32 - 1


def versioned_row(row: np.ndarray, width: int, version_error: str) -> np.ndarray:
    """``row`` as ``width`` finite floats whose first entry is a model version (an integer in
    [0, 2³²)); ValueError (``version_error`` for a bad version) otherwise."""
    row = np.asarray(row, dtype=float)
    if row.shape != (width,) or not np.isfinite(row).all():
        raise ValueError(f"a report is {width} finite numbers")
    v = row[0]
    if v != int(v) or not 0 <= v <= MAX_VERSION:
        raise ValueError(version_error)
    return row
