"""Device math of ddp-linucb (shared/core/randomizers/skellam.py): rounding unbiased and
norm-bounded, sensitivities hold, estimates unbiased, the exact device path matches the ledger."""

from __future__ import annotations

import random

import numpy as np
import pytest

from shared.core.randomizers.skellam import (
    SkellamRandomizer,
    clean_statistics,
    exact_bernoulli,
    skellam_tail_bound,
)


def unit_inputs(rng: np.random.Generator, n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    x = rng.normal(size=(n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, rng.integers(0, 2, size=n).astype(float)


@pytest.fixture(scope="module")
def rz() -> SkellamRandomizer:
    return SkellamRandomizer(d=3, epsilon=1.0, delta=1e-6, batch_size=100, scale=16.0)


def test_rounding_unbiased(rz: SkellamRandomizer) -> None:
    """E round(y) = y per entry, within 5 standard errors (each entry's s.e. ≤ 0.5/√reps)."""
    rng = np.random.default_rng(1)
    y = np.array([[0.3, -2.7, 5.5, 1e-3, -0.999, 7.0]])
    reps = 200_000
    mean = rz.round_rows(np.repeat(y, reps, axis=0), rng).mean(axis=0)
    assert np.all(np.abs(mean - y[0]) < 5 * 0.5 / np.sqrt(reps))


def test_device_rounding_unbiased(rz: SkellamRandomizer) -> None:
    """The CSPRNG path rounds with exact dyadic coins; same check with a seeded source."""
    source = random.Random(5)
    reps = 40_000
    for p in (0.3, 0.999, 2.0**-7):
        hits = sum(exact_bernoulli(p, source.randrange) for _ in range(reps))
        assert abs(hits / reps - p) < 5 * np.sqrt(p * (1 - p) / reps)


def test_norm_bound_and_sensitivity_after_rounding(rz: SkellamRandomizer) -> None:
    """Worst-case-norm inputs (‖x‖ = L, r ∈ {0, 1}): every rounded vector within B, every pair
    within Δ₂ and Δ₁; the bounds are not loose by more than the stated √n slack."""
    rng = np.random.default_rng(2)
    x, r = unit_inputs(rng, 50_000, rz.d)
    z = rz.round_rows(rz.scale * clean_statistics(x, r, rz.L), rng)
    norms = np.linalg.norm(z, axis=1)
    assert norms.max() <= rz.norm_bound
    assert norms.max() >= rz.scale * rz.clip - np.sqrt(rz.n)
    diff = z[: 25_000] - z[25_000:]
    assert np.linalg.norm(diff, axis=1).max() <= rz.l2
    assert np.abs(diff).sum(axis=1).max() <= rz.l1


def test_clipping_only_touches_invalid_inputs(rz: SkellamRandomizer) -> None:
    rng = np.random.default_rng(3)
    x, r = unit_inputs(rng, 1000, rz.d)
    v = clean_statistics(x, r, rz.L)
    iu = np.triu_indices(rz.d)
    raw = np.concatenate([x[:, iu[0]] * x[:, iu[1]], r[:, None] * x], axis=1)
    assert np.allclose(v, raw)
    assert np.linalg.norm(clean_statistics(3 * x, 2 * r, rz.L), axis=1).max() <= rz.clip * (
        1 + 1e-12
    )


def test_estimate_unbiased(rz: SkellamRandomizer) -> None:
    """The batch estimate S/s of Σ v (G and u) is unbiased: mean over reps within 5 s.e."""
    rng = np.random.default_rng(4)
    x, r = unit_inputs(rng, 40, rz.d)
    target = clean_statistics(x, r, rz.L).sum(axis=0)
    reps = 4000
    stats = np.stack([rz.sufficient(rz.randomize(x, r, rng)) for _ in range(reps)]) / rz.scale
    se = stats.std(axis=0, ddof=1) / np.sqrt(reps)
    assert np.all(np.abs(stats.mean(axis=0) - target) < 5 * se)
    # Variance per entry ≈ 40 · (share variance + rounding ≤ 1/4) / s².
    var = stats.var(axis=0, ddof=1) * rz.scale**2
    assert np.all(var > 40 * rz.share_variance * 0.85)
    assert np.all(var < 40 * (rz.share_variance + 0.25) * 1.15)
    est = rz.estimate(stats[0] * rz.scale, 40)
    assert np.allclose(est.G, est.G.T)


def test_shares_meet_the_ledger(rz: SkellamRandomizer) -> None:
    """⌈γ l⌉ shares of the quantized variance reach the μ the target (ε, δ) needs."""
    assert rz.honest * rz.share_variance >= rz.mu_target
    assert rz.honest * rz.share_variance <= rz.mu_target + rz.honest * 2.0**-19
    ledger = rz.ledger()
    assert ledger.central_epsilon is not None and ledger.central_epsilon <= 1.0
    assert ledger.ldp_epsilon is None


def test_device_report_is_integers_of_the_right_law(rz: SkellamRandomizer) -> None:
    x = np.array([0.6, 0.0, 0.8])
    z = rz.rounded(x, 1.0)
    assert len(z) == rz.n and all(isinstance(v, int) for v in z)
    reports = np.array([rz.device_report(x, 1.0) for _ in range(3000)])
    noise = reports - np.round(rz.scale * clean_statistics(x[None], np.ones(1), rz.L))
    # Share variance within 10% (s.e. of a variance ≈ √(2/n) ≈ 2.6% per entry here).
    assert abs(noise.var() / rz.share_variance - 1) < 0.1


def test_from_bytes_refuses_out_of_range(rz: SkellamRandomizer) -> None:
    row = np.zeros(rz.n, dtype=np.int64)
    assert np.array_equal(rz.from_bytes(rz.to_bytes(row)), row)
    row[0] = int(rz.norm_bound + skellam_tail_bound(rz.share_variance, 2.0**-40)) * 2
    with pytest.raises(ValueError):
        rz.from_bytes(rz.to_bytes(row))


def test_tail_bound_holds_empirically() -> None:
    rng = np.random.default_rng(6)
    var = 50.0
    t = skellam_tail_bound(var, 1e-3)
    x = rng.poisson(var / 2, 400_000) - rng.poisson(var / 2, 400_000)
    assert (np.abs(x) >= t).mean() <= 1e-3
