"""BCO environments, policies and simulator (issue 12): losses, comparator, decision set, regret."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize

from privbandit.shared.core.bco_simulator import simulate_bco, unit_directions
from privbandit.shared.core.environments.bco import (
    BCO_ENVIRONMENTS,
    BCOEnvironment,
    uniform_in_ball,
)
from privbandit.shared.core.policies.bco import build_bco_policy
from privbandit.shared.core.policies.bco_config import BCO_CONFIGS
from privbandit.shared.core.policies.bco_kernels import ftrl_ball, one_point_loop, two_point_loop

ALGOS = sorted(BCO_CONFIGS)


def config_for(algo: str, env: BCOEnvironment, T: int, **kw):
    return BCO_CONFIGS[algo](d=env.d, radius=env.R, loss_bound=env.B, lipschitz=env.lipschitz,
                             smoothness=env.smoothness, strong_convexity=env.strong_convexity,
                             horizon=T, **kw)


@pytest.mark.parametrize("name", BCO_ENVIRONMENTS)
@pytest.mark.parametrize("drift", [0, 7])
def test_losses_are_bounded_lipschitz_and_convex(name: str, drift: int) -> None:
    rng = np.random.default_rng(1)
    env = BCOEnvironment(name, 4, rng, radius=2.0, loss_bound=3.0, drift_period=drift)
    X = uniform_in_ball(20_000, 4, env.R, rng)
    X2 = uniform_in_ball(20_000, 4, env.R, rng)
    t = rng.integers(0, 100, 20_000)
    zeta = rng.random(20_000)
    f, f2 = env.loss(X, t, zeta), env.loss(X2, t, zeta)
    assert f.min() >= 0 and f.max() <= env.B
    sphere = unit_directions(1000, 4, rng) * env.R  # the far side of the ball: the largest loss
    assert env.loss(sphere, np.zeros(1000, int), np.ones(1000)).max() <= env.B * (1 + 1e-12)
    assert np.all(np.abs(f - f2) <= env.lipschitz * np.linalg.norm(X - X2, axis=1) + 1e-12)
    mid = env.loss((X + X2) / 2, t, zeta)
    assert np.all(mid <= (f + f2) / 2 + 1e-12)
    # Strong convexity / smoothness: F(x) − F(x') − ∇F(x')ᵀ(x − x') within [μ/2, β/2]‖x − x'‖².
    gap = (env.mean_loss(X, t) - env.mean_loss(X2, t)
           - np.sum(numeric_grad(env, X2, t) * (X - X2), axis=1))
    sq = np.sum((X - X2) ** 2, axis=1)
    assert np.all(gap >= env.strong_convexity / 2 * sq - 1e-6)
    assert np.all(gap <= env.smoothness / 2 * sq + 1e-6)
    assert np.mean(env.loss(X, t, zeta) - env.mean_loss(X, t)) == pytest.approx(0, abs=0.02)


def numeric_grad(env: BCOEnvironment, X: np.ndarray, t: np.ndarray, h: float = 1e-6) -> np.ndarray:
    G = np.empty_like(X)
    for j in range(X.shape[1]):
        e = np.zeros(X.shape[1])
        e[j] = h
        G[:, j] = (env.mean_loss(X + e, t) - env.mean_loss(X - e, t)) / (2 * h)
    return G


@pytest.mark.parametrize("name", BCO_ENVIRONMENTS)
@pytest.mark.parametrize("drift", [0, 3])
def test_best_fixed_point_is_the_minimum(name: str, drift: int) -> None:
    env = BCOEnvironment(name, 3, np.random.default_rng(2), drift_period=drift)
    for t in (1, 5, 11, 40):
        rounds = np.arange(t)

        def total(x: np.ndarray, t: int = t, rounds: np.ndarray = rounds) -> float:
            return float(env.mean_loss(np.broadcast_to(x, (t, 3)), rounds).sum())

        best = min(minimize(total, x0, method="Nelder-Mead",
                            options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20_000}).fun
                   for x0 in env.points)
        assert env.best_fixed_loss(t) == pytest.approx(best, rel=1e-7, abs=1e-9)
        assert env.counts(t).sum() == t


def test_ftrl_step_stays_inside_and_solves_its_problem() -> None:
    out = np.empty(3)
    c = np.array([0.3, -1.0, 2.0])
    for scale in (1e-3, 1.0, 1e3, 1e6, 1e12, 1e300):
        ftrl_ball(c, scale, 0.5, 2.0, out)
        assert np.linalg.norm(out) < 2.0
        if scale <= 1e6:  # beyond, R − ‖x‖ nears the spacing of floats around R
            # First-order condition: scale·c + k x + 2x/(R² − ‖x‖²) = 0.
            resid = scale * c + 0.5 * out + 2 * out / (4.0 - out @ out)
            assert np.linalg.norm(resid) <= 1e-8 * max(1.0, scale * np.linalg.norm(c))


@pytest.mark.parametrize("name", BCO_ENVIRONMENTS)
@pytest.mark.parametrize("algo", ALGOS)
def test_iterates_stay_in_the_decision_set(name: str, algo: str) -> None:
    """Heavy noise (ε = 0.1) and 30× the paper's step push the iterates at the boundary."""
    env = BCOEnvironment(name, 3, np.random.default_rng(3), radius=0.5, drift_period=500)
    T = 20_000
    private = {"epsilon": 0.1} if algo.startswith("ldp") else {}
    config = config_for(algo, env, T, step_scale=30.0, **private)
    results, params = simulate_bco(config, env, T, 3, seed=4, points=10)
    assert params["max_played_norm"] <= env.R * (1 + 1e-12)
    assert params["max_played_norm"] > 0.9 * env.R  # it did get pushed to the boundary
    if algo in ("bco", "ldp-bco"):
        assert params["max_played_norm"] < env.R  # Dikin ellipsoid: strictly inside


