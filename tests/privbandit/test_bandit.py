"""Issue 42, items 1, 4 and 5: every registered policy serves users through
``privbandit.Bandit`` (construct, decide, feedback, a few hundred rounds, its ledger); one
decision takes one feedback; batch decide; arms named by label; save/load round trips.
(``privbandit.simulate`` of every registered policy: ``test_one_path.py``.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import privbandit
from privbandit import Bandit, Choice, DecisionClosed
from privbandit.shared.core.policies.families import ARMS, BCO_FAMILY, PHASE
from privbandit.shared.core.policies.registry import REGISTRY

D, K = 3, 4
# Small, quick settings per policy (the rest: each policy's practical defaults).
PARAMS: dict[str, dict[str, Any]] = {
    "sblb": {"batch_size": 50},
    "sblb-fixed": {"batch_size": 50},
    "ddp-linucb": {"batch_size": 50},
    "adar-gope": {"K": 5, "arm_seed": 1},
    "lplr": {"K": K, "first_epoch": 100},
}


def make(algo: str, seed: int = 0) -> Bandit:
    family = REGISTRY[algo].family
    dims = {"K": K} if family is ARMS else {"d": D}
    return Bandit(algo, seed=seed, **{**dims, **PARAMS.get(algo, {})})


def users(n: int, seed: int) -> np.ndarray:
    """n users' (K, D) features, every ‖x‖ ≤ 1 (first coordinate 1/√2, as in linear)."""
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(n, K, D - 1))
    v /= np.linalg.norm(v, axis=2, keepdims=True)
    return np.concatenate([np.full((n, K, 1), 2**-0.5), v * 2**-0.5], axis=2)


def give(bandit: Bandit, choice: Choice, rng: np.random.Generator) -> None:
    """A feedback a user of the policy's family could give."""
    if bandit.family is BCO_FAMILY:
        assert choice.points is not None
        bandit.feedback(choice, losses=[min(1.0, float(np.sum(np.square(p))))
                                        for p in choice.points])
    else:
        bandit.feedback(choice, reward=float(rng.random() < 0.3 + 0.1 * (choice.action % 3)))


def play(bandit: Bandit, n: int, seed: int) -> list[Any]:
    """n rounds of decide → feedback; the decisions (arm, or BCO points) in order."""
    rng = np.random.default_rng(seed + 1)
    X = users(n, seed)
    out: list[Any] = []
    for i in range(n):
        c = bandit.decide(X[i]) if bandit.family.takes_features else bandit.decide()
        out.append(c.points if bandit.family is BCO_FAMILY else c.action)
        give(bandit, c, rng)
    return out


@pytest.mark.parametrize("algo", sorted(REGISTRY))
def test_every_policy_serves_users(algo: str) -> None:
    bandit = make(algo)
    decisions = play(bandit, 300, seed=2)
    assert len(decisions) == 300 and bandit.open_decisions == 0
    if bandit.family is not BCO_FAMILY:
        n_arms = 5 if bandit.family is PHASE else K
        assert {int(a) for a in decisions} <= set(range(n_arms))
    # every report was ingested or waits for its window / batch (lplr: its layer group)
    waiting = bandit._sums.n if bandit._sums is not None else len(bandit._pending)
    assert bandit.policy.reports + waiting == 300
    ledger = bandit.ledger(300)
    assert ledger.threat_model == REGISTRY[algo].threat_models[0]


def test_ucb_from_the_issue() -> None:
    """issue 42: ``Bandit("ucb", K=3).decide(...)`` raised AttributeError (no d)."""
    bandit = privbandit.Bandit("ucb", K=3, seed=0)
    c = bandit.decide()
    assert c.action in (0, 1, 2) and c.propensity == 1.0 and c.features is None
    bandit.feedback(c, reward=1.0)
    with pytest.raises(ValueError, match="no features"):
        bandit.decide(np.eye(3))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        bandit.feedback(bandit.decide(), reward=2.0)


@pytest.mark.parametrize("algo", ["linucb", "ddp-linucb", "heldp-ucb-l", "ldp-bco2", "adar-gope"])
def test_one_decision_takes_one_feedback(algo: str) -> None:
    bandit = make(algo)
    rng = np.random.default_rng(0)
    X = users(1, 0)[0]
    c = bandit.decide(X) if bandit.family.takes_features else bandit.decide()
    give(bandit, c, rng)
    state = (bandit.policy.reports, len(bandit._pending), bandit.policy.model.to_dict())
    for _ in range(3):
        with pytest.raises(DecisionClosed, match="one decision, one feedback"):
            give(bandit, c, rng)
    assert (bandit.policy.reports, len(bandit._pending), bandit.policy.model.to_dict()) == state
    other = make(algo, seed=1)  # a decision of another learner is not open here either
    forged = Choice(c.action, c.propensity, c.model_version, c.features, c.arm, c.points, 10**6)
    with pytest.raises(DecisionClosed):
        give(other, forged, rng)


