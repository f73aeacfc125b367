"""The ``mab`` environment (shared/core/environments/mab.py): means, laws, default instance."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.shared.core.environments.mab import MABEnvironment, default_means


def test_default_instance() -> None:
    for K in (2, 5, 20):
        mu = default_means(K)
        assert mu.shape == (K,) and mu[0] == 0.9 and mu.argmax() == 0
        assert np.isclose(np.sort(mu)[-1] - np.sort(mu)[-2], 0.1)


@pytest.mark.parametrize("dist", ["bernoulli", "mixed", "gaussian"])
def test_reward_means_are_the_arm_means(dist: str) -> None:
    env = MABEnvironment(default_means(7), dist)
    R = env.reward_grid(200_000, np.random.default_rng(3))
    se = R.std(axis=0) / math.sqrt(R.shape[0])
    assert (np.abs(R.mean(axis=0) - env.means) < 5 * se + 1e-12).all()
    if dist != "gaussian":
        assert ((R >= 0) & (R <= 1)).all()
    assert env.bounded == (dist != "gaussian")


def test_mixed_families_reproduce_the_issue_examples() -> None:
    """Beta(4, 1) at 0.8, uniform on {0.4, 1} at 0.7, U[0, 1] at 0.5; none is Bernoulli."""
    env = MABEnvironment([0.8, 0.7, 0.5], "mixed")
    R = env.reward_grid(100_000, np.random.default_rng(0))
    beta = R[:, 0]
    assert abs(np.mean(beta**2) - (0.64 + 4 / (25 * 6))) < 0.005  # E[X²] of Beta(4, 1)
    assert np.allclose(np.unique(R[:, 1]), [0.4, 1.0])
    assert R[:, 2].min() < 0.01 and R[:, 2].max() > 0.99 and abs(R[:, 2].var() - 1 / 12) < 0.002
    assert not np.isin(R, (0.0, 1.0)).all(axis=0).any()


def test_bad_instances_are_refused() -> None:
    for means, dist in [([0.5], "bernoulli"), ([0.2, 1.2], "bernoulli"), ([0.0, 0.5], "mixed"),
                        ([0.5, float("nan")], "bernoulli"), ([0.2, 0.4], "poisson")]:
        with pytest.raises(ValueError):
            MABEnvironment(means, dist)
