"""ddp-linucb's ``centered`` encoding with several intercept coordinates (per-arm, disjoint
features x = e_a ⊗ c whose every block starts with c; shared/core/randomizers/skellam.py,
*Encodings*): the pair bound over the feasible ⟨x, y⟩ (across and within blocks), the projection
onto {⟨e, x⟩ = c, ‖x‖ ≤ L}, the unbiased reconstruction of Σ r x with the released diagonal
kept, honest reports inside their entry ranges, the device check, and the config's and the
simulator's resolution of ``encoding = "auto"``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.shared.core.logged import arm_features, disjoint_intercept_coords
from privbandit.shared.core.policies.config import DDPLinUCBConfig
from privbandit.shared.core.randomizers.skellam import (
    SkellamRandomizer,
    centered_pair_bound,
    clean_statistics,
    coordinate_weights,
    entry_ranges,
    onto_intercept,
    pair_sensitivity,
)
from tests.shared.core.randomizers.test_skellam_centered import assert_unbiased

C = 1 / math.sqrt(2)


def disjoint_contexts(rng: np.random.Generator, n: int, K: int, p: int, L: float, c: float,
                      arms: np.ndarray | None = None) -> np.ndarray:
    """n per-arm feature vectors e_a ⊗ (c, v), ‖v‖ ≤ √(L² − c²) (norms spread towards the
    edge, where the worst cases are), built by the library's ``arm_features``; arm a uniform
    unless ``arms`` is given."""
    v = rng.normal(size=(n, p - 1))
    room = math.sqrt(L * L - c * c)
    v *= room * rng.random((n, 1)) ** 0.2 / np.linalg.norm(v, axis=1, keepdims=True)
    ctx = np.concatenate([np.full((n, 1), c), v], axis=1)
    X = arm_features({"context": ctx, "n_actions": K, "feature_map": "disjoint"})
    a = rng.integers(0, K, size=n) if arms is None else arms
    return X[np.arange(n), a]


def _pair_sq(x: np.ndarray, y: np.ndarray, r: np.ndarray, rp: np.ndarray, L: float,
             weights: np.ndarray, c: float, coords: tuple[int, ...]) -> np.ndarray:
    return np.sum((clean_statistics(x, r, L, weights, c, coords)
                   - clean_statistics(y, rp, L, weights, c, coords)) ** 2, axis=1)


@pytest.mark.parametrize(("L", "w", "c"), [(1.0, 1.0, C), (1.0, 1.5, C), (1.0, 2.0, 0.9),
                                           (2.0, 1.0, 1.5)])
def test_pair_bound_holds_across_and_within_blocks(L: float, w: float, c: float) -> None:
    """With k ≥ 2 intercept coordinates the feasible |⟨x, y⟩| is [0, L²] whatever c, so the
    bound is the unclamped maximum at s = min(w²/8, L²): it holds over random disjoint pairs
    (the same arm and different arms) and a local search from the best of them, and it is
    attained (within 1e-9) on the set the device accepts, {⟨e, x⟩ = c, ‖x‖ ≤ L}, also where the
    single intercept's clamp 2c² − L² exceeds w²/8 ((1, 2, 0.9): 0.62 > 0.5, there the k ≥ 2
    bound is strictly the larger)."""
    K, p = 3, 4
    d, coords = K * p, disjoint_intercept_coords(K * p, K)
    weights = coordinate_weights(d, "centered", w)
    bound = pair_sensitivity(L, "centered", w, c, coords)
    assert bound**2 == pytest.approx(centered_pair_bound(L, w, c, k=K))
    assert bound >= pair_sensitivity(L, "centered", w, c) - 1e-12
    if 2 * c * c - L * L > w * w / 8:
        assert bound > pair_sensitivity(L, "centered", w, c) + 1e-6
    rng = np.random.default_rng(31)
    n = 200_000
    x = disjoint_contexts(rng, n, K, p, L, c)
    y = disjoint_contexts(rng, n, K, p, L, c)
    r, rp = rng.random(n), rng.random(n)
    r[: n // 2], rp[: n // 2] = 1.0, 0.0
    sq = _pair_sq(x, y, r, rp, L, weights, c, coords)
    assert sq.max() <= bound**2 * (1 + 1e-12)
    # The maximiser on the set the device enforces, {⟨e, x⟩ = c, ‖x‖ ≤ L}: x = (c/k) e + a,
    # y = (c/k) e + b with a, b ⊥ e of norm ρ_k = √(L² − c²/k), t = c²/k + ⟨a, b⟩ = s*.
    s = min(w * w / 8, L * L)
    rho2 = L * L - c * c / K
    cos = (s - c * c / K) / rho2
    xs, ys = np.zeros(d), np.zeros(d)
    xs[list(coords)] = ys[list(coords)] = c / K
    xs[1] = math.sqrt(rho2)
    ys[1], ys[2] = math.sqrt(rho2) * cos, math.sqrt(rho2) * math.sqrt(max(0.0, 1 - cos * cos))
    worst = _pair_sq(xs[None], ys[None], np.ones(1), np.zeros(1), L, weights, c, coords)[0]
    assert worst == pytest.approx(bound**2, rel=1e-9)
    i = int(np.argmax(sq))
    bx, by, br, brp, best = x[i], y[i], r[i], rp[i], sq[i]
    for _ in range(2000):
        cx = disjoint_contexts(rng, 1, K, p, L, c, arms=np.array([int(np.argmax(bx[::p]))]))[0]
        cy = disjoint_contexts(rng, 1, K, p, L, c, arms=np.array([int(np.argmax(by[::p]))]))[0]
        cx, cy = 0.1 * cx + 0.9 * bx, 0.1 * cy + 0.9 * by  # same block: the set is convex
        cr, crp = np.clip([br + 0.05 * rng.normal(), brp + 0.05 * rng.normal()], 0, 1)
        val = _pair_sq(cx[None], cy[None], np.array([cr]), np.array([crp]), L, weights, c,
                       coords)[0]
        if val > best:
            bx, by, br, brp, best = cx, cy, cr, crp, val
    assert best <= bound**2 * (1 + 1e-12)


def test_general_contexts_on_the_hyperplane_stay_below_the_bound() -> None:
    """The bound needs only ⟨e, x⟩ = c and ‖x‖ ≤ L, not disjointness: random points of that set
    (c split over several intercept coordinates) never exceed it, and a pair in different blocks
    attains it where the feasible t = s* = w²/8 (w = 1: s* = 1/8 reached by tilting y)."""
    d, coords, L, w, c = 6, (0, 3), 1.0, 1.0, C
    weights = coordinate_weights(d, "centered", w)
    bound = pair_sensitivity(L, "centered", w, c, coords)
    rng = np.random.default_rng(32)
    n = 100_000
    e = np.zeros(d)
    e[list(coords)] = 1.0

    def points(m: int) -> np.ndarray:
        z = rng.normal(size=(m, d))
        z -= np.outer(z @ e, e) / 2
        room = math.sqrt(L * L - c * c / 2)
        z *= room * rng.random((m, 1)) ** 0.2 / np.linalg.norm(z, axis=1, keepdims=True)
        return z + (c / 2) * e

    x, y = points(n), points(n)
    assert np.allclose(x @ e, c) and (np.linalg.norm(x, axis=1) <= L + 1e-12).all()
    r, rp = np.ones(n), np.zeros(n)
    assert _pair_sq(x, y, r, rp, L, weights, c, coords).max() <= bound**2 * (1 + 1e-12)
    xs, ys = np.zeros(d), np.zeros(d)
    xs[0], xs[1] = c, C  # ‖x‖ = 1
    ys[3] = c
    ys[1], ys[2] = 0.125 / C, math.sqrt(0.5 - (0.125 / C) ** 2)  # ⟨x, y⟩ = 1/8, ‖y‖ = 1
    worst = _pair_sq(xs[None], ys[None], r[:1], rp[:1], L, weights, c, coords)[0]
    assert worst == pytest.approx(bound**2, rel=1e-9)


def test_projection_onto_the_intercept_hyperplane() -> None:
    """A context off {⟨e, x⟩ = c, ‖x‖ ≤ L} is released as its projection (component along e set
    to (c/k) e, the rest clipped to √(L² − c²/k)); a disjoint context is unchanged; with the
    single coordinate (0,) the projection is the original one."""
    coords = (0, 2)
    x = np.array([[C, 0.5, 0.0, 0.5], [0.0, 0.0, C, 0.3], [1.0, 3.0, 1.0, 4.0]])
    out = onto_intercept(x, C, 1.0, coords)
    assert np.allclose(out[:2], x[:2])
    assert out[2] @ np.array([1, 0, 1, 0]) == pytest.approx(C)
    assert np.linalg.norm(out[2]) == pytest.approx(1.0)
    # the removed part is along e and the kept part is a positive multiple of x's rest
    rest = x[2] - (x[2] @ np.array([1, 0, 1, 0]) / 2) * np.array([1, 0, 1, 0])
    got = out[2] - (C / 2) * np.array([1, 0, 1, 0])
    assert np.allclose(got / np.linalg.norm(got), rest / np.linalg.norm(rest))
    y = np.array([[0.1, 3.0, 4.0]])
    assert np.allclose(onto_intercept(y, C, 1.0, (0,)), [[C, 0.6 * C, 0.8 * C]])


@pytest.fixture(scope="module")
def disjoint_rand() -> SkellamRandomizer:
    return SkellamRandomizer(d=6, epsilon=1.0, delta=1e-6, batch_size=100, scale=16.0,
                             encoding="centered", u_weight=1.5, intercept=C, noise="devices",
                             intercept_coords=(0, 3))


def test_estimate_unbiased_with_the_released_diagonal(disjoint_rand: SkellamRandomizer) -> None:
    """Σ r x = Σ (r − ½) x + ½ G̃ e / c over disjoint contexts: G̃ and ũ are unbiased for Σ x xᵀ
    and Σ r x (within 5 s.e.), G̃'s diagonal is the released one (it varies: no entry is set),
    and ũ's variance per entry stays within ``vector_proxy`` (plus 15%)."""
    cz = disjoint_rand
    rng = np.random.default_rng(33)
    n = 40
    x = disjoint_contexts(rng, n, 2, 3, 1.0, C)
    Gs, us = assert_unbiased(cz, x, rng, 3000)
    assert Gs[:, 0, 0].std() > 0 and Gs[:, 3, 3].std() > 0
    var_u = us.var(axis=0, ddof=1)
    assert np.all(var_u < n * cz.vector_proxy() * 1.15)
    # the intercept entries carry the most: one diagonal and one off-diagonal entry of G̃
    s2 = cz.scale**2
    want0 = n * cz.share_variance * (1 / 1.5**2 + (0.5 / C) ** 2 * 1.5) / s2
    assert var_u[0] == pytest.approx(want0, rel=0.15)


