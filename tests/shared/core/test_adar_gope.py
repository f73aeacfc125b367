"""AdaR-GOPE (Azize–Basu Alg. 3): exact Gaussian calibration, Eq. 8's phase lengths, the
Corollary 16 confidence widths, and eliminated arms never played again within a run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.shared.core.accounting.rdp import gaussian_rdp_epsilon
from privbandit.shared.core.environments.fixed_linear import FixedLinearEnvironment
from privbandit.shared.core.policies import build_policy, make_config
from privbandit.shared.core.policies.adar_gope import AdaRGOPE, PhaseModel


def _policy(d: int, seed: int = 0, **params: float) -> AdaRGOPE:
    policy = build_policy(make_config("adar-gope", d=d, **params), np.random.default_rng(seed))
    assert isinstance(policy, AdaRGOPE)
    return policy


@pytest.mark.parametrize("alpha,eps", [(2.0, 1.0), (1.5, 0.1), (8.0, 3.0)])
def test_noise_is_exactly_alpha_epsilon_rdp(alpha: float, eps: float) -> None:
    """σ_N² = α Δ²/(2ε) with Δ = 1: the Gaussian on the per-arm sums is (α, ε)-RDP exactly."""
    policy = _policy(4, alpha=alpha, epsilon=eps)
    assert policy.noise_sigma**2 == pytest.approx(alpha / (2 * eps), rel=1e-14)
    assert gaussian_rdp_epsilon(alpha, policy.noise_sigma, 1.0) == pytest.approx(eps, rel=1e-12)
    # One reward in [0, 1] moves one per-arm sum by at most 1: the sensitivity used.
    rewards = np.random.default_rng(0).random(50)
    arms = np.random.default_rng(1).integers(0, 5, 50)
    for j in range(50):
        other = rewards.copy()
        other[j] = 1.0 - other[j]
        diff = np.bincount(arms, rewards, 5) - np.bincount(arms, other, 5)
        assert np.linalg.norm(diff) <= 1.0


def test_private_estimate_adds_exactly_the_stated_noise() -> None:
    """θ̃ − V⁺u = V⁺ Σ_b b N_b: mean 0 and covariance σ_N² V⁺ (Σ_b b bᵀ) V⁺ (4,000 draws)."""
    d = 3
    policy = _policy(d, alpha=2.0, epsilon=0.5)
    env = FixedLinearEnvironment(d, 8, np.random.default_rng(2))
    policy.bind_arms(env.fixed_arms)
    model = policy.model
    assert isinstance(model, PhaseModel)
    B = env.fixed_arms[model.support]
    policy.V = (B * model.counts[:, None]).T @ B
    policy.u = B.T @ (0.5 * model.counts)
    clean = np.linalg.solve(policy.V, policy.u)
    draws = np.stack([policy.private_estimate(model) for _ in range(4000)]) - clean
    Vinv = np.linalg.inv(policy.V)
    cov = policy.noise_sigma**2 * Vinv @ B.T @ B @ Vinv
    se = np.sqrt(np.diag(cov) / 4000)
    assert (np.abs(draws.mean(axis=0)) <= 4.5 * se).all()
    rel = np.diag(np.cov(draws.T)) / np.diag(cov)
    assert np.allclose(rel, 1.0, atol=4 * math.sqrt(2 / 3999))


def test_phase_length_is_eq8() -> None:
    """With g = d and s = d(d+1)/2, c_ℓ is Eq. 8's factor with the noise variance σ_N²."""
    d, K = 5, 40
    policy = _policy(d, alpha=2.0, epsilon=1.0, failure_prob=0.05)
    policy.bind_arms(FixedLinearEnvironment(d, K, np.random.default_rng(0)).fixed_arms)
    for ell in (1, 3, 6):
        beta = 2.0**-ell
        lg = math.log(4 * K * ell * (ell + 1) / 0.05)
        eq8 = 8 * d / beta**2 * lg + 2 * d / beta * math.sqrt(
            policy.noise_sigma**2 * d * (d + 1) * lg)
        assert policy.phase_factor(ell, d, d * (d + 1) // 2) == pytest.approx(eq8, rel=1e-12)
    model = policy.model
    assert isinstance(model, PhaseModel)
    assert model.phase == 1 and model.counts.min() >= 1


def _run(seed: int, T: int, K: int = 30, d: int = 4, **params: float):
    """Play T users; yield (active set, arms played) per window, and the phase estimates."""
    env = FixedLinearEnvironment(d, K, np.random.default_rng(seed))
    policy = _policy(d, seed, **params)
    policy.bind_arms(env.fixed_arms)
    estimates: list[tuple[PhaseModel, np.ndarray]] = []
    original = policy.private_estimate

    def record(model: PhaseModel) -> np.ndarray:
        theta = original(model)
        estimates.append((model, theta))
        return theta

    policy.private_estimate = record  # type: ignore[method-assign]
    rng = np.random.default_rng(seed + 100)
    windows = []
    t = 0
    while t < T:
        n = min(policy.window(), T - t)
        X, mu = env.contexts(n)
        active = policy.model.active.copy()
        a = policy.model.decide(X)
        r = env.rewards(mu[0, a], rng)
        k = policy.ingest(policy.randomizer.randomize(env.fixed_arms[a], r, rng))
        windows.append((active, a[:k]))
        t += k
    return env, policy, windows, estimates


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_eliminated_arms_are_never_played_again(seed: int) -> None:
    env, policy, windows, estimates = _run(seed, 300_000, confidence_scale=0.3)
    assert len(estimates) >= 3  # several phases ended
    gone: set[int] = set()
    previous = set(range(env.K))
    for active, played in windows:
        now = set(active.tolist())
        assert now <= previous  # active sets only shrink
        gone |= previous - now
        assert set(played.tolist()) <= now
        assert not gone & set(played.tolist())
        previous = now
    assert gone == set(policy.eliminated) and len(gone) > 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_confidence_widths_of_corollary_16_hold(seed: int) -> None:
    """At the paper's width every phase estimate is within β_ℓ of θ* on every active arm (an
    event of probability ≥ 1 − δ = 0.95 per run), so the best arm is never eliminated."""
    env, policy, _, estimates = _run(seed, 200_000, K=20)
    assert len(estimates) >= 3
    best = int(np.argmax(env.arm_means))
    for model, theta in estimates:
        err = np.abs(env.fixed_arms[model.active] @ (theta - env.theta))
        assert err.max() <= model.beta
    assert best not in policy.eliminated


def test_state_round_trip_continues_the_same_schedule() -> None:
    env, policy, _, _ = _run(5, 7_000, confidence_scale=0.3)
    other = _policy(4, 5, confidence_scale=0.3)
    other.set_state(policy.get_state())
    X, _ = env.contexts(64)
    assert np.array_equal(other.model.decide(X), policy.model.decide(X))
    assert other.window() == policy.window()


def test_ledger_is_the_rdp_gaussian_converted_by_dp_accounting() -> None:
    from privbandit.shared.core.accounting.rdp import (
        gaussian_dp_epsilon_via_dp_accounting,
        rdp_to_dp,
    )

    policy = _policy(4, alpha=2.0, epsilon=0.5, delta=1e-6)
    ledger = policy.ledger()
    assert ledger.threat_model == "central" and ledger.ldp_epsilon is None
    assert (ledger.rdp_alpha, ledger.rdp_epsilon) == (2.0, 0.5)
    curve = gaussian_dp_epsilon_via_dp_accounting(policy.noise_sigma, 1.0, 1e-6)
    assert ledger.central_epsilon == pytest.approx(min(curve, rdp_to_dp(2.0, 0.5, 1e-6)))
    assert "Alg. 3" in ledger.accounting
