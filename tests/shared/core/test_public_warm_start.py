"""A public warm start (issue 44): off by default, labelled public in the ledger (not protected,
not charged), the users' guarantee unchanged, and the exact public statistics in the model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from privbandit import simulate
from privbandit.shared.core.policies import build_policy, make_config

ALGOS = ("ddp-linucb", "adar-oful")


@pytest.mark.parametrize("algo", ALGOS)
def test_off_by_default_and_labelled_public_when_on(algo: str) -> None:
    off = make_config(algo, d=3)
    assert off.public_warm_start == 0
    plain = build_policy(off).ledger().model_dump()
    assert "public_warm_start" not in plain and "public warm start" not in plain["accounting"]
    on = build_policy(make_config(algo, d=3, public_warm_start=50)).ledger().model_dump()
    assert on["public_warm_start"] == {"rounds": 50, "privacy": "public", "charged": False}
    assert "50 logged rounds the operator declared public" in on["accounting"]
    # Charged nothing: every figure of the users' guarantee is the one without it.
    for key in ("threat_model", "central_epsilon", "central_delta", "rdp_alpha", "rdp_epsilon",
                "ldp_epsilon"):
        assert on[key] == plain[key]


@pytest.mark.parametrize("algo", ALGOS)
def test_warm_start_publishes_the_exact_public_model(algo: str) -> None:
    rng = np.random.default_rng(7)
    n, d = 40, 3
    X = rng.normal(size=(n, d)) / 2
    r = rng.random(n)
    policy = build_policy(make_config(algo, d=d, public_warm_start=n), rng)
    version = policy.model.version
    policy.warm_start(X[:30], r[:30])
    policy.warm_start(X[30:], r[30:])
    assert policy.public_reports == n and policy.reports == 0
    assert policy.model.version > version
    lam = policy.config.lam
    # No private report yet: (G, u) are the public ones exactly (ddp-linucb's ridge at t = 0 is
    # λ; adar-oful's V is λI + Σ x xᵀ), so θ̃ is the ridge solution on the public rows.
    expected = np.linalg.solve(X.T @ X + lam * np.eye(d), X.T @ r)
    assert np.allclose(policy.model.theta, expected, rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="declares public_warm_start"):
        policy.warm_start(X[:1], r[:1])  # beyond what the config (and so the ledger) declares


def test_refused_without_a_declaration_or_after_a_private_report() -> None:
    rng = np.random.default_rng(3)
    policy = build_policy(make_config("adar-oful", d=2), rng)
    with pytest.raises(ValueError, match="declares public_warm_start = 0"):
        policy.warm_start(np.ones((1, 2)) / 2, np.ones(1))
    late = build_policy(make_config("adar-oful", d=2, public_warm_start=5), rng)
    late.ingest(np.array([[0.5, 0.5, 1.0]]))
    with pytest.raises(ValueError, match="before the first private report"):
        late.warm_start(np.ones((1, 2)) / 2, np.ones(1))


def test_simulator_labels_it_and_keeps_the_users() -> None:
    """The simulator draws the public rounds from their own stream: the users (and so the random
    policy's regret on them) are those of the run without it; the privacy JSON labels them."""
    base = simulate("ddp-linucb", "linear", T=800, seed=5)
    warm = simulate("ddp-linucb", "linear", T=800, seed=5, public_warm_start=100)
    assert warm["random_regret_mean"] == base["random_regret_mean"]
    assert warm["privacy"]["public_warm_start"]["rounds"] == 100
    assert warm["privacy"]["central_epsilon"] == base["privacy"]["central_epsilon"]
    assert "public_warm_start" not in base["privacy"]


def test_a_service_task_refuses_it() -> None:
    """The services cannot receive the public log, so a task may not declare one (its ledger would
    name public rounds that no model learned from)."""
    from pydantic import ValidationError

    from privbandit.shared.settings import TaskConfig

    policy = {"algo": "adar-oful", "d": 5}
    TaskConfig(id="t", threat_model="central", policy=policy)
    with pytest.raises(ValidationError, match="the services take no public warm start"):
        TaskConfig(id="t", threat_model="central", policy={**policy, "public_warm_start": 10})


def test_the_library_takes_it_and_labels_it() -> None:
    from privbandit import Bandit

    rng = np.random.default_rng(11)
    bandit = Bandit("ddp-linucb", seed=1, public_warm_start=20)
    X = rng.normal(size=(20, 5)) / 4
    bandit.warm_start(X, rng.random(20))
    assert bandit.model.version == 1
    assert bandit.ledger().model_dump()["public_warm_start"]["rounds"] == 20


@pytest.mark.parametrize("algo", ALGOS)
def test_a_saved_learner_keeps_count_of_its_public_rounds(algo: str, tmp_path: Path) -> None:
    """The public rounds taken are saved with the learner: after save → load the rest of the
    declaration can be taken, no more (before, a reloaded learner counted 0 and could learn the
    same public log twice), and the model is the one of the same rounds taken in one process."""
    from privbandit import Bandit

    rng = np.random.default_rng(12)
    X = rng.normal(size=(20, 5)) / 4
    r = rng.random(20)
    bandit = Bandit(algo, seed=1, public_warm_start=20)
    bandit.warm_start(X[:12], r[:12])
    bandit.save(tmp_path / "a.json")
    again = Bandit.load(tmp_path / "a.json")
    assert again.policy.public_reports == 12
    with pytest.raises(ValueError, match="12 public rounds taken and 9 more, but the config "
                                         "declares public_warm_start = 20$"):
        again.warm_start(X[:9], r[:9])
    again.warm_start(X[12:], r[12:])
    bandit.warm_start(X[12:], r[12:])
    assert np.array_equal(again.model.theta, bandit.model.theta)
    again.save(tmp_path / "b.json")
    with pytest.raises(ValueError, match="20 public rounds taken and 1 more"):
        Bandit.load(tmp_path / "b.json").warm_start(X[:1], r[:1])


@pytest.mark.parametrize("declared", [0, 20])
def test_an_old_saved_learner_counts_every_declared_round_as_taken(declared: int,
                                                                   tmp_path: Path) -> None:
    """A file saved before the count was kept still loads; it cannot say how many public rounds
    were taken, so all declared ones count as taken and a further warm start is refused, saying
    why (counting 0 would reopen the double warm start). With none declared that count is exact.
    The ledger is the saved learner's either way."""
    from privbandit import Bandit

    bandit = Bandit("ddp-linucb", seed=1, public_warm_start=declared)
    path = tmp_path / "old.json"
    bandit.save(path)
    data = json.loads(path.read_text())
    del data["policy"]["public_reports"]
    path.write_text(json.dumps(data))
    old = Bandit.load(path)
    assert old.policy.public_reports == declared
    assert old.ledger() == bandit.ledger()
    why = "saved before the count of public rounds" if declared else "= 0$"
    with pytest.raises(ValueError, match=why):
        old.warm_start(np.full((1, 5), 0.1), np.ones(1))
