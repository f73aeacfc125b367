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
from typing import Protocol, runtime_checkable

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


# Capabilities: what some randomizers can do beyond ``Randomizer``. Each is a structural
# Protocol (checked with ``isinstance``), so a caller asks for the capability, never for a class:
# the registry checks the declared ones where it is built (``policies.registry``), and the wire
# layer (``shared.crypto``) sees only the plain ``SumEncoding`` a summable randomizer describes.


@dataclass(frozen=True)
class SumEncoding:
    """One report of a summable randomizer as c integers for a secure sum (plain data: what the
    Paillier slot layout and the Prio3 circuit of a task are built from).

    Entry i is the digit v_i + ``offset`` ∈ [0, ``m``] (``offset`` = 0: counts, e.g. the 0/1
    randomizer's, each in 0..m; ``offset`` = O > 0: signed values in ±O with m = 2O). With
    ``maxima``/``offsets`` each entry has its own range instead: v_i + offsets[i] ∈
    [0, maxima[i]] (a tighter check, per coordinate, for a Prio3 validity proof).
    ``noise_variance``: the Skellam variance each aggregator adds per coordinate (0: none)."""

    c: int
    m: int
    offset: int = 0
    maxima: tuple[int, ...] | None = None
    offsets: tuple[int, ...] | None = None
    noise_variance: float = 0.0


@runtime_checkable
class Summable(Protocol):
    """A randomizer whose reports a secure sum can add (the ``secure-sum`` aggregation): each
    report contributes ``summand(row)``, c integers as ``sum_encoding`` describes, and the
    estimator reads the batch sum of the summands as it would ``sufficient`` of the rows."""

    def sum_encoding(self) -> SumEncoding: ...

    def summand(self, row: np.ndarray) -> np.ndarray:
        """The c integers one report row adds to the batch sum."""
        ...


@runtime_checkable
class SumBounded(Protocol):
    """A summable randomizer with a bound an honest batch sum stays within (distributed noise:
    the analyzer refuses a decoded sum beyond it)."""

    def sum_bound(self, count: int) -> float: ...


@runtime_checkable
class NoiseShares(Protocol):
    """A randomizer whose reports carry shares of the noise, drawn exactly from the OS CSPRNG
    (distributed DP): ``honest`` of a batch's reports must be honest for its guarantee (None:
    the aggregators add the noise instead), ``device_report`` is the one report the device
    sends, ``exact_noise`` the sampler it draws the share with (None without shares)."""

    honest: int | None

    def device_report(self, x: np.ndarray, r: float) -> list[int]: ...

    @property
    def exact_noise(self) -> object | None: ...


@runtime_checkable
class BatchNoising(Protocol):
    """A randomizer whose noise is added to each batch sum by the aggregators, not to the
    reports: ``batch_noise`` is the simulator's (and the in-process analyzer's) stand-in."""

    def batch_noise(self, rng: np.random.Generator) -> np.ndarray: ...


@runtime_checkable
class BatchSized(Protocol):
    """A randomizer calibrated for batches of ``batch_size`` reports (None: not yet sized)."""

    batch_size: int | None


def sized_for(randomizer: object) -> int | None:
    """The batch length ``randomizer`` is calibrated for, if any (``BatchSized``)."""
    return randomizer.batch_size if isinstance(randomizer, BatchSized) else None


@runtime_checkable
class PerUserLevels(Protocol):
    """A randomizer whose reports may each carry the user's own privacy level ε_t ∈ [0,
    ``eps_max``] (HeLDP) when ``per_user_epsilon`` is True."""

    per_user_epsilon: bool
    eps_max: float


def takes_levels(randomizer: object) -> bool:
    """Whether reports of ``randomizer`` carry a per-user privacy level."""
    return isinstance(randomizer, PerUserLevels) and bool(randomizer.per_user_epsilon)


@runtime_checkable
class RewardBounded(Protocol):
    """A randomizer of rewards that may be unbounded (``bounded`` False: the sigmoid variants);
    a randomizer without the attribute takes rewards in [0, 1]."""

    bounded: bool


def bounded_rewards(randomizer: object) -> bool:
    """Whether ``randomizer`` takes rewards in [0, 1] only."""
    return randomizer.bounded if isinstance(randomizer, RewardBounded) else True


@runtime_checkable
class Calibrating(Protocol):
    """A randomizer that finds a parameter on first use (σ, ε0) and can be told to now."""

    def calibrate(self) -> None: ...


def settle(value: float | Callable[[], float]) -> float:
    """A randomizer's parameter given as a number or as the function that finds it (called
    once, on first use: ``BinaryRandomizer.eps0``, ``BCORowRandomizer.sigma``)."""
    return float(value() if callable(value) else value)


def calibrate(randomizer: object) -> None:
    """Compute now what a randomizer calibrates on first use — its noise (σ, by the analytic
    Gaussian calibration, which imports scipy) or its ε0 (a central target's, a search of seconds
    under the sum-only accountant): a device does so at start, off its request path. A randomizer
    without a ``calibrate`` method has nothing to compute."""
    if isinstance(randomizer, Calibrating):
        randomizer.calibrate()


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


def intercept_values(X: np.ndarray, coords: tuple[int, ...] = (0,)) -> np.ndarray:
    """⟨e, x⟩ for each row x of X, e the indicator of the intercept coordinates ``coords``:
    x[0] for the default (0,), the sum over every block's start for per-arm (disjoint)
    features, where the active arm's block holds c and the others 0."""
    X = np.asarray(X, dtype=float)
    if tuple(coords) == (0,):
        return X[..., 0]
    return X[..., list(coords)].sum(axis=-1)


def intercept_rule(c: float, coords: tuple[int, ...] = (0,), short: bool = False) -> str:
    """The intercept condition in words, for error messages (``short``: c to 6 digits)."""
    value = f"{c:g}" if short else f"{c!r}"
    if tuple(coords) == (0,):
        return f"x[0] = {value}"
    return f"the sum of x at coordinates {list(coords)} = {value}"


def check_centered_inputs(x: np.ndarray, r: np.ndarray, d: int, L: float, intercept: float | None,
                          encoding: str, coords: tuple[int, ...] = (0,)
                          ) -> tuple[np.ndarray, np.ndarray]:
    """``check_inputs``, and under a centered ``encoding`` (``intercept`` c set) ⟨e, x⟩ = c in
    every row, e the indicator of ``coords`` (x[0] = c for the default (0,); relative slack
    ``INTERCEPT_TOLERANCE``: the report then uses c exactly)."""
    x, r = check_inputs(x, r, d, L)
    if intercept is not None and off_intercept(intercept_values(x, coords), intercept).any():
        raise ValueError(f"the {encoding} encoding needs {intercept_rule(intercept, coords)} "
                         "in every context")
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
