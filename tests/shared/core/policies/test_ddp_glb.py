"""ddp-glb (shared/core/policies/ddp_glb.py): the online Newton fit over the private GLM
statistics converges to θ*, the policy learns at ε = 1 by T = 10⁴ on ``logistic``, and the
simulator's device randomizers report at the anchor the policy published (also after a
restore)."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.shared.core.environments import make_environment
from privbandit.shared.core.policies import build_policy, make_config
from privbandit.shared.core.policies.ddp_glb import DDPGLB
from privbandit.shared.core.policies.practical import DDP_GLB
from privbandit.shared.core.simulator import simulate


def test_estimate_converges_to_theta_star_when_the_noise_is_small() -> None:
    """At ε = 1000 (batch noise sd ≈ 0.01 per entry) the accumulated Newton steps, each at the
    anchor its users were served (the first batch at θ̂ = 0, far from θ*, ‖θ*‖ = 2.83), recover
    θ* of ``logistic`` (d = 5) from ≈ 2·10⁴ users playing a uniformly random arm (a diverse
    design: the estimator's consistency, apart from what the bandit's choices reveal):
    ‖θ̃ − θ*‖ < 0.1 ‖θ*‖ in each of 3 seeds (measured 0.037–0.045 ‖θ*‖)."""
    for seed in (1, 2, 3):
        env = make_environment("logistic", 5, 20, np.random.default_rng(seed))
        rng = np.random.default_rng(seed + 100)
        policy = build_policy(make_config("ddp-glb", d=5, epsilon=1000.0,
                                          **DDP_GLB), rng)
        assert isinstance(policy, DDPGLB)
        while policy.reports < 20_000:
            X, mu = env.contexts(policy.window())
            y = (rng.random(X.shape[0]) < mu[:, 0]).astype(float)
            policy.ingest(policy.randomizer.randomize(X[:, 0], y, rng))
        theta_star = env.theta
        err = np.linalg.norm(policy.model.theta - theta_star)
        assert err < 0.1 * np.linalg.norm(theta_star), (seed, err)


def test_learns_on_logistic_at_epsilon_one_by_ten_thousand_users() -> None:
    """ε = 1, δ = 10⁻⁶, practical defaults, ``logistic`` d = 5, K = 20, T = 10⁴: every one of 3
    runs (seed 7) ends below half of the random policy's regret (issue 44's "learns"; measured
    0.12–0.24 of it, docs/benchmarks/glm.md)."""
    config = make_config("ddp-glb", d=5, epsilon=1.0, **DDP_GLB)
    results, _ = simulate(config, "logistic", 20, 10_000, 3, 7, points=2)
    for r in results:
        assert r.regret[-1] < 0.5 * r.random_regret[-1]


@pytest.mark.parametrize("restore", [False, True])
def test_the_simulators_reports_use_the_published_anchor(restore: bool) -> None:
    """After each publication every device randomizer of the policy (one per batch length)
    anchors at the model's θ̂ = Π_S(θ̃), and a policy restored from the state does too."""
    rng = np.random.default_rng(5)
    config = make_config("ddp-glb", d=3, epsilon=4.0, batch_schedule="geometric:50,2,400",
                         regularizer="clip", eta=0.0, S=0.5)
    policy = build_policy(config, np.random.default_rng(0))
    assert isinstance(policy, DDPGLB)
    for _ in range(3):
        x = rng.normal(size=(policy.window(), 3))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        policy.ingest(policy.randomizer.randomize(x, (x[:, 1] > 0).astype(float), rng))
    assert policy.model.version >= 1
    theta = policy.model.theta
    assert np.linalg.norm(theta) > 0.5  # the projection is exercised
    np.testing.assert_allclose(policy.model.theta_hat, theta * 0.5 / np.linalg.norm(theta))
    if restore:
        state = policy.get_state()
        policy = build_policy(config, np.random.default_rng(0))
        assert isinstance(policy, DDPGLB)
        policy.set_state(state)
    for size in (50, 100, 200, 400):
        np.testing.assert_array_equal(policy.randomizer_for(size).anchor,
                                      policy.model.theta_hat)