def test_a_discarded_decision_is_closed_without_a_report() -> None:
    bandit = make("ldp-linucb")
    c = bandit.decide(users(1, 0)[0])
    bandit.discard(c)
    assert bandit.open_decisions == 0 and bandit.policy.reports == 0
    with pytest.raises(DecisionClosed):
        bandit.feedback(c, reward=1.0)
    with pytest.raises(DecisionClosed):
        bandit.discard(c)


def test_a_refused_feedback_keeps_the_decision_open() -> None:
    bandit = make("heldp-ucb-b")
    c = bandit.decide()
    for bad in ({"reward": float("nan")}, {"reward": 0.5, "epsilon": -1.0},
                {"losses": [0.1]}, {"reward": 1.5}):
        with pytest.raises(ValueError):
            bandit.feedback(c, **bad)
    assert bandit.open_decisions == 1
    bandit.feedback(c, reward=1.0, epsilon=0.5)  # the user's own level
    assert bandit.open_decisions == 0 and bandit.policy.reports == 1
    ucb = make("ucb")
    with pytest.raises(ValueError, match="no per-user privacy levels"):
        ucb.feedback(ucb.decide(), reward=1.0, epsilon=1.0)


def test_batch_decide_equals_one_by_one_from_the_same_model() -> None:
    X = users(64, 5)
    one = make("ldp-linucb", seed=3)
    many = make("ldp-linucb", seed=3)
    play(one, 200, seed=9)
    play(many, 200, seed=9)
    batch = many.decide_batch(X)
    singles = [one.decide(x) for x in X]
    assert [c.action for c in batch] == [c.action for c in singles]
    assert len({c.decision for c in batch}) == 64 and many.open_decisions == 64
    for c in batch:
        many.feedback(c, reward=1.0)
    assert many.open_decisions == 0
    # fixed-arm and BCO policies: n users
    assert len(make("ldp-mab").decide_batch(n=10)) == 10
    assert all(c.points is not None for c in make("bco").decide_batch(n=3))


def test_arms_by_label_may_come_and_go() -> None:
    bandit = make("linucb")
    rng = np.random.default_rng(0)
    catalogue = {f"item-{i}": users(1, i)[0][0] for i in range(10)}
    seen = set()
    for _ in range(200):
        on_offer = rng.choice(10, size=int(rng.integers(1, 6)), replace=False)
        offer = {f"item-{i}": catalogue[f"item-{i}"] for i in on_offer}
        c = bandit.decide(offer)
        assert c.arm in offer and np.array_equal(c.features, offer[c.arm])
        assert list(offer)[c.action] == c.arm
        seen.add(c.arm)
        bandit.feedback(c, reward=float(c.arm == "item-3"))
    assert len(seen) > 3
    # a batch of users with different arm sets
    batch = bandit.decide_batch([{"a": catalogue["item-1"]},
                                 {"b": catalogue["item-2"], "c": catalogue["item-3"]}])
    assert batch[0].arm == "a" and batch[1].arm in ("b", "c")
    # a multi-armed policy names its fixed arms
    mab = Bandit("ucb", arms=["red", "green", "blue"], seed=0)
    c = mab.decide()
    assert c.arm in ("red", "green", "blue") and c.arm == ["red", "green", "blue"][c.action]
    with pytest.raises(ValueError, match="3 arm labels"):
        Bandit("ucb", arms=["a", "b", "c"], K=4)
    with pytest.raises(ValueError, match="fixed arms"):
        Bandit("linucb", arms=["a", "b"])


@pytest.mark.parametrize("algo", sorted(REGISTRY))
def test_save_and_load_round_trip(tmp_path: Path, algo: str) -> None:
    """A loaded learner makes the same decisions, publishes the same models and states the same
    ledger as the one saved, with the open decisions and the reports not yet ingested."""
    bandit = make(algo, seed=4)
    play(bandit, 120, seed=6)
    if algo == "lplr":
        with pytest.raises(ValueError, match="lplr cannot be saved"):
            bandit.save(tmp_path / "learner.json")
        return
    X = users(1, 99)[0]
    open_choice = bandit.decide(X) if bandit.family.takes_features else bandit.decide()
    path = tmp_path / "learner.json"
    bandit.save(path)
    loaded = Bandit.load(path)
    assert loaded.config == bandit.config
    assert loaded.ledger(1000) == bandit.ledger(1000)
    assert loaded.open_decisions == bandit.open_decisions == 1
    assert len(loaded._pending) == len(bandit._pending)
    rng_a, rng_b = np.random.default_rng(1), np.random.default_rng(1)
    give(bandit, open_choice, rng_a)
    give(loaded, open_choice, rng_b)
    assert play(loaded, 150, seed=7) == play(bandit, 150, seed=7)
    assert loaded.policy.model.to_dict() == bandit.policy.model.to_dict()
    assert loaded.policy.reports == bandit.policy.reports
    assert loaded.ledger(1000) == bandit.ledger(1000)


def test_load_refuses_what_is_not_a_learner(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not a saved privbandit learner"):
        Bandit.load(bad)
    with pytest.raises(ValueError, match="cannot read"):
        Bandit.load(tmp_path / "missing.json")
