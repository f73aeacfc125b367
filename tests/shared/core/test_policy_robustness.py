"""A statistic that would make the policy's linear algebra fail never raises out of ``ingest``:
the update is skipped (``skipped`` counted), the published model stays, and the next good batch
is learned from as if the bad one had never come."""

from __future__ import annotations

import numpy as np

from privbandit.shared.core.policies import build_policy, make_config


def _good_rows(policy, n: int, rng: np.random.Generator) -> np.ndarray:
    d = policy.config.d
    x = rng.normal(size=(n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return policy.randomizer.randomize(x, rng.uniform(size=n), rng)


def test_non_finite_statistic_is_skipped_without_changing_state() -> None:
    rng = np.random.default_rng(3)
    policy = build_policy(make_config("ldp-linucb", d=3, epsilon=2.0, update_every=4), rng)
    policy.ingest(_good_rows(policy, 4, rng))
    before = policy.get_state()
    bad = np.full((4, policy.randomizer.width), np.inf)
    assert policy.ingest(bad) == 4  # consumed, not learned from
    after = policy.get_state()
    assert after.pop("skipped") == before.pop("skipped") + 1
    assert after == before


def test_unsolvable_state_skips_the_update_and_keeps_the_model() -> None:
    """Entries near the float limit: the sum stays finite but the eigen-repair and the
    Cholesky solve cannot produce a finite θ̃; nothing is published from it."""
    rng = np.random.default_rng(4)
    policy = build_policy(make_config("sblb-fixed", d=2, eps0=4.0, batch_size=5), rng)
    policy.ingest(_good_rows(policy, 5, rng))
    model = policy.model
    policy.G = np.full((2, 2), 1e308)
    policy.G[0, 1] = policy.G[1, 0] = -1e308
    with np.errstate(over="ignore"):
        policy.ingest(_good_rows(policy, 5, rng))
    assert policy.skipped == 1
    assert policy.model is model
