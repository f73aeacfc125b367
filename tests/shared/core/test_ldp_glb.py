"""LDP-GLB (Zheng Alg. 3): the OGD iterate stays in W and reaches devices only with a published
model; the relabelled regression is fed the reports' statistics; it learns on ``logistic``."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.shared.core.policies import build_policy, make_config
from privbandit.shared.core.policies.ldp_glb import LDPGLB
from privbandit.shared.core.simulator import simulate, summarize


def _policy(**params: float) -> LDPGLB:
    policy = build_policy(make_config("ldp-glb", d=4, **params), np.random.default_rng(0))
    assert isinstance(policy, LDPGLB)
    return policy


def test_ogd_iterate_moves_only_at_publication_and_stays_in_the_ball() -> None:
    policy = _policy(epsilon=1.0, update_every=50, S=1.5, ogd_step=0.05)
    rng = np.random.default_rng(1)
    for _ in range(40):
        anchor = policy.theta_hat.copy()
        version = policy.model.version
        n = policy.window()
        x = rng.normal(size=(n, 4))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        rows = policy.randomizer.randomize(x, rng.random(n).round(), rng)
        k = policy.ingest(rows[: n - 1]) if n > 1 else 0
        assert np.array_equal(policy.theta_hat, anchor)  # mid-window: unchanged
        k += policy.ingest(rows[k:])
        assert policy.model.version == version + 1
        assert np.linalg.norm(policy.theta_hat) <= 1.5 * (1 + 1e-12)
    assert np.linalg.norm(policy.theta_hat) > 0


def test_ogd_step_is_projected_gradient_descent() -> None:
    policy = _policy(S=1.0, ogd_step=0.1)
    policy.grad_pending = np.array([-3.0, 0.0, 0.0, 0.0])
    policy.ogd_step()
    assert np.allclose(policy.theta_hat, [0.3, 0, 0, 0])
    policy.grad_pending = np.array([-30.0, 0.0, 0.0, 0.0])
    policy.ogd_step()
    assert np.allclose(policy.theta_hat, [1.0, 0, 0, 0])  # projected onto ‖θ‖ ≤ S
    assert np.array_equal(policy.grad_pending, np.zeros(4))


def test_default_step_is_d_over_g_root_t() -> None:
    policy = _policy(epsilon=1.0, horizon=10_000, S=3.0)
    sigma = policy.randomizer.sigma
    assert policy.step == pytest.approx(2 * 3.0 / ((1.0 + sigma * 2.0) * 100.0))


def test_state_round_trip() -> None:
    policy = _policy(update_every=10, ogd_step=0.2)
    rng = np.random.default_rng(2)
    x = np.full((25, 4), 0.5)
    policy.ingest(policy.randomizer.randomize(x[:10], np.ones(10), rng))
    policy.ingest(policy.randomizer.randomize(x[10:15], np.ones(5), rng))
    other = _policy(update_every=10, ogd_step=0.2)
    other.set_state(policy.get_state())
    assert np.array_equal(other.theta_hat, policy.theta_hat)
    assert np.array_equal(other.grad_pending, policy.grad_pending)
    assert other.pending == policy.pending == 5


def test_learns_on_logistic_at_a_large_budget() -> None:
    """At ε = 50 with the practical widths the regret over 30,000 users is below half of the
    random policy's (3 seeded runs; measured 0.37 of it)."""
    config = make_config("ldp-glb", d=5, epsilon=50.0, confidence_scale=0.1,
                         regularizer="clip", horizon=30_000)
    results, _ = simulate(config, "logistic", 20, 30_000, 3, seed=4)
    s = summarize(results)
    assert s["final_regret_mean"] < s["random_regret_mean"] / 2