def test_honest_reports_lie_in_their_entry_ranges() -> None:
    """Every honest report of disjoint contexts (random, and the extremes: all of the block's
    norm on one coordinate, r ∈ {0, 1}) lies in ``entry_ranges`` before any clipping, so the
    Prio3/Paillier range proofs never refuse it and nothing is clipped; the randomizer's own
    ``from_bytes`` accepts it."""
    K, p = 5, 4
    d, coords = K * p, disjoint_intercept_coords(K * p, K)
    rand = SkellamRandomizer(d=d, epsilon=1.0, delta=1e-6, batch_size=500, encoding="centered",
                             u_weight=1.5, intercept=C, intercept_coords=coords)
    lo, hi = (np.asarray(v) for v in entry_ranges(d, rand.scale, 1.0, "centered", 1.5, C,
                                                  coords))
    assert np.array_equal(lo, rand.range_lo) and np.array_equal(hi, rand.range_hi)
    rng = np.random.default_rng(34)
    x = disjoint_contexts(rng, 3000, K, p, 1.0, C)
    edge = np.zeros((2 * K * (p - 1), d))
    i = 0
    for a in range(K):
        for j in range(1, p):
            for sign in (1.0, -1.0):
                edge[i, a * p] = C
                edge[i, a * p + j] = sign * C
                i += 1
    x = np.concatenate([x, edge])
    r = rng.integers(0, 2, size=len(x)).astype(float)
    # The clean scaled statistics lie in the ranges themselves (``scaled`` clips into them
    # before rounding, so an honest value outside would be biased, not refused: check before),
    # and the released rows are their unbiased roundings.
    y = rand.scale * rand.statistics(x, r)
    assert ((y >= lo) & (y <= hi)).all()
    rows = rand.randomize(x, r, rng)
    assert ((rows >= lo) & (rows <= hi)).all() and (np.abs(rows - y) < 1).all()
    for k in range(0, len(x), 97):
        report = np.array(rand.device_report(x[k], float(r[k])), dtype=np.int64)
        rand.from_bytes(rand.to_bytes(report))  # raises if outside a range