def test_compiled_loops_match_plain_python() -> None:
    env = BCOEnvironment("bco-convex", 3, np.random.default_rng(5), drift_period=4)
    rng = np.random.default_rng(6)
    n, runs = 50, 2
    U = np.stack([unit_directions(n, 3, rng) for _ in range(runs)], axis=1)
    zeta, z = rng.random((n, runs)), rng.standard_normal((n, runs))
    kind, scale, bnoise, kappa, denom, points, period = env.kernel_params()
    outs = []
    for fn in (one_point_loop, getattr(one_point_loop, "py_func", one_point_loop)):
        y, c, inst, mx = np.zeros((runs, 3)), np.zeros((runs, 3)), np.empty((n, runs)), np.zeros(2)
        fn(y, c, 0, U, zeta, z, 2.0, kind, scale, bnoise, kappa, denom, points, period, 1.0, 1.0,
           0.01, 0.0, 0.5, inst, mx)
        outs.append((y, inst))
    for fn in (two_point_loop, getattr(two_point_loop, "py_func", two_point_loop)):
        y, inst, mx = np.zeros((runs, 3)), np.empty((n, runs)), np.zeros(2)
        fn(y, 0, U, z, 2.0, kind, scale, kappa, denom, bnoise, points, period, 1.0,
           env.lipschitz, 0.05, 0.0, 0.01, 0.99, inst, mx)
        outs.append((y, inst))
    for a, b in (outs[:2], outs[2:]):
        np.testing.assert_allclose(a[0], b[0], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(a[1], b[1], rtol=1e-9, atol=1e-12)


def test_runs_are_vectorised_not_coupled() -> None:
    """Run r of a 3-run simulation equals the same seed's run simulated alone (same streams)."""
    env = BCOEnvironment("bco-quadratic", 3, np.random.default_rng(7))
    config = config_for("ldp-bco2", env, 5000)
    together, _ = simulate_bco(config, env, 5000, 3, seed=8, points=5)
    alone, _ = simulate_bco(config, env, 5000, 1, seed=8, points=5)
    np.testing.assert_allclose(together[0].regret, alone[0].regret, rtol=1e-12)
    assert not np.allclose(together[0].regret, together[1].regret)


def test_regret_is_cumulative_expected_loss_minus_the_comparator() -> None:
    """A policy that never moves (step_scale → 0, two points) plays y = 0 ± ρu, whose mean
    expected loss is B(1−ν)(‖x*‖² + ρ²)/D² + Bν/2; the comparator x* has Bν/2."""
    env = BCOEnvironment("bco-quadratic", 3, np.random.default_rng(9))
    config = config_for("bco2", env, 1000, step_scale=1e-300)
    results, params = simulate_bco(config, env, 1000, 1, seed=1, points=4)
    sq = env.points[0] @ env.points[0] + params["rho"] ** 2
    expected = results[0].checkpoints * env.scale * sq / env.denom
    np.testing.assert_allclose(results[0].regret, expected, rtol=1e-9)


@pytest.mark.parametrize("name", BCO_ENVIRONMENTS)
@pytest.mark.parametrize("algo", ["ldp-bco", "ldp-bco2"])
def test_private_regret_falls_as_epsilon_grows(name: str, algo: str) -> None:
    """ε ∈ {0.5, 1, 4}, d = 3, T = 2·10⁴, 8 runs, fixed seeds: each step down in regret exceeds 3
    standard errors of the difference (s.e. of the two means combined as if independent; the
    runs share users and noise, so that is conservative). Measured margins are 4.5–60 s.e."""
    env = BCOEnvironment(name, 3, np.random.default_rng(5))
    T, runs = 20_000, 8
    finals = []
    for eps in (0.5, 1.0, 4.0):
        results, _ = simulate_bco(config_for(algo, env, T, epsilon=eps), env, T, runs, seed=7,
                                  points=5)
        f = np.array([r.regret[-1] for r in results])
        finals.append((f.mean(), f.std(ddof=1) / math.sqrt(runs)))
    for (m_lo, se_lo), (m_hi, se_hi) in zip(finals, finals[1:], strict=False):
        assert m_lo - m_hi > 3 * math.hypot(se_lo, se_hi), finals


def test_policy_refuses_a_mismatched_environment() -> None:
    env = BCOEnvironment("bco-quadratic", 3, np.random.default_rng(0))
    with pytest.raises(ValueError, match="expects d=4"):
        build_bco_policy(config_for("bco", env, 100).model_copy(update={"d": 4})).check(env)
    tight = config_for("bco2", env, 100).model_copy(update={"lipschitz": env.lipschitz / 2})
    with pytest.raises(ValueError, match="exceed"):
        build_bco_policy(tight).check(env)
