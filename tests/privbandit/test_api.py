"""The API's documented examples run: the module docstring of ``privbandit.api`` and the
snippets of docs/api.md (doctest), and the names re-exported from ``privbandit``."""

from __future__ import annotations

import doctest
from pathlib import Path

import numpy as np
import pytest

import privbandit
from privbandit import api

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_the_api_docstring_examples_run() -> None:
    result = doctest.testmod(api, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 10 and result.failed == 0


def test_the_api_page_snippets_run() -> None:
    result = doctest.testfile(str(DOCS), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 5 and result.failed == 0


def test_privbandit_re_exports_the_api() -> None:
    for name in privbandit.API:
        assert getattr(privbandit, name) is getattr(api, name)
    with pytest.raises(AttributeError):
        privbandit.nothing_here  # noqa: B018


def test_bad_features_and_rewards_are_refused() -> None:
    bandit = api.Bandit("linucb", d=2, seed=0)
    for X in (np.ones((3, 3)), np.full((3, 2), 2.0), np.array([[np.nan, 0.0]])):
        with pytest.raises(ValueError):
            bandit.decide(X)
    choice = bandit.decide(np.eye(2) / 2)
    with pytest.raises(ValueError):
        bandit.feedback(choice, float("inf"))


def test_an_intercept_turns_on_the_centered_encoding_and_is_checked() -> None:
    """ddp-linucb with ``intercept=c`` runs the centered encoding (its 'auto' default) and
    refuses, at decide, any arm whose first coordinate is not c; without one, frobenius."""
    bandit = api.Bandit("ddp-linucb", d=2, intercept=0.6, batch_size=10, seed=1)
    assert (bandit.policy.config.encoding, bandit.policy.config.u_weight) == ("centered", 1.5)
    X = np.array([[0.6, 0.3], [0.6, -0.3]])
    for _ in range(20):
        c = bandit.decide(X)
        bandit.feedback(c, reward=float(c.action == 1))
    assert bandit.policy.reports == 20
    with pytest.raises(ValueError, match="intercept"):
        bandit.decide(np.array([[0.6, 0.3], [0.5, -0.3]]))
    assert api.Bandit("ddp-linucb", d=2, seed=1).policy.config.encoding == "frobenius"


def test_per_arm_intercepts_are_declared_by_their_coordinates() -> None:
    """Per-arm features x_a = e_a ⊗ (c, v): with ``intercept_coords`` at the block starts the
    bandit runs the centered encoding there and refuses, at decide, an arm whose block starts
    do not sum to c (x[0] itself is 0 for every arm but the first)."""
    c = 0.6
    bandit = api.Bandit("ddp-linucb", d=4, intercept=c, intercept_coords=(0, 2), batch_size=10,
                        seed=1)
    assert bandit.policy.config.encoding == "centered"
    assert bandit.policy.randomizer.intercept_coords == (0, 2)
    X = np.array([[c, 0.3, 0.0, 0.0], [0.0, 0.0, c, -0.3]])
    for _ in range(20):
        choice = bandit.decide(X)
        bandit.feedback(choice, reward=float(choice.action == 1))
    assert bandit.policy.reports == 20
    with pytest.raises(ValueError, match=r"coordinates \[0, 2\]"):
        bandit.decide(np.array([[c, 0.3, 0.0, 0.0], [0.0, 0.0, 0.5, -0.3]]))
    with pytest.raises(ValueError, match="intercept"):  # x[0] = c alone is not the rule here
        api.Bandit("ddp-linucb", d=4, intercept=c, intercept_coords=(0, 2), batch_size=10,
                   seed=1).decide(np.array([[c, 0.3, c, 0.0]]))


def test_a_shuffle_policy_ingests_only_full_batches() -> None:
    bandit = api.Bandit("ddp-linucb", d=2, batch_size=50, seed=1)
    X = np.eye(2) / 2
    for _ in range(49):
        bandit.feedback(bandit.decide(X), 1.0)
    assert bandit.policy.reports == 0
    bandit.feedback(bandit.decide(X), 1.0)
    assert bandit.policy.reports == 50
