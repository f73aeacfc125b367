"""The binomial distribution Bin(n, p) as ``scipy.stats.binom`` computes it, without importing
``scipy.stats``.

``scipy.stats.binom`` evaluates its pmf, cdf and sf with Boost's binomial through scipy.special's
ufuncs ``_binom_pmf``, ``_binom_cdf``, ``_binom_sf`` (scipy ≥ 1.12), and its log-pmf as
log C(n, k) + k log p + (n − k) log1p(−p) with ``gammaln``, ``xlogy`` and ``xlog1py``; what
``rv_discrete`` adds around them (argument checks, the values off the support, a clip to [0, 1])
is written out below for the arguments the accountants pass (n a non-negative integer, p in
[0, 1]). Importing ``scipy.stats`` costs about half a second of CPU — builds a hundred
distribution objects and their docstrings — in every service process whose start-up computes a
shuffle ledger or an ε0, for these five functions. ``tests/shared/core/accounting/test_binom.py``
checks every function equal (``==``, element by element) to ``scipy.stats.binom``'s on grids of
n, p and k, tiny p included; on a scipy without those ufuncs this module falls back to
``scipy.stats.binom`` itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

Array = Any  # numpy arrays or floats: the functions broadcast like scipy's


@functools.cache
def _ufuncs() -> Any:
    """scipy.special's ufuncs module (imported on first use: a service app imports no scipy,
    ``tests/services/common/test_imports.py``), or None on a scipy whose binom does not go
    through them (private to scipy.special, public through scipy.stats.binom)."""
    try:
        from scipy.special import _ufuncs as ufuncs
    except ImportError:  # pragma: no cover - scipy's layout before 1.12
        return None
    return ufuncs if hasattr(ufuncs, "_binom_sf") else None


def _stats() -> Any:
    from scipy.stats import binom

    return binom


def _on(mask: np.ndarray, fill: np.ndarray, f: Callable[..., Any], *args: np.ndarray
        ) -> np.ndarray:
    """``fill`` with f(args restricted to ``mask``) placed where ``mask`` holds."""
    if mask.any():
        fill[mask] = f(*(a[mask] for a in args))
    return fill


def _clipped(ufunc: Any, p: float, floor: bool = False) -> Callable[..., Any]:
    """k, n ↦ ufunc(k, n, p) clipped to [0, 1], k floored first for cdf/sf (as binom does)."""
    return lambda k, n: np.clip(ufunc(np.floor(k) if floor else k, n, p), 0, 1)


def _grid(k: Array, n: Array) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.broadcast_arrays(np.asarray(k), np.asarray(n))
    return a, b


def _out(x: np.ndarray) -> Array:
    return x[()] if x.ndim == 0 else x


def pmf(k: Array, n: Array, p: float) -> Array:
    """Pr[C = k], C ~ Bin(n, p): 0 off the support {0, …, n} and at non-integer k."""
    if _ufuncs() is None:
        return _stats().pmf(k, n, p)
    k, n = _grid(k, n)
    inside = (k >= 0) & (k <= n) & (np.floor(k) == k)
    return _out(_on(inside, np.zeros(k.shape), _clipped(_ufuncs()._binom_pmf, p), k, n))


def logpmf(k: Array, n: Array, p: float) -> Array:
    """log Pr[C = k] = log C(n, k) + k log p + (n − k) log1p(−p); −inf off the support."""
    if _ufuncs() is None:
        return _stats().logpmf(k, n, p)
    k, n = _grid(k, n)
    inside = (k >= 0) & (k <= n) & (np.floor(k) == k)

    from scipy.special import gammaln, xlog1py, xlogy

    def f(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a = np.floor(a)
        return gammaln(b + 1) - (gammaln(a + 1) + gammaln(b - a + 1)) + xlogy(a, p) + \
            xlog1py(b - a, -p)

    return _out(_on(inside, np.full(k.shape, -np.inf), f, k, n))


def cdf(k: Array, n: Array, p: float) -> Array:
    """Pr[C ≤ k]: 0 below the support, 1 from n on."""
    if _ufuncs() is None:
        return _stats().cdf(k, n, p)
    return _tail(k, n, _clipped(_ufuncs()._binom_cdf, p, floor=True), below=0.0, beyond=1.0)


def sf(k: Array, n: Array, p: float) -> Array:
    """Pr[C > k]: 1 below the support, 0 from n on."""
    if _ufuncs() is None:
        return _stats().sf(k, n, p)
    return _tail(k, n, _clipped(_ufuncs()._binom_sf, p, floor=True), below=1.0, beyond=0.0)


def logsf(k: Array, n: Array, p: float) -> Array:
    """log Pr[C > k]: 0 below the support, −inf from n on."""
    if _ufuncs() is None:
        return _stats().logsf(k, n, p)

    def f(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.log(_ufuncs()._binom_sf(np.floor(a), b, p))

    return _tail(k, n, f, below=0.0, beyond=-np.inf)


def _tail(k: Array, n: Array, f: Callable[..., Any], below: float, beyond: float) -> Array:
    """f(k, n) for 0 ≤ k < n, ``below`` for k < 0 and ``beyond`` for k ≥ n."""
    k, n = _grid(k, n)
    out = np.where(k < 0, below, beyond)
    return _out(_on((k >= 0) & (k < n), out, f, k, n))
