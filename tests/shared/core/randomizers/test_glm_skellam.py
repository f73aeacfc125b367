"""ddp-glb's device math (shared/core/randomizers/glm_skellam.py): the GLM statistics obey every
bound the "upper" encoding's ledger is computed from (so the ledger is exact for them), the batch
estimate is unbiased, and the surrogate's fixed point is θ* (the IRLS identity)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from privbandit.shared.core.randomizers.glm_skellam import (
    RESPONSE_SCALE,
    GLMSkellamRandomizer,
    glm_statistics,
)
from privbandit.shared.core.randomizers.skellam import SkellamRandomizer, pair_sensitivity


def unit_rows(rng: np.random.Generator, n: int, d: int, L: float = 1.0) -> np.ndarray:
    x = rng.normal(size=(n, d))
    return L * x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def rz() -> GLMSkellamRandomizer:
    return GLMSkellamRandomizer(d=3, epsilon=1.0, delta=1e-6, batch_size=100, scale=16.0)


def test_working_response_factor_is_inside_minus_one_one() -> None:
    """a = g'(z) z + y − g(z) ∈ (−1, 1) for every logit z and y ∈ [0, 1] (the proof in the
    module docstring), checked on a dense grid out to |z| = 40 at both ends of y."""
    z = np.linspace(-40, 40, 400_001)
    g = expit(z)
    f = g * (1 - g) * z - g
    assert f.max() <= 0 and f.min() >= -1
    assert np.all(np.diff(f) <= 1e-15)  # decreasing, as f'(z) = z g''(z) ≤ 0
    inner = np.abs(z) <= 20  # beyond, g(z) rounds to 0 or 1 in floating point
    for y in (0.0, 1.0):
        assert np.abs(f + y).max() <= 1  # (the release clips a to [−1, 1] for that case)
        assert np.abs(f + y)[inner].max() < 1


def test_statistics_stay_within_the_upper_encodings_bounds(rz: GLMSkellamRandomizer) -> None:
    """For contexts on the sphere ‖x‖ = L, any y ∈ [0, 1] and anchors of any size (up to
    ‖θ̂‖ = 50: privacy needs no bound on θ̂), every row is within the clip C = √(L⁴ + L²) and
    every entry within the honest ranges the Prio3 proof enforces, and no clipping happens."""
    rng = np.random.default_rng(11)
    n = 60_000
    x = unit_rows(rng, n, rz.d)
    y = rng.choice([0.0, 1.0, 0.5], size=n)
    anchors = unit_rows(rng, n, rz.d) * rng.uniform(0, 50, size=(n, 1))
    v = glm_statistics(x, y, anchors)
    assert np.linalg.norm(v, axis=1).max() <= rz.clip
    assert np.allclose(rz.statistics(np.concatenate([x, anchors], axis=1), y), v)
    scaled = rz.scale * v
    assert np.all(scaled >= rz.range_lo) and np.all(scaled <= rz.range_hi)


def test_pair_sensitivity_holds_over_adversarial_pairs(rz: GLMSkellamRandomizer) -> None:
    """‖v(x, y, θ̂) − v(x', y', θ̂')‖ ≤ Δ_v = √(2L⁴ + 4L²) over random pairs and the corners the
    bound's two parts are worst at (opposite contexts, y ∈ {0, 1}, logits from 0 to ±∞); the
    rounded pairs stay within the accountant's Δ₂ and Δ₁."""
    rng = np.random.default_rng(12)
    n = 50_000
    pair = pair_sensitivity(rz.L, "upper")
    x, xp = unit_rows(rng, n, rz.d), unit_rows(rng, n, rz.d)
    xp[: n // 2] = -x[: n // 2]  # opposite contexts: ‖a x − a'x'‖ up to 2L
    y, yp = rng.integers(0, 2, n).astype(float), rng.integers(0, 2, n).astype(float)
    scale = rng.choice([0.0, 0.5, 2.0, 30.0], size=(n, 1))
    th, thp = unit_rows(rng, n, rz.d) * scale, unit_rows(rng, n, rz.d) * scale[::-1]
    v, vp = glm_statistics(x, y, th), glm_statistics(xp, yp, thp)
    dist = np.linalg.norm(v - vp, axis=1)
    assert dist.max() <= pair
    assert dist.max() >= 0.8 * pair  # the bound is not vacuous for these statistics
    z = rz.round_rows(rz.scale * v, rng) - rz.round_rows(rz.scale * vp, rng)
    assert np.linalg.norm(z, axis=1).max() <= rz.l2
    assert np.abs(z).sum(axis=1).max() <= rz.l1


def test_ledger_is_ddp_linucbs_upper_ledger() -> None:
    """Same sensitivities, same μ, same (ε, δ) as ddp-linucb's "upper" release (whose accountant
    the skellam tests cross-check against dp-accounting): the bounds above are all it uses."""
    for noise in ("aggregators", "devices"):
        glm = GLMSkellamRandomizer(5, 1.0, 1e-6, 1000, 1.0, 128.0, 1.0, 1.0, noise)
        lin = SkellamRandomizer(5, 1.0, 1e-6, 1000, 1.0, 128.0, 1.0, "upper", 1.0, None, noise)
        assert (glm.l1, glm.l2, glm.mu_target) == (lin.l1, lin.l2, lin.mu_target)
        assert glm.ledger().central_epsilon == lin.ledger().central_epsilon <= 1.0
        assert glm.ledger().central_delta == lin.ledger().central_delta
        assert "GLM statistics" in (glm.ledger().accounting or "")


def test_batch_estimate_is_unbiased(rz: GLMSkellamRandomizer) -> None:
    """S/(s · weights) estimates Σ (upper(q x xᵀ), a x) without bias (devices' shares): mean of
    3000 batch sums within 5 standard errors per entry; ``estimate`` returns (G, 4u)."""
    rng = np.random.default_rng(13)
    x = unit_rows(rng, 40, rz.d)
    y = rng.integers(0, 2, 40).astype(float)
    rows = np.concatenate([x, np.tile([0.7, -1.2, 2.0], (40, 1))], axis=1)
    devices = GLMSkellamRandomizer(rz.d, 1.0, 1e-6, 40, scale=16.0, noise="devices")
    target = glm_statistics(x, y, rows[:, rz.d:]).sum(axis=0)
    reps = 3000
    sums = np.stack([devices.sufficient(devices.randomize(rows, y, rng)) for _ in range(reps)])
    stats = sums / devices.scale
    se = stats.std(axis=0, ddof=1) / np.sqrt(reps)
    assert np.all(np.abs(stats.mean(axis=0) - target) < 5 * se)
    est = devices.estimate(sums.mean(axis=0), 40)
    n_up = rz.d * (rz.d + 1) // 2
    assert np.allclose(est.u, RESPONSE_SCALE * stats.mean(axis=0)[n_up:])
    assert devices.vector_proxy() == pytest.approx(16 * SkellamRandomizer.vector_proxy(devices))


def test_the_surrogate_is_solved_by_theta_star_at_the_anchor_theta_star() -> None:
    """At θ̂ = θ* and y at its mean g(⟨x, θ*⟩), Σ 4a x = (Σ q x xᵀ) θ* exactly: the Newton step
    from the truth stays there (E b_i = H_i θ*), so the estimator is the MLE's fixed point."""
    rng = np.random.default_rng(14)
    d = 4
    theta = np.array([0.0, 2.0, -1.5, 1.0])
    x = unit_rows(rng, 500, d)
    v = glm_statistics(x, expit(x @ theta), theta)
    n_up = d * (d + 1) // 2
    iu = np.triu_indices(d)
    G = np.zeros((d, d))
    G[iu] = v[:, :n_up].sum(axis=0)
    G = G + np.triu(G, 1).T
    assert np.allclose(np.linalg.solve(G, RESPONSE_SCALE * v[:, n_up:].sum(axis=0)), theta)


def test_device_rows_carry_their_own_anchor(rz: GLMSkellamRandomizer) -> None:
    """The device path takes [x, θ̂] (2d entries); d-entry rows use the set anchor."""
    x = np.array([0.6, 0.0, 0.8])
    theta = np.array([1.0, -2.0, 0.5])
    own = rz.statistics(np.concatenate([x, theta])[None, :], np.array([1.0]))
    rz.set_anchor(theta)
    try:
        assert np.allclose(rz.statistics(x[None, :], np.array([1.0])), own)
        z = rz.rounded(np.concatenate([x, theta]), 1.0)
        assert np.all(np.abs(np.array(z) - rz.scale * own[0]) < 1)
    finally:
        rz.set_anchor(np.zeros(3))
    with pytest.raises(ValueError):
        rz.check(np.array([[0.6, 0.0, 0.8, np.nan, 0.0, 0.0]]), np.array([1.0]))
