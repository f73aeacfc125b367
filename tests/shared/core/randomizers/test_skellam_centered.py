"""ddp-linucb's ``centered`` encoding (shared/core/randomizers/skellam.py, *Encodings*): contexts
with an intercept x₀ = c release (r − ½) x; the exact joint sensitivity, the projection onto the
declared contexts, the unbiased reconstruction of Σ r x and its stated variances, the ledger."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.shared.core.policies.config import DDPLinUCBConfig
from privbandit.shared.core.randomizers.skellam import (
    SkellamRandomizer,
    batch_noise_sd,
    clean_statistics,
    coordinate_weights,
    pair_sensitivity,
)

C = 1 / math.sqrt(2)


def intercept_inputs(rng: np.random.Generator, n: int, d: int, L: float, c: float
                     ) -> np.ndarray:
    """n contexts with x₀ = c and ‖x‖ ≤ L (norms spread towards L, where the worst cases are)."""
    rest = rng.normal(size=(n, d - 1))
    room = math.sqrt(L * L - c * c)
    rest *= room * rng.random((n, 1)) ** 0.2 / np.linalg.norm(rest, axis=1, keepdims=True)
    return np.concatenate([np.full((n, 1), c), rest], axis=1)


def _pair_sq(x: np.ndarray, y: np.ndarray, r: np.ndarray, rp: np.ndarray, L: float,
             weights: np.ndarray, c: float) -> np.ndarray:
    return np.sum((clean_statistics(x, r, L, weights, c)
                   - clean_statistics(y, rp, L, weights, c)) ** 2, axis=1)


def extremal_pair(L: float, w: float, c: float, d: int) -> tuple[np.ndarray, np.ndarray]:
    """x = (c, ρ e₁), y = (c, ρ(cos φ e₁ + sin φ e₂)) with ρ² = L² − c² and ⟨x, y⟩ = s, the
    clamped maximiser of the bound (``centered_pair_bound``); r = 1, r' = 0."""
    s = min(max(w * w / 8, max(2 * c * c - L * L, 0.0)), L * L)
    rho2 = L * L - c * c
    cos = (s - c * c) / rho2
    x = np.zeros(d)
    y = np.zeros(d)
    x[0] = y[0] = c
    x[1] = math.sqrt(rho2)
    y[1] = math.sqrt(rho2) * cos
    y[2] = math.sqrt(rho2) * math.sqrt(max(0.0, 1 - cos * cos))
    return x, y


@pytest.mark.parametrize(("L", "w", "c"), [
    (1.0, 1.0, C), (1.0, 1.5, C), (1.0, 2.0, 0.9), (2.0, 1.0, 1.0), (0.3, 1.0, 0.2)])