def test_device_refuses_contexts_off_the_intercept() -> None:
    """The device check: ⟨e, x⟩ = c for every context (x[0] = c is not asked: arm 2's block
    holds the intercept); a context whose block start is not c is refused."""
    rand = SkellamRandomizer(d=6, epsilon=1.0, delta=1e-6, batch_size=100, encoding="centered",
                             intercept=C, intercept_coords=(0, 3))
    ok = np.array([[0.0, 0.0, 0.0, C, 0.5, 0.5]])
    rand.randomize(ok, np.ones(1), np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"coordinates \[0, 3\]"):
        rand.randomize(np.array([[0.0, 0.0, 0.0, 0.5, 0.5, 0.5]]), np.ones(1),
                       np.random.default_rng(0))
    with pytest.raises(ValueError, match="intercept coordinates"):
        SkellamRandomizer(d=6, epsilon=1.0, delta=1e-6, batch_size=100, encoding="centered",
                          intercept=C, intercept_coords=(0, 6))


def test_config_auto_and_coordinates() -> None:
    """'auto' with an intercept and its coordinates is centered (w 1.5) on those coordinates;
    without an intercept frobenius; invalid coordinates are refused; the ledger names them."""
    coords = disjoint_intercept_coords(20, 5)
    assert coords == (0, 4, 8, 12, 16)
    cfg = DDPLinUCBConfig(d=20, encoding="auto", intercept=C, intercept_coords=coords)
    assert (cfg.encoding, cfg.u_weight, cfg.intercept_coords) == ("centered", 1.5, coords)
    assert DDPLinUCBConfig(d=20, encoding="auto", intercept_coords=coords).encoding == "frobenius"
    for bad in ((), (0, 20), (4, 0), (0, 0)):
        with pytest.raises(ValueError):
            DDPLinUCBConfig(d=20, encoding="centered", intercept=C, intercept_coords=bad)
    rand = SkellamRandomizer(d=20, epsilon=1.0, delta=1e-6, batch_size=500, encoding="centered",
                             u_weight=1.5, intercept=C, intercept_coords=coords)
    assert "[0, 4, 8, 12, 16]" in rand.ledger().accounting


def test_simulator_reads_the_environment_intercept_coordinates() -> None:
    """The disjoint environment declares c = 1/√2 at its block starts; the simulator's config
    for ddp-linucb at the defaults is then centered on those coordinates, and a centered config
    whose coordinates differ from the environment's is refused."""
    from privbandit.simulation import SimulationError, check_intercept, resolve_config

    env = "bench.experiments.disjoint_env:DisjointLinear"
    cfg, _ = resolve_config("ddp-linucb", d=20, env=env, env_K=5)
    assert cfg.encoding == "centered" and cfg.intercept_coords == (0, 4, 8, 12, 16)
    assert cfg.encoding_intercept == pytest.approx(C)
    check_intercept("ddp-linucb", cfg, env, 5)
    wrong = DDPLinUCBConfig(d=20, encoding="centered", intercept=C)
    with pytest.raises(SimulationError, match="coordinates"):
        check_intercept("ddp-linucb", wrong, env, 5)
    lin, _ = resolve_config("ddp-linucb", d=5, env="linear", env_K=20)
    assert lin.encoding == "centered" and lin.intercept_coords == (0,)
