"""LPLR with action elimination (Li, Simchi-Levi & Wang, Alg. 1 over Algs. 2–6; docs/lplr.md):
the oracle recovers θ* and its intervals cover the truth, eliminated actions never return, the
played action is always active, and the schedule is the one the docs state."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.shared.core.environments import make_environment
from privbandit.shared.core.lplr_simulator import run_lplr_once, simulate_lplr
from privbandit.shared.core.policies import build_policy, make_config
from privbandit.shared.core.policies.lplr import LPLR
from privbandit.shared.core.simulator import checkpoints_for

D = 5


def _train_epoch(policy: LPLR, env, rng: np.random.Generator) -> None:
    """Feed one whole epoch (d layer groups) through the policy, noise included."""
    for _ in range(policy.config.d):
        n = policy.window()
        X, mu = env.contexts(n)
        a = policy.decide(X, rng)
        idx = np.arange(n)
        r = env.rewards(mu[idx, a], rng)
        block, u, z, nb = policy.encode(X[idx, a], r, a)
        sums = policy.randomizer.clean(block, u, z, nb)
        policy.consumed(n)
        policy.ingest_blocks(sums + policy.randomizer.aggregate_noise(n, nb, policy.rng))


def test_oracle_recovers_theta_and_its_intervals_cover() -> None:
    """Almost no privacy noise (ε = 10⁶), 250,000 users: the aggregated oracle of each action has
    mean absolute error below 0.03 and |f̂ − f| ≤ ŵ at every one of 5,000 fresh contexts."""
    config = make_config("lplr", d=D, K=2, epsilon=1e6, first_epoch=250_000)
    env = make_environment("linear", D, 2, np.random.default_rng(1))
    policy = LPLR(config, np.random.default_rng(2))
    _train_epoch(policy, env, np.random.default_rng(3))
    assert len(policy.finished) == 1
    X, _ = env.contexts(5000)
    for a, tree in enumerate(policy.finished[0]):
        pred, width = tree.predict(X[:, a, :])
        err = np.abs(pred - X[:, a, :] @ env.theta)
        assert err.mean() < 0.03
        assert (err <= width).all()


def test_eliminated_actions_never_return_and_the_best_survives() -> None:
    """Over four epochs at ε = 10⁴ with widths × 0.05: for 2,000 fixed contexts the active sets
    are nested epoch after epoch, elimination does happen, and the best arm is never eliminated
    at these (still valid, see the previous test) accuracies."""
    config = make_config("lplr", d=D, K=6, epsilon=1e4, first_epoch=20_000,
                         confidence_scale=0.05)
    env = make_environment("linear", D, 6, np.random.default_rng(4))
    policy = LPLR(config, np.random.default_rng(5))
    rng = np.random.default_rng(6)
    for _ in range(4):
        _train_epoch(policy, env, rng)
    X, mu = env.contexts(2000)
    finished = policy.finished
    masks = []
    for m in range(len(finished) + 1):
        policy.finished = finished[:m]
        masks.append(policy.active_sets(X))
    policy.finished = finished
    for before, after in zip(masks, masks[1:], strict=False):
        assert not (after & ~before).any()  # nothing comes back
        assert after.any(axis=1).all()  # never empty
    assert masks[-1].sum() < masks[0].sum() * 0.8
    best = mu.argmax(axis=1)
    assert masks[-1][np.arange(2000), best].mean() > 0.99
    chosen = policy.decide(X, rng)
    assert masks[-1][np.arange(2000), chosen].all()


def test_schedule_and_run_accounting() -> None:
    """Epoch m has d groups of ⌈τ_1 2^{m−1}/d⌉ users; a partial group at the horizon is never
    ingested; the regret curve is cumulative and the ledger is ε-LDP per report."""
    config = make_config("lplr", d=D, K=4, epsilon=1.0, first_epoch=1000)
    policy = build_policy(config, np.random.default_rng(0))
    assert isinstance(policy, LPLR)
    assert [policy.group_size(m) for m in (1, 2, 3)] == [200, 400, 800]
    env = make_environment("linear", D, 4, np.random.default_rng(1))
    T = 1000 + 2000 + 300  # two epochs and part of a group
    res = run_lplr_once(policy, env, T, np.random.default_rng(2), np.random.default_rng(3),
                        checkpoints_for(T, 33))
    assert res.reports_ingested == 3000 and len(policy.finished) == 2
    assert res.model_updates == 2 * D
    assert (np.diff(res.regret) >= 0).all()
    ledger = policy.ledger()
    assert (ledger.threat_model, ledger.ldp_epsilon, ledger.ldp_delta) == ("ldp", 1.0, 0.0)
    with pytest.raises(ValueError):
        simulate_lplr(config, "linear", 5, 100, 1, 0)  # K of the config and env disagree


def test_wishart_variant_reports_its_delta() -> None:
    config = make_config("lplr", d=D, K=4, epsilon=1.0, matrix_noise="wishart")
    ledger = build_policy(config).ledger()
    eps_m = 1.0 * (1 - config.count_share - config.vector_share)
    assert ledger.ldp_delta == pytest.approx(-np.expm1(-eps_m))