def test_joint_sensitivity_holds_and_is_attained(L: float, w: float, c: float) -> None:
    """‖v(x, r) − v(y, r')‖ ≤ Δ_v over random contexts with x₀ = c (‖x‖ ≤ L, r, r' ∈ [0, 1]) and
    over a local search from the best random pair; the stated extremal pair attains Δ_v within
    1e-9, so the bound is exact — in the interior (s* = w²/8), clamped at the intercept's lower
    bound ⟨x, y⟩ ≥ 2c² − L² ((1, 2, 0.9): 0.62 > w²/8 = 0.5) and at L² ((0.3, 1, 0.2):
    w²/8 > L²)."""
    d = 4
    weights = coordinate_weights(d, "centered", w)
    bound = pair_sensitivity(L, "centered", w, c)
    rng = np.random.default_rng(21)
    n = 200_000
    x = intercept_inputs(rng, n, d, L, c)
    y = intercept_inputs(rng, n, d, L, c)
    r, rp = rng.random(n), rng.random(n)
    r[: n // 2], rp[: n // 2] = 1.0, 0.0  # the worst cases have opposite reward extremes
    sq = _pair_sq(x, y, r, rp, L, weights, c)
    assert sq.max() <= bound**2 * (1 + 1e-12)
    xs, ys = extremal_pair(L, w, c, d)
    worst = _pair_sq(xs[None], ys[None], np.ones(1), np.zeros(1), L, weights, c)[0]
    assert abs(worst - bound**2) <= 1e-9 * bound**2
    i = int(np.argmax(sq))
    bx, by, br, brp, best = x[i], y[i], r[i], rp[i], sq[i]
    for _ in range(3000):
        cx = intercept_inputs(rng, 1, d, L, c)[0] * 0.1 + bx * 0.9  # stays in the set: convex
        cy = intercept_inputs(rng, 1, d, L, c)[0] * 0.1 + by * 0.9
        cr, crp = np.clip([br + 0.05 * rng.normal(), brp + 0.05 * rng.normal()], 0, 1)
        val = _pair_sq(cx[None], cy[None], np.array([cr]), np.array([crp]), L, weights, c)[0]
        if val > best:
            bx, by, br, brp, best = cx, cy, cr, crp, val
    assert best <= bound**2 * (1 + 1e-12)


def test_the_bound_at_the_defaults_and_against_frobenius() -> None:
    """L = w = 1, c = 1/√2: Δ_v² = 2 + ½ + 1/32 = 2.53125 against frobenius's 4.5, and one
    batch's noise sd falls with it (σ_b ∝ Δ₂, which adds the rounding's 2√n)."""
    assert pair_sensitivity(1.0, "centered", 1.0, C) ** 2 == pytest.approx(2.53125)
    assert pair_sensitivity(1.0, "frobenius", 1.0) ** 2 == pytest.approx(4.5)
    fro = batch_noise_sd(5, 1.0, 1e-6, encoding="frobenius")
    cen = batch_noise_sd(5, 1.0, 1e-6, encoding="centered", intercept=C)
    assert cen / fro == pytest.approx(
        (128 * math.sqrt(2.53125) + 2 * math.sqrt(20)) / (128 * math.sqrt(4.5) + 2 * math.sqrt(20)),
        rel=0.01)
    with pytest.raises(ValueError, match="intercept"):
        pair_sensitivity(1.0, "centered", 1.0)
    with pytest.raises(ValueError, match="intercept"):
        pair_sensitivity(1.0, "centered", 1.0, 1.5)  # c > L
    with pytest.raises(ValueError, match="only the centered"):
        pair_sensitivity(1.0, "frobenius", 1.0, C)


def test_contexts_are_projected_onto_the_declared_intercept() -> None:
    """A context whose x₀ differs from c (or whose norm exceeds L) is released as its projection:
    x₀ = c, the rest clipped to √(L² − c²); so every release lies in the set the bound covers,
    whatever a device is given. Rewards are clipped to [0, 1] and centred."""
    weights = coordinate_weights(3, "centered", 1.5)
    x = np.array([[0.1, 3.0, 4.0], [C, 0.3, -0.4]])
    r = np.array([7.0, 0.25])
    v = clean_statistics(x, r, 1.0, weights, C)
    proj = np.array([[C, 0.6 * C, 0.8 * C], [C, 0.3, -0.4]])  # ‖rest‖ ≤ √(1 − ½) = C
    want = clean_statistics(proj, np.array([1.0, 0.25]), 1.0, weights, C)
    assert np.allclose(v, want)
    iu = np.triu_indices(3)
    raw = np.concatenate([proj[:, iu[0]] * proj[:, iu[1]],
                          (np.array([0.5, -0.25])[:, None]) * proj], axis=1)
    assert np.allclose(v, raw * weights)


def assert_unbiased(rand: SkellamRandomizer, x: np.ndarray, rng: np.random.Generator,
                    reps: int) -> tuple[np.ndarray, np.ndarray]:
    """Estimate (Σ x xᵀ, Σ r x) of contexts x with 0/1 rewards ``reps`` times from fresh
    reports; assert both means within 5 s.e. of the truth; return the (G̃, ũ) samples."""
    n = x.shape[0]
    r = rng.integers(0, 2, size=n).astype(float)
    G, u = x.T @ x, x.T @ r
    ests = [rand.estimate(rand.sufficient(rand.randomize(x, r, rng)), n) for _ in range(reps)]
    Gs = np.stack([e.G for e in ests])
    us = np.stack([e.u for e in ests])
    for sample, target in ((Gs, G), (us, u)):
        se = np.maximum(sample.std(axis=0, ddof=1), 1e-12) / np.sqrt(reps)
        assert np.all(np.abs(sample.mean(axis=0) - target) < 5 * se + 1e-9)
    return Gs, us


@pytest.fixture(scope="module")
def cz() -> SkellamRandomizer:
    return SkellamRandomizer(
        noise="devices", d=3, epsilon=1.0, delta=1e-6, batch_size=100, scale=16.0,
                             encoding="centered", u_weight=1.5, intercept=C)


def test_estimate_unbiased_with_the_stated_variances(cz: SkellamRandomizer) -> None:
    """The analyzer's G̃ (G̃₀₀ = n c², exact) and ũ = Σ(r − ½)x/w-part + ½ G̃ e₀ / c are
    unbiased for Σ x xᵀ and Σ r x (within 5 s.e.); the noise per entry is σ² on the diagonal,
    σ²/2 off it and σ²/w² + σ²/(8c²) on ũ (within the rounding's ±1/4 and 15%), as
    ``vector_proxy`` states."""
    rng = np.random.default_rng(22)
    n = 40
    x = intercept_inputs(rng, n, cz.d, 1.0, C)
    Gs, us = assert_unbiased(cz, x, rng, 4000)
    assert np.all(Gs[:, 0, 0] == n * C * C)
    s2, share = cz.scale**2, cz.share_variance
    var_diag = np.diagonal(Gs.var(axis=0, ddof=1))[1:] * s2
    var_off = Gs.var(axis=0, ddof=1)[np.triu_indices(cz.d, 1)] * s2
    var_u = us.var(axis=0, ddof=1)[1:] * s2
    factor_u = 1 / 1.5**2 + 1 / (8 * C * C)
    for var, f in ((var_diag, 1.0), (var_off, 0.5), (var_u, factor_u)):
        assert np.all(var > n * share * f * 0.85)
        assert np.all(var < n * (share + 0.25) * f * 1.15)
    assert cz.vector_proxy() == pytest.approx(cz.matrix_proxy() * factor_u)


def test_ledger_meets_the_target() -> None:
    """(1, 10⁻⁶), d = 5: the ledger's ε ≤ 1 at the smallest μ, Δ₂ the centered pair bound, and the
    ledger names the encoding and the intercept."""
    cen = SkellamRandomizer(
        noise="devices", d=5, epsilon=1.0, delta=1e-6, batch_size=400, encoding="centered",
                            u_weight=1.5, intercept=C)
    ledger = cen.ledger()
    assert ledger.central_epsilon is not None and 0.999 <= ledger.central_epsilon <= 1.0
    pair = pair_sensitivity(1.0, "centered", 1.5, C)
    assert cen.l2 == pytest.approx(128 * pair * (1 + 1e-9) + 2 * math.sqrt(20))
    assert "centered" in ledger.accounting and "x₀ = 0.707107" in ledger.accounting


def test_device_report_releases_the_projected_statistics(cz: SkellamRandomizer) -> None:
    """The CSPRNG path: the same (rounded) centred statistics plus a share of the stated
    variance."""
    x = np.array([C, 0.6 * C, 0.8 * C])
    want = cz.scale * cz.statistics(x[None], np.zeros(1))[0]
    z = np.array(cz.rounded(x, 0.0))
    assert np.all(np.abs(z - want) < 1)
    reports = np.array([cz.device_report(x, 0.0) for _ in range(2000)])
    assert abs((reports - want).var() / cz.share_variance - 1) < 0.12


def test_config_resolves_auto_and_checks_the_intercept() -> None:
    """'auto' is centered with an intercept, frobenius without; centered needs 0 < c ≤ L; the
    other encodings carry the intercept but do not use it (``encoding_intercept``)."""
    assert DDPLinUCBConfig(d=5, encoding="auto", intercept=C).encoding == "centered"
    assert DDPLinUCBConfig(d=5, encoding="auto").encoding == "frobenius"
    up = DDPLinUCBConfig(d=5, intercept=C)
    assert up.encoding == "upper" and up.encoding_intercept is None
    with pytest.raises(ValueError, match="intercept"):
        DDPLinUCBConfig(d=5, encoding="centered")
    with pytest.raises(ValueError, match="intercept"):
        DDPLinUCBConfig(d=5, encoding="centered", intercept=1.2)
