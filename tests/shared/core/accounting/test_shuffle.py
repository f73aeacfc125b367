"""Feldman–McMillan–Talwar whole-report amplification (shared/accounting/shuffle.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from shared.core.accounting.shuffle import (
    shuffle_closed_form_epsilon,
    shuffle_delta,
    shuffle_epsilon,
    shuffle_max_eps0,
    shuffle_min_batch,
)


def brute_force_delta(eps: float, eps0: float, n: int) -> float:
    """E_C Σ_k max(0, P(k|C) - e^ε Q(k|C)) by explicit enumeration of every (C, k) (spec §3)."""
    q = math.exp(-eps0)
    p1 = math.exp(eps0) / (math.exp(eps0) + 1.0)
    total = 0.0
    for c in range(n):
        b = binom.pmf(np.arange(c + 1), c, 0.5)  # A ~ Bin(c, 1/2)
        b_here = np.concatenate([b, [0.0]])  # Pr[A = k]
        b_prev = np.concatenate([[0.0], b])  # Pr[A = k - 1]
        p_k = p1 * b_prev + (1 - p1) * b_here  # A + Δ
        q_k = p1 * b_here + (1 - p1) * b_prev  # A + 1 - Δ
        total += binom.pmf(c, n - 1, q) * np.maximum(p_k - math.exp(eps) * q_k, 0.0).sum()
    return total


@pytest.mark.parametrize(
    ("eps", "eps0", "n"),
    [(0.1, 1.0, 40), (0.5, 2.0, 60), (1.5, 3.0, 30), (0.0, 0.5, 25), (0.05, 0.2, 80)],
)
def test_delta_matches_brute_force(eps: float, eps0: float, n: int) -> None:
    # The O(1)-per-C tail formula must equal explicit enumeration (1e-12 relative + 1e-15 abs).
    assert shuffle_delta(eps, eps0, n) == pytest.approx(
        brute_force_delta(eps, eps0, n), rel=1e-12, abs=1e-15
    )


def test_published_figure() -> None:
    # FMT / spec §3: n = 10^4, ε0 = 2, δ = 1e-6 → ε ≈ 0.155 (tolerance ±0.01 from the brief).
    assert shuffle_epsilon(2.0, 10_000, 1e-6) == pytest.approx(0.155, abs=0.01)


def test_returned_epsilon_is_sound_and_tight() -> None:
    eps = shuffle_epsilon(2.0, 10_000, 1e-6)
    assert shuffle_delta(eps, 2.0, 10_000) <= 1e-6
    assert shuffle_delta(eps - 1e-6, 2.0, 10_000) > 1e-6


@pytest.mark.parametrize(
    ("eps0", "n", "delta"),
    [(0.5, 10_000, 1e-6), (1.0, 10_000, 1e-6), (2.0, 10_000, 1e-6), (1.0, 100_000, 1e-8),
     (3.0, 1_000_000, 1e-6), (0.1, 2_000, 1e-5)],
)
def test_below_closed_form(eps0: float, n: int, delta: float) -> None:
    closed = shuffle_closed_form_epsilon(eps0, n, delta)
    assert closed is not None  # every point above is inside Thm 3.1's range
    assert shuffle_epsilon(eps0, n, delta) <= closed


def test_closed_form_range() -> None:
    # Valid only when ε0 ≤ log(n / (16 log(2/δ))).
    n, delta = 10_000, 1e-6
    limit = math.log(n / (16 * math.log(2 / delta)))
    assert shuffle_closed_form_epsilon(limit - 1e-9, n, delta) is not None
    assert shuffle_closed_form_epsilon(limit + 1e-9, n, delta) is None


def test_monotone_in_n() -> None:
    for eps0 in (0.5, 2.0, 4.0):
        values = [shuffle_epsilon(eps0, n, 1e-6) for n in (2, 10, 100, 1_000, 10_000, 100_000)]
        assert all(b <= a for a, b in zip(values, values[1:], strict=False)), values


def test_monotone_in_eps0_and_capped() -> None:
    grid = [0.1, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 10.0]
    values = [shuffle_epsilon(e0, 1_000, 1e-6) for e0 in grid]
    assert all(b >= a for a, b in zip(values, values[1:], strict=False)), values
    assert all(v <= e0 for v, e0 in zip(values, grid, strict=True))


def test_n_one_is_pure_ldp() -> None:
    assert shuffle_epsilon(1.7, 1, 1e-6) == 1.7
    # The n = 1 divergence is that of randomized response: (e^{ε0} - e^ε)/(e^{ε0} + 1).
    assert shuffle_delta(0.3, 1.7, 1) == pytest.approx(
        (math.exp(1.7) - math.exp(0.3)) / (math.exp(1.7) + 1), rel=1e-12
    )


def test_truncation_adds_mass() -> None:
    # A coarser C-window can only increase δ (the cut mass is added, never dropped).
    tight = shuffle_delta(0.2, 2.0, 5_000)
    coarse = shuffle_delta(0.2, 2.0, 5_000, tail_mass=1e-4)
    assert coarse >= tight
    assert coarse - tight <= 2e-4


def test_max_eps0_round_trip() -> None:
    for target, n in ((0.5, 10_000), (1.0, 1_000)):
        e0 = shuffle_max_eps0(target, n, 1e-6)
        assert shuffle_epsilon(e0, n, 1e-6) <= target + 1e-8
        assert shuffle_epsilon(e0 + 1e-3, n, 1e-6) > target


def test_min_batch_round_trip() -> None:
    n = shuffle_min_batch(2.0, 0.3, 1e-6)
    assert n is not None
    assert shuffle_epsilon(2.0, n, 1e-6) <= 0.3 + 1e-8
    assert shuffle_epsilon(2.0, n - 1, 1e-6) > 0.3
    assert shuffle_min_batch(2.0, 3.0, 1e-6) == 1
    # Unreachable under a small cap.
    assert shuffle_min_batch(8.0, 0.01, 1e-6, max_n=10_000) is None
