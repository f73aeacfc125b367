"""Logged decisions (``shared.core.logged``): the simulator's log is exactly the run it records,
in Open Bandit Pipeline's ``bandit_feedback`` form, and survives the file round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from privbandit.shared.core.environments import make_environment
from privbandit.shared.core.logged import (
    DecisionLog,
    UniformConfig,
    arm_features,
    load_feedback,
    save_feedback,
)
from privbandit.shared.core.policies import make_config
from privbandit.shared.core.simulator import (
    checkpoints_for,
    log_for,
    make_policy,
    run_once,
    simulate,
)

OBP_KEYS = {"n_rounds", "n_actions", "context", "action", "reward", "pscore", "position"}


def logged_run(algo_config: object, env_name: str, d: int, K: int, T: int, seed: int
               ) -> tuple[dict, float, np.ndarray]:
    """(feedback, final pseudo-regret, every user's features) of one logged run; the features
    are read from an identically seeded environment, which the run does not perturb."""
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4)]
    env = make_environment(env_name, d, K, streams[0])
    twin = make_environment(env_name, d, K, np.random.default_rng(
        np.random.SeedSequence(seed).spawn(4)[0]))
    policy = make_policy(algo_config, streams[3])
    policy.bind_arms(env.fixed_arms)
    log = log_for(env)
    result = run_once(policy, env, T, streams[1], streams[2], checkpoints_for(T, 1), log=log)
    X, _ = twin.contexts(T)
    return log.bandit_feedback(), float(result.regret[-1]), X


@pytest.mark.parametrize(("algo", "env_name", "d", "K"), [
    ("linucb", "linear", 4, 6),
    ("ddp-linucb", "digits", 40, 10),
    ("adar-gope", "fixed-linear", 3, 8),
])
def test_the_log_is_the_run(algo: str, env_name: str, d: int, K: int) -> None:
    config = make_config(algo, d=d, **({"batch_size": 100} if algo == "ddp-linucb" else {}))
    fb, regret, X = logged_run(config, env_name, d, K, 1500, seed=3)
    assert OBP_KEYS <= fb.keys()
    n = fb["n_rounds"]
    assert n == 1500 and fb["n_actions"] == X.shape[1]
    # The features the policy decided from are rebuilt from the logged context exactly.
    assert np.array_equal(arm_features(fb), X)
    # The log's actions and means give the run's own pseudo-regret.
    mu = fb["expected_reward"]
    chosen = mu[np.arange(n), fb["action"]]
    assert np.isclose((mu.max(axis=1) - chosen).sum(), regret)
    if algo == "adar-gope":  # the phase's count shares; the argmax models: 1
        assert (fb["pscore"] < 1).any() and (fb["pscore"] > 0).all()
    else:
        assert (fb["pscore"] == 1).all()
    assert set(np.unique(fb["reward"])) <= {0.0, 1.0}


def test_a_uniform_log_is_uniform() -> None:
    K, T = 10, 40_000
    fb, _, _ = logged_run(UniformConfig(d=40), "digits", 40, K, T, seed=4)
    assert np.allclose(fb["pscore"], 1 / K)
    freq = np.bincount(fb["action"], minlength=K) / T
    se = np.sqrt((1 / K) * (1 - 1 / K) / T)
    assert np.all(np.abs(freq - 1 / K) <= 5 * se)
    # A uniform arm is right once in K: the logged reward's mean is 1/K within 5 standard errors.
    assert abs(fb["reward"].mean() - 1 / K) <= 5 * np.sqrt((1 / K) * (1 - 1 / K) / T)


def test_simulate_hands_back_one_log_per_run(tmp_path: Path) -> None:
    logs: list[DecisionLog] = []
    results, _ = simulate(make_config("linucb", d=3), "linear", 5, 400, 2, 0, logs=logs)
    assert len(logs) == 2 == len(results)
    fb = logs[1].bandit_feedback()
    save_feedback(tmp_path / "log.npz", fb)
    back = load_feedback(tmp_path / "log.npz")
    assert back.keys() == fb.keys()
    for key, value in fb.items():
        assert np.array_equal(np.asarray(back[key]), np.asarray(value)), key


def test_a_bad_feedback_is_refused(tmp_path: Path) -> None:
    logs: list[DecisionLog] = []
    simulate(make_config("linucb", d=3), "linear", 5, 50, 1, 0, logs=logs)
    fb = logs[0].bandit_feedback()
    for key, value, why in [("pscore", np.zeros(50), "pscore"),
                            ("action", np.full(50, 5), "actions"),
                            ("reward", np.zeros(49), "reward")]:
        with pytest.raises(ValueError, match=why):
            save_feedback(tmp_path / "bad.npz", {**fb, key: value})
