"""Zheng Alg. 5: the Gaussian report's sensitivity, its (ε, δ) calibration, and unbiasedness."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.shared.core.accounting.gaussian import gaussian_delta
from privbandit.shared.core.randomizers.base import upper_indices
from privbandit.shared.core.randomizers.gaussian import (
    GaussianRandomizer,
    report_sensitivity,
    report_sensitivity_joint,
)


def _clean(x: np.ndarray, r: np.ndarray) -> np.ndarray:
    iu = upper_indices(x.shape[1])
    return np.concatenate([x[:, iu[0]] * x[:, iu[1]], r[:, None] * x], axis=1)


def _clean_row(x: list[float], r: float) -> list[float]:
    """``_clean`` of one row in plain floats: the local ascent evaluates it ~10⁴ times per
    start, where numpy's per-call overhead on vectors of ≤ 5 dominated (checked against
    ``_clean``)."""
    d = len(x)
    return [x[i] * x[j] for i in range(d) for j in range(i, d)] + [r * a for a in x]


def _inside(v: list[float], radius: float) -> list[float]:
    """v projected onto the ball of ``radius``."""
    scale = min(1.0, radius / max(math.hypot(*v), 1e-300))
    return [a * scale for a in v]


@pytest.mark.parametrize("L", [0.5, 1.0, 2.0])
def test_sensitivity_bound_holds_and_is_nearly_attained(L: float) -> None:
    """No pair of inputs moves the clean report by more than the parts' separate bound; some pair
    gets within 15%."""
    rng = np.random.default_rng(7)
    d = 4
    n = 200_000
    x = rng.normal(size=(n, d))
    x *= L / np.linalg.norm(x, axis=1, keepdims=True)
    # Neighbours at every angle, including the worst ones (orthogonal-ish and opposite).
    y = rng.normal(size=(n, d))
    y *= L / np.linalg.norm(y, axis=1, keepdims=True)
    r1, r2 = rng.random(n).round(), rng.random(n).round()
    dist = np.linalg.norm(_clean(x, r1) - _clean(y, r2), axis=1)
    delta = report_sensitivity(L)
    assert dist.max() <= delta * (1 + 1e-12)
    assert dist.max() >= 0.85 * delta


def _worst_pair(L: float, d: int) -> tuple[np.ndarray, np.ndarray]:
    """The pair the module doc says attains the joint sup (y = y' = 1)."""
    x, xp = np.zeros((1, d)), np.zeros((1, d))
    if L * L >= 0.5:
        phi = 0.5 * math.asin(-0.5 / (L * L))
        x[0, :2] = L * math.cos(phi), L * math.sin(phi)
        xp[0, :2] = L * math.sin(phi), L * math.cos(phi)
    else:
        x[0, 0], xp[0, 0] = L, -L
    return x, xp


@pytest.mark.parametrize("L", [0.5, 0.7071, 0.8, 1.0, 2.0])
@pytest.mark.parametrize("d", [2, 5])
def test_joint_sensitivity_is_the_exact_sup(L: float, d: int) -> None:
    """The randomizer's Δ (``report_sensitivity_joint``) is the exact sup of the clean report's
    distance: an explicit pair attains it to rounding, and neither 5·10⁴ random pairs (norms in
    [0, L], rewards in [0, 1], angles near the worst one included) nor a local ascent from the
    best of them exceeds it."""
    from scipy.optimize import minimize

    delta = report_sensitivity_joint(L)
    x, xp = _worst_pair(L, d)
    one = np.ones(1)
    attained = float(np.linalg.norm(_clean(x, one) - _clean(xp, one)))
    assert attained == pytest.approx(delta, rel=1e-12)
    assert GaussianRandomizer(d, 1.0, 1e-6, L).sensitivity == delta
    assert delta < report_sensitivity(L)  # strictly tighter than the separate sups

    rng = np.random.default_rng(11)
    n = 50_000

    def ball(k: int) -> np.ndarray:
        v = rng.normal(size=(k, d))
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        return v * L * rng.choice([1.0, rng.random()], size=(k, 1)) ** 0.1

    a, b = ball(n), ball(n)
    b[: n // 2] = -a[: n // 2] + 0.3 * ball(n // 2)  # near-opposite neighbours
    b *= np.minimum(1, L / np.linalg.norm(b, axis=1, keepdims=True))
    r1, r2 = rng.random(n), rng.random(n)
    r1[: n // 2], r2[: n // 2] = 1.0, 1.0
    dist = np.linalg.norm(_clean(a, r1) - _clean(b, r2), axis=1)
    assert dist.max() <= delta * (1 + 1e-12)

    def pair(z: np.ndarray) -> tuple[list[float], list[float], float, float]:
        w = z.tolist()
        y1, y2 = (min(max(t, 0.0), 1.0) for t in w[2 * d :])
        return _inside(w[:d], L), _inside(w[d : 2 * d], L), y1, y2

    def neg(z: np.ndarray) -> float:
        u, v, y1, y2 = pair(z)
        return -math.dist(_clean_row(u, y1), _clean_row(v, y2))

    for i in np.argsort(dist)[-8:]:
        z0 = np.concatenate([a[i], b[i], [r1[i], r2[i]]])
        res = minimize(neg, z0, method="Nelder-Mead",
                       options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 4000})
        best = -res.fun
        assert best <= delta * (1 + 1e-9)
        # The plain-float report is the array one: the ascent measured the report itself.
        u, v, y1, y2 = (np.array(t) for t in pair(res.x))
        assert best == pytest.approx(
            np.linalg.norm(_clean(u[None], y1[None]) - _clean(v[None], y2[None])), rel=1e-12)
    assert best >= 0.97 * delta  # the ascent does find the sup's neighbourhood


@pytest.mark.parametrize("eps,delta", [(0.5, 1e-6), (1.0, 1e-5), (4.0, 1e-8)])
def test_sigma_achieves_exactly_its_epsilon_delta(eps: float, delta: float) -> None:
    """σ is the smallest noise for which the analytic Gaussian mechanism is (ε, δ)-DP."""
    rz = GaussianRandomizer(d=5, epsilon=eps, delta=delta, L=1.0)
    achieved = gaussian_delta(eps, rz.sigma, rz.sensitivity)
    assert achieved <= delta
    assert achieved == pytest.approx(delta, rel=1e-6)
    assert gaussian_delta(eps, rz.sigma * 0.99, rz.sensitivity) > delta


def test_gaussian_estimates_are_unbiased_and_symmetric() -> None:
    rng = np.random.default_rng(3)
    d, n, reps = 3, 30, 4000
    x = rng.normal(size=(n, d))
    x /= 1.2 * np.linalg.norm(x, axis=1, keepdims=True)
    r = rng.random(n)
    rz = GaussianRandomizer(d, epsilon=2.0, delta=1e-6)
    rows = rz.randomize(np.tile(x, (reps, 1)), np.tile(r, reps), rng).reshape(reps, n, -1)
    stats = rows.sum(axis=1)
    Gs = np.stack([rz.estimate(s, n).G for s in stats])
    us = np.stack([rz.estimate(s, n).u for s in stats])
    assert np.allclose(Gs, np.transpose(Gs, (0, 2, 1)))
    for est, truth in ((Gs, x.T @ x), (us, x.T @ r)):
        se = est.std(axis=0, ddof=1) / math.sqrt(reps)
        assert (np.abs(est.mean(axis=0) - truth) <= 4.5 * se).all()
    # Per-entry variance is n σ² (the proxy the widths use), within 4 s.e. of a variance.
    tol = 4 * math.sqrt(2 / (reps - 1))
    assert np.allclose(Gs.var(axis=0) / (n * rz.matrix_proxy()), 1, atol=tol)


def test_wire_form() -> None:
    rz = GaussianRandomizer(3, epsilon=1.0, delta=1e-6)
    row = rz.randomize(np.array([[0.1, 0.2, 0.3]]), np.array([1.0]), np.random.default_rng(0))[0]
    assert np.array_equal(rz.from_bytes(rz.to_bytes(row)), row)
    with pytest.raises(ValueError):
        rz.from_bytes(b"\x00" * 7)
    with pytest.raises(ValueError):
        rz.from_bytes(np.full(rz.width, np.nan).tobytes())


def test_admissible_box_refuses_honest_reports_with_probability_two_to_minus_40() -> None:
    """The union bound is exact at 2⁻⁴⁰, and the clean ranges are the tight ones: an extreme
    honest row (‖x‖ = L, y = 1, coordinates at ±L/√2) sits inside the box by exactly τσ."""
    from scipy.stats import norm

    from privbandit.shared.core.randomizers.gaussian import HONEST_REFUSAL

    rand = GaussianRandomizer(d=4, epsilon=1.0, delta=1e-6, L=1.0)
    assert rand.width * 2 * norm.sf(rand.tail_z) == pytest.approx(HONEST_REFUSAL, rel=1e-9)
    assert HONEST_REFUSAL == 2.0**-40
    s = 1 / math.sqrt(2)
    for x in (np.array([[s, s, 0, 0]]), np.array([[s, -s, 0, 0]]), np.array([[1.0, 0, 0, 0]])):
        clean = _clean(x, np.array([1.0]))[0]
        slack = np.minimum(clean - rand.report_low, rand.report_high - clean)
        assert slack.min() == pytest.approx(rand.tail_z * rand.sigma, rel=1e-12)


def test_honest_reports_pass_and_forged_ones_are_refused() -> None:
    """2·10⁵ honest worst-case reports all decode (expected refusals: 2·10⁵·2⁻⁴⁰ ≈ 2·10⁻⁷); one
    entry just past the box, or the 1e300 of a forged report, is refused."""
    rng = np.random.default_rng(7)
    rand = GaussianRandomizer(d=3, epsilon=2.0, delta=1e-6, L=1.0)
    n = 200_000
    x = rng.normal(size=(n, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    rows = rand.randomize(x, np.ones(n), rng)
    ok = (rows >= rand.report_low) & (rows <= rand.report_high)
    assert ok.all()
    row = rows[0].copy()
    assert np.array_equal(rand.from_bytes(rand.to_bytes(row)), row)
    for j in (0, rand.width - 1):
        for value in (np.nextafter(rand.report_high[j], np.inf), 1e300, -1e300):
            bad = row.copy()
            bad[j] = value
            with pytest.raises(ValueError, match="outside what the mechanism produces"):
                rand.from_bytes(bad.astype("<f8").tobytes())
