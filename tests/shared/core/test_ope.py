"""Off-policy estimators (``shared.core.ope``) against their definitions and the truth.

Synthetic logs have known means μ_{i,a}, so the evaluated policy's value on the logged contexts,
V = (1/n) Σ_i Σ_a π_e(a|x_i) μ_{i,a}, is known exactly: IPS and DR are unbiased for it and
their 95% intervals must cover it at the nominal rate (checked over 400 fixed-seed logs: a
coverage below 0.90 — 4 binomial standard errors under 0.95 — fails)."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.shared.core.logged import UniformConfig
from privbandit.shared.core.ope import (
    RidgeRewardModel,
    action_distribution,
    dr,
    evaluate_frozen,
    importance_weights,
    interval,
    ips,
    replay,
    snips,
    train_on_log,
)
from privbandit.shared.core.policies import make_config
from privbandit.shared.core.simulator import make_policy, simulate

N, K = 1000, 5


def synthetic(seed: int) -> dict[str, np.ndarray]:
    """A log of N rounds: means μ, a non-uniform logging policy π_0 (Dirichlet rows), its
    actions and Bernoulli rewards, and a deterministic evaluated policy."""
    rng = np.random.default_rng(seed)
    mu = rng.uniform(0.1, 0.9, size=(N, K))
    pi0 = rng.dirichlet(np.full(K, 2.0), size=N) * 0.8 + 0.2 / K  # every p ≥ 0.04
    u = rng.random(N)
    action = (u[:, None] > np.cumsum(pi0, axis=1)).sum(axis=1)
    rows = np.arange(N)
    reward = (rng.random(N) < mu[rows, action]).astype(float)
    pi_e = np.zeros((N, K))
    pi_e[rows, np.argmax(mu + np.random.default_rng(99).normal(0, 0.2, (N, K)), axis=1)] = 1
    return {"mu": mu, "pscore": pi0[rows, action], "action": action, "reward": reward,
            "pi_e": pi_e, "truth": np.float64((pi_e * mu).sum(axis=1).mean())}


def test_ips_and_dr_are_unbiased_and_their_intervals_cover_at_the_nominal_rate() -> None:
    cover = {"ips": 0, "snips": 0, "dr": 0}
    errors: dict[str, list[float]] = {k: [] for k in cover}
    reps = 400
    for seed in range(reps):
        s = synthetic(seed)
        q = s["mu"] + np.random.default_rng(seed + 10_000).normal(0, 0.1, (N, K))  # a rough q̂
        args = (s["reward"], s["action"], s["pscore"], s["pi_e"])
        for est in (ips(*args), snips(*args), dr(*args, q)):
            cover[est.estimator] += est.covers(float(s["truth"]))
            errors[est.estimator].append(est.value - float(s["truth"]))
    for name, hits in cover.items():
        assert hits / reps >= 0.90, (name, hits / reps)
        e = np.asarray(errors[name])
        assert abs(e.mean()) <= 4 * e.std(ddof=1) / np.sqrt(reps), name  # unbiased (SNIPS: O(1/n))


def test_the_estimators_are_their_definitions() -> None:
    s = synthetic(1)
    r, a, p, pi = s["reward"], s["action"], s["pscore"], s["pi_e"]
    w = pi[np.arange(N), a] / p
    assert np.allclose(importance_weights(a, p, pi), w)
    assert ips(r, a, p, pi).value == pytest.approx((w * r).mean())
    assert snips(r, a, p, pi).value == pytest.approx((w * r).sum() / w.sum())
    # DR with q̂ = 0 is IPS; with q̂ = c everywhere it adds c (1 − w̄).
    assert dr(r, a, p, pi, np.zeros((N, K))).value == pytest.approx(ips(r, a, p, pi).value)
    assert dr(r, a, p, pi, np.full((N, K), 0.3)).value == pytest.approx(
        (w * r).mean() + 0.3 * (1 - w.mean()))
    # OBP's (n, K, 1) shapes are accepted.
    assert ips(r, a, p, pi[:, :, None]).value == ips(r, a, p, pi).value
    est = interval("x", np.array([1.0, 2.0, 3.0, 4.0]))
    assert est.value == 2.5 and est.stderr == pytest.approx(np.std([1, 2, 3, 4], ddof=1) / 2)
    assert est.low == pytest.approx(2.5 - 1.959964 * est.stderr, rel=1e-6)


def test_dr_with_the_true_means_has_a_smaller_interval_than_ips() -> None:
    s = synthetic(2)
    args = (s["reward"], s["action"], s["pscore"], s["pi_e"])
    assert dr(*args, s["mu"]).stderr < ips(*args).stderr  # only the Bernoulli noise is left


def test_bad_inputs_are_refused() -> None:
    s = synthetic(3)
    with pytest.raises(ValueError, match="pscore"):
        ips(s["reward"], s["action"], np.zeros(N), s["pi_e"])
    with pytest.raises(ValueError, match="distributions"):
        ips(s["reward"], s["action"], s["pscore"], s["pi_e"] * 2)


def uniform_log(env: str, d: int, T: int, seed: int) -> dict:
    logs: list = []
    simulate(UniformConfig(d=d), env, 10, T, 1, seed, logs=logs)
    return logs[0].bandit_feedback()


def test_a_frozen_policy_trained_on_the_log_is_valued_within_its_intervals() -> None:
    """linucb trained (through its randomizer) on the first half of a uniform digits log; its
    frozen model's IPS/SNIPS/DR on the second half are within 4 standard errors of its true
    value there (known from the log's expected rewards)."""
    fb = uniform_log("digits", 40, 20_000, seed=5)
    half = slice(0, 10_000)
    rest = slice(10_000, 20_000)
    policy = train_on_log(fb, make_policy(make_config("linucb", d=40), np.random.default_rng(0)),
                          half, np.random.default_rng(1))
    assert policy.model.version > 0
    q = RidgeRewardModel.fit(fb, half)
    ests = evaluate_frozen(fb, policy, rest, q)
    from privbandit.shared.core.logged import arm_features

    X = arm_features(fb, rest)
    truth = float((action_distribution(policy.model, X) * fb["expected_reward"][rest])
                  .sum(axis=1).mean())
    assert truth > 0.3  # a trained model: far better than uniform's 0.1
    for est in ests.values():
        assert abs(est.value - truth) <= 4 * est.stderr, est
    assert ests["dr"].stderr < ests["ips"].stderr  # the ridge model explains part of r


def test_replay_of_a_policy_that_never_learns_is_its_plain_value() -> None:
    """The uniform policy replayed on a uniform log keeps each event with probability 1/K and
    its value is the mean reward of a random arm, 1/K on digits (4 standard errors)."""
    fb = uniform_log("digits", 40, 30_000, seed=6)
    res = replay(fb, lambda rng: make_policy(UniformConfig(d=40), rng), repeats=1, seed=3)
    kept = res.matched.size
    assert abs(kept - 3000) <= 4 * np.sqrt(30_000 * 0.1 * 0.9)
    assert abs(res.estimate.value - 0.1) <= 4 * res.estimate.stderr
    assert np.all(np.diff(res.matched) > 0)


def test_replay_scores_ahead_only_what_a_window_needs_and_keeps_the_same_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``replay_path`` scores a few rounds past the current one per model (``LOOKAHEAD``) rather
    than the rest of its chunk: linucb (a new model after every kept event) keeps exactly the
    events it keeps when each model scores the whole rest of the chunk."""
    from privbandit.shared.core import ope

    fb = uniform_log("digits", 40, 3_000, seed=8)

    def run() -> np.ndarray:
        return replay(fb, lambda rng: make_policy(make_config("linucb", d=40), rng),
                      repeats=1, seed=4).matched

    ahead = run()
    monkeypatch.setattr(ope, "LOOKAHEAD", ope.CHUNK)
    whole = run()
    assert ahead.size > 200
    np.testing.assert_array_equal(ahead, whole)


def test_replay_refuses_a_non_uniform_log() -> None:
    fb = uniform_log("digits", 40, 100, seed=7)
    fb["pscore"] = np.full(100, 0.5)
    with pytest.raises(ValueError, match="pi_b must give each logged action its pscore"):
        replay(fb, lambda rng: make_policy(make_config("linucb", d=40), rng))
    del fb["pi_b"]  # the logging distribution no longer agrees: without it, the pscores alone
    with pytest.raises(ValueError, match="uniform"):
        replay(fb, lambda rng: make_policy(make_config("linucb", d=40), rng))
