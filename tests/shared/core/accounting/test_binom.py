"""``accounting.binom`` is ``scipy.stats.binom``, float for float, on the arguments the
accountants pass: every function equal (``==``, element by element) on grids of n, p and k —
k on and off the support, tiny and extreme p, n from 1 to millions, and the shapes the callers
use (k a vector with n a scalar, k and n vectors of one shape)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from scipy.stats import binom as scipy_binom

from privbandit.shared.core.accounting import binom

NS = [1, 2, 7, 50, 999, 10_000, 123_457, 4_000_000]
PS = [0.0, 1e-300, 1e-200, np.exp(-700.0), 1e-9, 0.01, 0.3, 0.5, 0.77, 1 - 1e-12, 1.0]
FUNCTIONS = ["pmf", "logpmf", "cdf", "sf", "logsf"]


def ks(n: int, p: float) -> np.ndarray:
    """Points off the support on both sides, both ends, around the mean and a window of
    non-integers (floors taken by cdf/sf, zero mass for pmf)."""
    mean = n * p
    sd = np.sqrt(n * p * (1 - p)) + 1
    grid = np.arange(np.floor(mean - 8 * sd), np.ceil(mean + 8 * sd) + 1)
    edges = np.array([-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, n - 1.0, n - 0.5, n, n + 0.5, n + 2.0])
    return np.concatenate([grid[(grid >= -2) & (grid <= n + 2)], edges, grid[:40] + 0.25])


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


def outcome(f: Callable[..., Any], *args: Any) -> Any:
    """f's value, or the type of what it raised (Boost's pmf overflows for p near the smallest
    normal double: ``accounting.binomial``; ours must fail alike)."""
    try:
        with np.errstate(all="ignore"):
            return np.asarray(f(*args))
    except ArithmeticError as exc:
        return type(exc)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_vector_k_scalar_n_equals_scipy(name: str) -> None:
    ours, theirs = getattr(binom, name), getattr(scipy_binom, name)
    for n in NS:
        for p in PS:
            a, b = outcome(ours, ks(n, p), n, p), outcome(theirs, ks(n, p), n, p)
            assert a is b if isinstance(b, type) else same(a, b), (name, n, p)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_vector_k_and_n_and_scalars_equal_scipy(name: str) -> None:
    """The shuffle accountant's shape (k and n vectors of one shape, p = 1/2) and scalars."""
    ours, theirs = getattr(binom, name), getattr(scipy_binom, name)
    rng = np.random.default_rng(7)
    n = rng.integers(0, 3_000, size=5_000).astype(float)
    k = np.floor(rng.uniform(-3, 1.1, size=n.shape) * (n + 1)) - 1.0
    for p in (0.5, 0.01, 0.9):
        assert same(np.asarray(ours(k, n, p)), theirs(k, n, p)), (name, p)
    for kk, nn, p in [(0, 1, 0.5), (3, 10, 0.2), (10, 10, 0.2), (-1, 10, 0.2), (11, 10, 0.7)]:
        a, b = ours(kk, nn, p), theirs(kk, nn, p)
        assert np.ndim(a) == 0 and (a == b), (name, kk, nn, p)


def test_importing_the_accountants_leaves_scipy_stats_out() -> None:
    """What the module is for: a process that runs the shuffle accountant never imports
    scipy.stats (checked in a fresh interpreter)."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from privbandit.shared.core.accounting.shuffle import shuffle_delta\n"
            "from privbandit.shared.core.accounting.binomial import truncated_binomial\n"
            "shuffle_delta(1.0, 2.0, 1000)\n"
            "truncated_binomial(1000, 1e-300, 1e-12)\n"
            "print('scipy.stats' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
