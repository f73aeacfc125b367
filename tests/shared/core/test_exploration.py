"""Exploring logging policies (``shared.core.exploration``): ε-greedy and softmax choose with
exactly the propensities they log, and IPS / SNIPS / DR on such a log are unbiased for another
policy's value (its interval covers the true value computed from the simulation's means)."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.shared.core.exploration import Exploration, ExploringModel
from privbandit.shared.core.ope import evaluate_distribution
from privbandit.shared.core.policies.model import Model


def a_model(d: int = 3, beta: float = 0.2) -> Model:
    rng = np.random.default_rng(5)
    V = np.eye(d) * 4
    return Model(version=1, theta=rng.normal(size=d), V=V, beta=beta, reports=10)


@pytest.mark.parametrize("spec", ["epsilon-greedy:0.3", "softmax:0.2"])
def test_choices_follow_the_logged_propensities(spec: str) -> None:
    """Every user has the same K arms: the frequency of each arm over N draws is within 5
    standard errors of the distribution, which is the closed form."""
    K, N = 5, 40_000
    model = a_model()
    x = np.random.default_rng(1).normal(size=(K, 3)) / 3
    X = np.broadcast_to(x, (N, K, 3))
    explore = ExploringModel(model, Exploration.parse(spec), np.random.default_rng(2))
    dist = explore.distribution(X[:1])[0]
    if spec.startswith("epsilon"):
        expected = np.full(K, 0.3 / K)
        expected[model.decide(X[:1])[0]] += 0.7
    else:
        s = model.scores(X[:1])[0] / 0.2
        expected = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    np.testing.assert_allclose(dist, expected)
    a = explore.decide(X)
    freq = np.bincount(a, minlength=K) / N
    se = np.sqrt(expected * (1 - expected) / N)
    assert np.all(np.abs(freq - expected) <= 5 * se), (freq, expected)
    np.testing.assert_allclose(explore.propensity(X[:10], a[:10]), expected[a[:10]])


def test_bad_exploration_is_refused() -> None:
    for text in ("epsilon-greedy:0", "epsilon-greedy:1.5", "softmax:-1", "softmax", "greedy:1"):
        with pytest.raises(ValueError):
            Exploration.parse(text)


def test_ips_snips_dr_on_an_exploring_log_are_unbiased() -> None:
    """linucb learning with ε-greedy (ε = 0.3) on ``linear``: the log's pscore is π_0(a_i | x_i)
    and pi_b the whole distribution; the value of the uniform policy and of the best-mean policy
    (computed from the log's true means on its users) lies within 4 standard errors of each
    estimate, over 4 seeds."""
    from privbandit.offpolicy import log_exploring

    for seed in range(4):
        log = log_exploring("linucb", "linear", T=4000, d=3, K=4, explore="epsilon-greedy:0.3",
                            seed=seed)
        n, K = log["n_rounds"], log["n_actions"]
        np.testing.assert_allclose(log["pi_b"][np.arange(n), log["action"]], log["pscore"])
        assert log["pscore"].min() >= 0.3 / K - 1e-12
        mu = log["expected_reward"]
        best = np.zeros((n, K))
        best[np.arange(n), mu.argmax(axis=1)] = 1
        for pi_e in (np.full((n, K), 1 / K), best):
            truth = float((pi_e * mu).sum(axis=1).mean())
            ev = evaluate_distribution(log["reward"], log["action"], log["pscore"], pi_e, mu,
                                       pi_b=log["pi_b"])
            assert ev.refused == {} and ev.overlap.unsupported == 0
            for name, est in ev.items():
                assert abs(est.value - truth) <= 4 * est.stderr, (seed, name, est, truth)
