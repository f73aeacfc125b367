"""ldp-linucb's report encodings (shared/core/randomizers/gaussian.py, *Encodings*): ``frobenius``
(off-diagonals × √2), ``centered`` (frobenius with (y − ½) x, contexts with an intercept
x₀ = c) and ``centered-upper`` (off-diagonals once, (y − ½) x). Each joint sensitivity holds over
random inputs and a local search and is attained by a stated pair (so it is exact); σ is the
analytic Gaussian calibration at that Δ; the analyzer's reconstruction is unbiased with the stated
per-entry variances; the admissible box is tight and refuses forged entries; a context off the
intercept is refused; the config resolves 'auto' and ldp-glb takes no encoding."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.shared.core.accounting.gaussian import gaussian_delta
from privbandit.shared.core.policies.config import LDPGLBConfig, LDPLinUCBConfig
from privbandit.shared.core.randomizers.gaussian import (
    GaussianRandomizer,
    centered_upper_bound,
    encoding_sensitivity,
)

C = 1 / math.sqrt(2)


def release(x: np.ndarray, y: np.ndarray, encoding: str, w: float, c: float | None
            ) -> np.ndarray:
    """The clean report rows, computed here independently of the module: (diag(x xᵀ),
    b·offdiag(x xᵀ), w·a x) with b = √2 for frobenius/centered, a = y − ½ under an intercept."""
    d = x.shape[1]
    i, j = np.triu_indices(d)
    b = math.sqrt(2) if encoding in ("frobenius", "centered") else 1.0
    gram = x[:, i] * x[:, j] * np.where(i == j, 1.0, b)
    a = y - 0.5 if c is not None else y
    return np.concatenate([gram, w * a[:, None] * x], axis=1)


def dist_sq(x: np.ndarray, xp: np.ndarray, y: np.ndarray, yp: np.ndarray, encoding: str,
            w: float, c: float | None) -> np.ndarray:
    return np.sum((release(x, y, encoding, w, c) - release(xp, yp, encoding, w, c)) ** 2, axis=1)


def contexts(rng: np.random.Generator, n: int, d: int, L: float, c: float | None) -> np.ndarray:
    """n contexts with ‖x‖ ≤ L (and x₀ = c if given), norms spread towards L."""
    if c is None:
        v = rng.normal(size=(n, d))
        return v * L * rng.random((n, 1)) ** 0.2 / np.linalg.norm(v, axis=1, keepdims=True)
    rest = rng.normal(size=(n, d - 1))
    rest *= math.sqrt(L * L - c * c) * rng.random((n, 1)) ** 0.2 / np.linalg.norm(
        rest, axis=1, keepdims=True)
    return np.concatenate([np.full((n, 1), c), rest], axis=1)


def attaining_pair(encoding: str, L: float, w: float, c: float | None, d: int
                   ) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The module doc's extremal (x, x', y, y') of each encoding."""
    x, xp = np.zeros(d), np.zeros(d)
    if encoding == "frobenius":
        A, U = L**4, (w * L) ** 2
        if U > 2 * A:
            x[0], xp[0] = L, -L
            return x, xp, 1.0, 1.0
        cos = -U / (2 * A)
        x[0] = L
        xp[0], xp[1] = L * cos, L * math.sqrt(1 - cos * cos)
        return x, xp, 1.0, 1.0
    assert c is not None
    R2 = L * L - c * c
    R = math.sqrt(R2)
    x[0] = xp[0] = c
    if encoding == "centered":
        t = min(max(w * w / 8, max(2 * c * c - L * L, 0.0)), L * L)
        cos = (t - c * c) / R2
        x[1] = R
        xp[1], xp[2] = R * cos, R * math.sqrt(max(0.0, 1 - cos * cos))
        return x, xp, 1.0, 0.0
    # centered-upper: the maximiser t of the bound, α = R(cos φ, sin φ), β = R(sin φ, cos φ)
    k, low = w * w / 4, 2 * c * c - L * L
    ts = [min(max((c * c + k) / 2, max(low, 0.0)), L * L)]
    if low < 0:
        ts.append(min(max((c * c - k) / 2, low), 0.0))

    def f(t: float) -> float:
        return L**4 - t * t + R2 * R2 - (t - c * c) ** 2 + 2 * k * (L * L + abs(t))

    t = max(ts, key=f)
    phi = 0.5 * math.asin((t - c * c) / R2)
    x[1], x[2] = R * math.cos(phi), R * math.sin(phi)
    xp[1], xp[2] = R * math.sin(phi), R * math.cos(phi)
    return x, xp, 1.0, (0.0 if t >= 0 else 1.0)


