"""The multi-armed policies behind ``Policy`` (shared/core/policies/{ucb,ldp_mab,adar_ucb}.py).

The simulator's fast path (``play``) and the services' path (``model.decide`` + ``ingest`` of one
row at a time) must make the same decisions and reach the same state; state must survive a
save/restore; models must be plain JSON; ε_min must drop exactly the responses below it;
confidence_scale must be post-processing.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from privbandit.shared.core.environments.mab import MABEnvironment, default_means
from privbandit.shared.core.mab_simulator import levels_of, play_by_rows
from privbandit.shared.core.policies import build_policy, make_config
from privbandit.shared.core.policies.arm_model import ArmModel
from privbandit.shared.core.policies.tsallis import tsallis_weights

K = 6
CASES = {
    "ucb": dict(),
    "heldp-ucb-l": dict(epsilon_dist="choice:0,0.2,1,2,100", eps_min=0.5),
    "heldp-ucb-l-sigmoid": dict(epsilon=1.0, sigmoid=True),
    "heldp-ucb-b": dict(epsilon_dist="normal:1,1"),
    "ldp-mab": dict(epsilon=2.0),
    "ldp-mab-ucb": dict(epsilon=2.0, black_box="ucb"),
    "adar-ucb": dict(epsilon=1.0),
}


def _config(case: str, **extra):
    algo = case.replace("-sigmoid", "").replace("ldp-mab-ucb", "ldp-mab")
    return make_config(algo, K=K, **CASES[case], **extra)


def _users(policy, n: int, seed: int, dist: str = "bernoulli"):
    rng = np.random.default_rng(seed)
    R = MABEnvironment(default_means(K), dist).reward_grid(n, rng)
    levels = levels_of(policy)
    eps = None if levels is None else levels.sample(n, rng)
    return policy.randomizer.values(R, eps, rng), eps, rng.random(n)


@pytest.mark.parametrize("case", sorted(CASES))
def test_fast_path_equals_row_by_row_ingest(case: str) -> None:
    config = _config(case)
    fast, slow = build_policy(config, np.random.default_rng(1)), build_policy(
        config, np.random.default_rng(1))
    values, eps, u = _users(fast, 2500, seed=5)
    chunks = [(0, 700), (700, 1400), (1400, 2500)]
    a1 = np.concatenate([fast.play(values[i:j], None if eps is None else eps[i:j], u[i:j])
                         for i, j in chunks])
    a2 = play_by_rows(slow, values, eps, u)
    assert np.array_equal(a1, a2)
    assert fast.get_state() == slow.get_state()
    assert fast.model.to_dict() == slow.model.to_dict()


@pytest.mark.parametrize("case", sorted(CASES))
def test_state_round_trip_continues_identically(case: str) -> None:
    config = _config(case)
    a = build_policy(config, np.random.default_rng(2))
    values, eps, u = _users(a, 1200, seed=6)
    cut = 600
    a.play(values[:cut], None if eps is None else eps[:cut], u[:cut])
    state = json.loads(json.dumps(a.get_state(), allow_nan=False))  # through JSON, like the store
    b = build_policy(config, np.random.default_rng(2))
    b.set_state(state)
    a.rng, b.rng = np.random.default_rng(9), np.random.default_rng(9)  # same analyzer noise
    rest = (values[cut:], None if eps is None else eps[cut:], u[cut:])
    assert np.array_equal(a.play(*rest), b.play(*rest))
    assert a.get_state() == b.get_state()


def test_models_are_plain_json_and_round_trip() -> None:
    for model in (ArmModel(3, 10, indices=np.array([0.5, math.inf, 0.2])),
                  ArmModel(4, 11, probabilities=np.array([0.25, 0.5, 0.25])),
                  ArmModel(5, 12, arm=2)):
        data = json.loads(json.dumps(model.to_dict(), allow_nan=False))
        back = ArmModel.from_dict(data)
        assert back.to_dict() == model.to_dict()
        assert np.array_equal(back.decide(np.array([0.1, 0.6, 0.99])),
                              model.decide(np.array([0.1, 0.6, 0.99])))
    assert ArmModel(0, 0, indices=np.array([0.5, math.inf, math.inf])).decide(0.3)[0] == 1
    assert list(ArmModel(0, 0, probabilities=np.array([0.25, 0.5, 0.25])).decide(
        np.array([0.0, 0.24, 0.25, 0.74, 0.75, 0.999]))) == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError):
        ArmModel(0, 0)


def test_eps_min_drops_exactly_the_responses_below_it() -> None:
    policy = build_policy(make_config("heldp-ucb-b", K=3, epsilon_dist="choice:0,0.2,1,2",
                                      eps_min=1.0))
    rows = np.array([[0, 0.0, 0.0], [1, 0.2, 1.0], [2, 1.0, 1.0], [0, 2.0, 0.0], [1, 0.99, 1.0]])
    for row in rows:
        policy.ingest(row[None])
    idx = policy.index
    assert idx.t == 5 and idx.N == [1, 0, 1] and policy.used == 2 and policy.declined == 1
    g = 0.5 + (np.array([0.0, 1.0]) - 0.5) / np.tanh(np.array([2.0, 1.0]) / 2)
    assert idx.S == [g[0], 0.0, g[1]]
    assert policy.model.indices[1] == math.inf  # never used: still +∞
    ledger = policy.ledger().model_dump()["per_user_epsilon"]
    assert ledger["fraction_used"] == 2 / 5 and ledger["fraction_declined"] == 1 / 5


def test_heldp_l_warm_up_forces_arms_below_the_laplace_condition() -> None:
    """Agent 2 line 4: an arm with A_a ≤ ε_min⁻² ln t⁴ is pulled first (published as +∞)."""
    policy = build_policy(make_config("heldp-ucb-l", K=3, epsilon=1.0))
    values = np.tile([0.9, 0.1, 0.5], (60, 1))
    arms = policy.play(values, np.ones(60), np.zeros(60))
    A = np.array(policy.index.W)
    thr = 4 * math.log(61)
    assert list(np.isinf(policy.model.indices)) == list(A <= thr)
    # While forced, the lowest forced arm is pulled: the first pulls go 0, 0, …, then arm 1.
    assert arms[0] == 0 and arms[1] == 0 and 1 in arms[:60]


def test_width_formulas_are_the_agents() -> None:
    """u_a for one arm after a few reports, from Agent 2 line 15 / Agent 4 line 11 directly."""
    eps = np.array([1.0, 2.0, 0.5])
    for algo in ("heldp-ucb-l", "heldp-ucb-b", "ucb"):
        policy = build_policy(make_config(algo, K=2, **({} if algo == "ucb" else
                                                         {"epsilon": 1.0, "eps_min": 0.5})))
        xs = {"ucb": np.array([0.7, 1.0, 0.0]), "heldp-ucb-b": np.array([1.0, 1.0, 0.0]),
              "heldp-ucb-l": np.array([0.3, 1.4, -0.2])}[algo]
        for x, e in zip(xs, eps, strict=True):
            policy.ingest(np.array([[0, x]] if algo == "ucb" else [[0, e, x]]))
        t, n, lg = 3, 3, math.log(3**4)
        if algo == "heldp-ucb-l":
            A = float(np.sum(1 / eps**2))
            want = xs.mean() + math.sqrt(lg / (2 * n)) + math.sqrt(8 * A * lg / n**2)
            policy.index.forced = 0.0  # compare the index itself, not the warm-up
        elif algo == "heldp-ucb-b":
            g = 0.5 + (xs - 0.5) / np.tanh(eps / 2)
            B = float(np.sum(1 / np.tanh(eps / 2) ** 2))
            want = g.mean() + math.sqrt(B * lg / (2 * n**2))
        else:
            want = xs.mean() + math.sqrt(2 * math.log(t) / n)
        assert policy.index.indices()[0] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("case", ["ucb", "heldp-ucb-l", "heldp-ucb-b", "ldp-mab", "adar-ucb"])
def test_confidence_scale_is_post_processing(case: str) -> None:
    outs, ledgers = [], []
    for scale in (1.0, 0.1):
        policy = build_policy(_config(case, confidence_scale=scale))
        values, eps, _ = _users(policy, 50, seed=8)
        outs.append(values)
        ledgers.append(policy.ledger(T=1000).model_dump())
    assert np.array_equal(outs[0], outs[1]) and ledgers[0] == ledgers[1]


def test_ingest_refuses_bad_rows_without_changing_state() -> None:
    policy = build_policy(make_config("heldp-ucb-b", K=3, epsilon=1.0))
    before = policy.get_state()
    for row in ([3, 1.0, 1.0], [0, 1.0, 0.5], [0, float("nan"), 1.0], [0, 1.0]):
        with pytest.raises(ValueError):
            policy.ingest(np.array([row]))
    assert policy.get_state() == before


def test_tsallis_weights_are_the_ftrl_solution() -> None:
    L = [0.0, 3.0, 10.0, 1.5]
    for eta in (2.0, 0.2, 0.01):
        p, cum, x, _ = tsallis_weights(L, eta)
        w = 4 / (eta * (np.array(L) - x)) ** 2
        assert abs(w.sum() - 1) < 1e-10 and np.allclose(p, w / w.sum(), atol=1e-15)
        assert x < min(L) and cum[-1] == pytest.approx(1.0)
    p, *_ = tsallis_weights([0.0] * 5, 2.0)  # round 1: uniform
    assert np.allclose(p, 0.2)


def test_adar_ucb_episodes_double_and_noise_is_calibrated() -> None:
    policy = build_policy(make_config("adar-ucb", K=3, epsilon=1.0, alpha=2.0),
                          np.random.default_rng(0))
    values = np.tile([1.0, 0.0, 0.0], (200, 1))
    arms = policy.play(values, None, np.zeros(200))
    assert arms[:3].tolist() == [0, 1, 2]  # line 3: each arm once
    # Line 7: an episode doubles its arm's count, so completed counts are powers of two and the
    # running episode is as long as its arm's count before it.
    assert all(n & (n - 1) == 0 for n in policy.pulls)
    assert policy.target == policy.pulls[policy.arm] and sum(policy.pulls) + policy.count == 200
    assert np.bincount(arms, minlength=3)[policy.arm] == policy.pulls[policy.arm] + policy.count
    assert policy.noise_sd(4) == pytest.approx(math.sqrt(2.0 / (2 * 1.0 * 16)))
    assert policy.bonus(1, 10) == pytest.approx(math.sqrt((0.5 + 2.0) * 4 * math.log(10)))
    assert policy.model.version == policy.episodes
