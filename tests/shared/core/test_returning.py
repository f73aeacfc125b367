"""Returning users in the simulator (shared/core/returning.py): the visit order, the device's
first-k rule, windows filled with reports, the correlation of a person's contexts."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.shared.core.environments.linear import LinearEnvironment
from privbandit.shared.core.environments.mab import MABEnvironment, default_means
from privbandit.shared.core.policies.registry import entry
from privbandit.shared.core.returning import (
    Population,
    _kept,
    _Visits,
    simulate_returning,
    visit_order,
)


def test_visit_order_gives_each_person_her_share() -> None:
    order = visit_order(7, 100, np.random.default_rng(0))
    visits = np.bincount(order, minlength=7)
    assert set(visits.tolist()) <= {14, 15} and visits.sum() == 100


def test_kept_is_the_first_k_of_each_person_in_order() -> None:
    counts = np.array([0, 2, 3])
    keep = _kept(np.array([0, 1, 0, 1, 0, 2, 0]), counts, 3)
    # person 0: 3 left → her first three visits; person 1: one left; person 2: none
    assert keep.tolist() == [True, True, True, False, True, False, False]
    assert _kept(np.array([2, 2]), counts, None).tolist() == [True, True]


@pytest.mark.parametrize("algo,kw", [
    ("ldp-linucb", {"d": 4, "epsilon": 1.0, "update_every": 7}),
    ("sblb-fixed", {"d": 4, "eps0": 4.0, "batch_size": 50}),
])
def test_no_person_beyond_k_and_every_report_ingested(algo: str, kw: dict) -> None:
    """T visits of N persons bounded to k: each person's reports are min(visits, k), the policy
    ingests exactly those (whole batches only, for a batched policy), the rest are withheld."""
    T, N, k = 3000, 120, 10
    cfg = entry(algo).config(**kw)
    results, params = simulate_returning(cfg, "linear", 6, T, 2, 3, Population(N, k, 0.4))
    assert params["users"] == N and params["contributions"] == k
    for r in results:
        assert r.extra["max_reports_per_person"] == k
        made = N * k  # T/N = 25 visits each, k = 10 kept
        batch = kw.get("batch_size", 1)
        assert r.reports_ingested == made - made % batch
        assert r.extra["withheld"] == T - made
        assert r.checkpoints[-1] == T and np.all(np.diff(r.regret) >= -1e-12)


def test_a_persons_contexts_lean_to_her_offset() -> None:
    """With offset c, a person's arm directions have mean ≈ c/√(1+c²)·o_u-ish: their average
    over her visits points along her offset (cosine > 0.5), while without it they do not."""
    rng = np.random.default_rng(4)
    env = LinearEnvironment(6, 8, rng)
    offsets = np.zeros((2, 5))
    offsets[0, 0] = 1.0
    visits = _Visits(env, np.zeros(400, dtype=np.int64), offsets)
    users, X, _ = visits.take(400)
    v = X[..., 1:] * np.sqrt(2)  # the unit directions inside x = (1, v)/√2
    mean = v.reshape(-1, 5).mean(axis=0)
    assert mean[0] > 0.5 and np.abs(mean[1:]).max() < 0.05
    plain = _Visits(env, np.ones(400, dtype=np.int64), offsets)  # person 1: no offset
    _, X1, _ = plain.take(400)
    assert np.abs((X1[..., 1:] * np.sqrt(2)).reshape(-1, 5).mean(axis=0)).max() < 0.05


def test_mab_returning_users_keep_their_level_and_the_bound() -> None:
    cfg = entry("heldp-ucb-b").config(K=5, epsilon_dist="choice:0.5,1,2")
    env = MABEnvironment(default_means(5))
    T, N, k = 2000, 50, 8
    results, _ = simulate_returning(cfg, "mab", 5, T, 1, 2, Population(N, k, 0.05), mab_env=env)
    r = results[0]
    assert r.extra["max_reports_per_person"] == k
    assert r.extra["reports"] == N * k and r.extra["withheld"] == T - N * k
    assert r.regret[-1] < r.random_regret[-1]  # it learns from the kept reports


def test_returning_needs_linear_or_mab() -> None:
    cfg = entry("ldp-linucb").config(d=4, epsilon=1.0)
    with pytest.raises(ValueError):
        simulate_returning(cfg, "digits", 10, 100, 1, 0, Population(10, 2))
    with pytest.raises(ValueError):
        Population(0)
    with pytest.raises(ValueError):
        Population(5, 0)