CASES = [
    ("frobenius", 1.0, 1.0, None), ("frobenius", 1.0, 1.5, None), ("frobenius", 0.5, 1.0, None),
    ("centered", 1.0, 1.0, C), ("centered", 1.0, 1.5, C), ("centered", 1.0, 2.0, 0.9),
    ("centered", 0.3, 1.0, 0.2),
    ("centered-upper", 1.0, 1.0, C), ("centered-upper", 1.0, 1.5, C),
    ("centered-upper", 1.0, 0.5, 0.3), ("centered-upper", 2.0, 1.0, 1.0),
    ("centered-upper", 0.3, 1.0, 0.25),
]


@pytest.mark.parametrize(("encoding", "L", "w", "c"), CASES)
def test_joint_sensitivity_holds_and_is_attained(encoding: str, L: float, w: float,
                                                  c: float | None) -> None:
    """No random pair (2·10⁵, rewards at the extremes for half) nor a local search from the best
    exceeds Δ²; the stated pair attains it within 1e-9: the bound is exact (cases cover the
    interior maximiser, the intercept's clamp t ≥ 2c² − L², the clamp at L², and centered-upper's
    negative-t branch (c = 0.3))."""
    d = 4
    bound = encoding_sensitivity(L, encoding, w, c) ** 2
    rng = np.random.default_rng(31)
    n = 200_000
    x, xp = contexts(rng, n, d, L, c), contexts(rng, n, d, L, c)
    y, yp = rng.random(n), rng.random(n)
    y[: n // 2] = 1.0
    yp[: n // 4], yp[n // 4: n // 2] = 0.0, 1.0
    sq = dist_sq(x, xp, y, yp, encoding, w, c)
    assert sq.max() <= bound * (1 + 1e-12)
    ax, axp, ay, ayp = attaining_pair(encoding, L, w, c, d)
    assert np.linalg.norm(ax) <= L * (1 + 1e-12) and np.linalg.norm(axp) <= L * (1 + 1e-12)
    worst = dist_sq(ax[None], axp[None], np.array([ay]), np.array([ayp]), encoding, w, c)[0]
    assert abs(worst - bound) <= 1e-9 * bound
    i = int(np.argmax(sq))
    bx, bxp, by, byp, best = x[i], xp[i], y[i], yp[i], sq[i]
    for _ in range(3000):  # convex steps inside the context set
        cx = contexts(rng, 1, d, L, c)[0] * 0.1 + bx * 0.9
        cxp = contexts(rng, 1, d, L, c)[0] * 0.1 + bxp * 0.9
        cy, cyp = np.clip([by + 0.05 * rng.normal(), byp + 0.05 * rng.normal()], 0, 1)
        val = dist_sq(cx[None], cxp[None], np.array([cy]), np.array([cyp]), encoding, w, c)[0]
        if val > best:
            bx, bxp, by, byp, best = cx, cxp, cy, cyp, val
    assert best <= bound * (1 + 1e-12)


def test_the_bounds_at_the_defaults() -> None:
    """L = 1, c = 1/√2: Δ² 4.5 (plain, frobenius), 2 + ½ + 1/32 (centered, w = 1), 1.78125
    (centered-upper, w = 1: t = 3/8); the intercept is required and bounded by L."""
    assert encoding_sensitivity(1.0) ** 2 == pytest.approx(4.5)
    assert encoding_sensitivity(1.0, "frobenius") ** 2 == pytest.approx(4.5)
    assert encoding_sensitivity(1.0, "centered", 1.0, C) ** 2 == pytest.approx(2.53125)
    assert centered_upper_bound(1.0, 1.0, C) == pytest.approx(1.78125)
    for bad in (None, 1.5):
        with pytest.raises(ValueError, match="intercept"):
            encoding_sensitivity(1.0, "centered-upper", 1.0, bad)
    with pytest.raises(ValueError, match="intercept"):
        encoding_sensitivity(1.0, "frobenius", 1.0, C)
    with pytest.raises(ValueError, match="u_weight 1"):
        encoding_sensitivity(1.0, "plain", 1.5)


@pytest.mark.parametrize("encoding", ["frobenius", "centered", "centered-upper"])
def test_sigma_is_the_calibration_at_the_encodings_delta(encoding: str) -> None:
    """σ is the smallest analytic-Gaussian noise that is (ε, δ)-DP at the encoding's Δ."""
    c = None if encoding == "frobenius" else C
    rz = GaussianRandomizer(5, 1.0, 1e-6, 1.0, encoding, 1.5, c)
    assert rz.sensitivity == encoding_sensitivity(1.0, encoding, 1.5, c)
    achieved = gaussian_delta(1.0, rz.sigma, rz.sensitivity)
    assert achieved <= 1e-6 and achieved == pytest.approx(1e-6, rel=1e-6)
    assert gaussian_delta(1.0, rz.sigma * 0.99, rz.sensitivity) > 1e-6


@pytest.mark.parametrize(("encoding", "w"), [("centered", 1.5), ("centered-upper", 0.7),
                                              ("frobenius", 1.5)])
def test_estimate_unbiased_with_the_stated_variances(encoding: str, w: float) -> None:
    """G̃ (G̃₀₀ = n c², exact, under an intercept) and ũ (Σ(y − ½)x part + ½ G̃ e₀ / c) are
    unbiased for Σ x xᵀ and Σ y x (within 5 s.e.); the per-entry variances are nσ² on the
    diagonal, nσ²/b² off it and n × ``vector_proxy`` on ũ₁.. (ũ₀: nσ²/w², its reconstruction
    term is exact) (within 4 s.e. of a variance)."""
    c = None if encoding == "frobenius" else C
    rz = GaussianRandomizer(3, 2.0, 1e-6, 1.0, encoding, w, c)
    rng = np.random.default_rng(32)
    n, reps = 30, 4000
    x = contexts(rng, n, 3, 1.0, c)
    y = rng.random(n)
    rows = rz.randomize(np.tile(x, (reps, 1)), np.tile(y, reps), rng).reshape(reps, n, -1)
    ests = [rz.estimate(rz.sufficient(s), n) for s in rows]
    Gs, us = np.stack([e.G for e in ests]), np.stack([e.u for e in ests])
    assert np.allclose(Gs, np.transpose(Gs, (0, 2, 1)))
    for est, truth in ((Gs, x.T @ x), (us, x.T @ y)):
        se = np.maximum(est.std(axis=0, ddof=1), 1e-12) / math.sqrt(reps)
        assert (np.abs(est.mean(axis=0) - truth) <= 5 * se + 1e-9).all()
    tol = 4 * math.sqrt(2 / (reps - 1))
    first = 0 if c is None else 1  # G̃₀₀ is exact under an intercept
    if c is not None:
        assert np.all(Gs[:, 0, 0] == n * c * c)
    var = Gs.var(axis=0, ddof=1) / n
    b2 = 2.0 if encoding != "centered-upper" else 1.0
    assert np.allclose(np.diagonal(var)[first:] / rz.matrix_proxy(), 1, atol=tol)
    assert np.allclose(var[np.triu_indices(3, 1)] / rz.offdiag_proxy(), 1, atol=tol)
    assert rz.offdiag_proxy() == pytest.approx(rz.sigma**2 / b2)
    var_u = us.var(axis=0, ddof=1) / n
    assert np.allclose(var_u[first:] / rz.vector_proxy(), 1, atol=tol)
    # ũ₀ = Σ(y − ½)c/… + ½ n c: the reconstruction adds nothing there (G̃₀₀ is exact)
    assert var_u[0] / (rz.sigma**2 / w**2) == pytest.approx(1, abs=tol)
    extra = 0.0 if c is None else rz.sigma**2 / b2 / (4 * c * c)
    assert rz.vector_proxy() == pytest.approx(rz.sigma**2 / w**2 + extra)


@pytest.mark.parametrize(("encoding", "w", "c"), [
    ("centered", 1.5, C), ("centered-upper", 1.0, C), ("frobenius", 1.5, None),
    ("centered", 1.0, 0.9)])
def test_admissible_box_is_tight_and_refuses_forgeries(encoding: str, w: float,
                                                       c: float | None) -> None:
    """Every entry's clean range is attained by some honest context (the box sits exactly τσ
    beyond it there; entry (0, 0) is c² exactly under an intercept); 10⁵ honest extreme
    reports all decode; one entry just past the box, or ±1e300, is refused."""
    d = 3
    rz = GaussianRandomizer(d, 1.0, 1e-6, 1.0, encoding, w, c)
    rng = np.random.default_rng(33)
    n = 100_000
    x = contexts(rng, n, d, 1.0, c)
    x[:, int(c is not None):] *= 1.0 / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1)
    y = rng.integers(0, 2, n).astype(float)
    clean = release(x, y, encoding, w, c)
    lo, hi = rz.report_low + rz.tail_z * rz.sigma, rz.report_high - rz.tail_z * rz.sigma
    assert (clean >= lo - 1e-12).all() and (clean <= hi + 1e-12).all()
    # the clean ranges are tight: random contexts reach within 2% of each end
    span = np.maximum(hi - lo, 1e-12)
    assert np.all((clean.max(axis=0) - hi) / span > -0.02)
    assert np.all((clean.min(axis=0) - lo) / span < 0.02)
    rows = rz.randomize(x, y, rng)
    assert ((rows >= rz.report_low) & (rows <= rz.report_high)).all()
    row = rows[0]
    assert np.array_equal(rz.from_bytes(rz.to_bytes(row)), row)
    for j in (0, 1, rz.width - 1):
        for value in (np.nextafter(rz.report_high[j], np.inf), 1e300, -1e300):
            bad = row.copy()
            bad[j] = value
            with pytest.raises(ValueError, match="outside what the mechanism produces"):
                rz.from_bytes(bad.astype("<f8").tobytes())


def test_contexts_off_the_intercept_are_refused_and_releases_projected() -> None:
    """A device refuses x₀ ≠ c (beyond a relative 1e-9); x₀ within it is released as exactly c,
    and the rest is clipped so that ‖x‖ ≤ L (the set the bound covers)."""
    rz = GaussianRandomizer(3, 1.0, 1e-6, 1.0, "centered", 1.0, C)
    rng = np.random.default_rng(34)
    with pytest.raises(ValueError, match="x\\[0\\]"):
        rz.randomize(np.array([[0.5, 0.1, 0.1]]), np.array([1.0]), rng)
    near = np.array([[C * (1 + 5e-10), 0.6 * C, 0.8 * C]])
    clean = rz._clean(near, np.array([1.0]))
    exact = release(np.array([[C, 0.6 * C, 0.8 * C]]), np.array([1.0]), "centered", 1.0, C)
    assert np.allclose(clean, exact, rtol=0, atol=1e-15)


def test_plain_is_alg5_unchanged() -> None:
    """The default encoding is Alg. 5's report, bit for bit: same Δ, σ, rows, estimate."""
    rz = GaussianRandomizer(3, 1.0, 1e-6)
    assert rz.encoding == "plain" and rz.sensitivity == math.sqrt(4.5)
    x, y = np.array([[0.1, -0.2, 0.3]]), np.array([0.4])
    rows = rz.randomize(x, y, np.random.default_rng(5))
    noise = np.random.default_rng(5).normal(0.0, rz.sigma, size=(1, rz.width))
    i, j = np.triu_indices(3)
    assert np.array_equal(rows, np.concatenate([x[:, i] * x[:, j], y[:, None] * x], 1) + noise)
    assert rz.vector_proxy() == rz.matrix_proxy() == rz.offdiag_proxy() == rz.sigma**2


def test_config_auto_intercept_and_ldp_glb() -> None:
    """'auto' is centered (w = LDP_CENTERED_U_WEIGHT unless given) with an intercept, plain
    without; the centered encodings need 0 < c ≤ L; ldp-glb carries the intercept unused and
    refuses an encoding; the policy's randomizer and ledger follow the config."""
    from privbandit.shared.core.policies.config import LDP_CENTERED_U_WEIGHT
    from privbandit.shared.core.policies.registry import build_policy

    auto = LDPLinUCBConfig(d=5, encoding="auto", intercept=C)
    assert auto.encoding == "centered" and auto.u_weight == LDP_CENTERED_U_WEIGHT
    assert auto.encoding_intercept == C
    assert LDPLinUCBConfig(d=5, encoding="auto", intercept=C, u_weight=2).u_weight == 2
    plain = LDPLinUCBConfig(d=5, encoding="auto")
    assert plain.encoding == "plain" and plain.encoding_intercept is None
    assert LDPLinUCBConfig(d=5, intercept=C).encoding_intercept is None
    for bad in ({"encoding": "centered"}, {"encoding": "centered-upper", "intercept": 1.2},
                {"u_weight": 2.0}):
        with pytest.raises(ValueError):
            LDPLinUCBConfig(d=5, **bad)
    glb = LDPGLBConfig(d=5, intercept=C)
    assert glb.encoding == "plain" and glb.encoding_intercept is None
    for bad in ({"encoding": "centered", "intercept": C}, {"encoding": "frobenius"},
                {"encoding": "auto", "intercept": C}):
        with pytest.raises(ValueError, match="ldp-glb has its own report"):
            LDPGLBConfig(d=5, **bad)
    policy = build_policy(auto)
    rz = policy.randomizer
    assert (rz.encoding, rz.intercept, rz.u_weight) == ("centered", C, auto.u_weight)
    text = policy.ledger().accounting
    assert "(y − ½) x with x₀ = 0.707107" in text and f"σ = {rz.sigma:.4g}" in text
