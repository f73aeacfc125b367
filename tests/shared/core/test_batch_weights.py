"""Batch weights of the scheduled batch policies (issue 22, ``batch_weight_power``): the estimate
is formed from Σ_j a_j (G̃_j, ũ_j) with a_j = (l_j / l_ref)^p, and the noise proxies that size
the ridge and the width are Σ_j a_j² × batch j's noise."""

from __future__ import annotations

import json

import numpy as np
import pytest

from privbandit.shared.core.policies import build_policy, make_config
from privbandit.shared.core.policies.ddp_linucb import DDPLinUCB
from privbandit.shared.core.policies.registry import entry


def _policy(power: float, spec: str = "geometric:4,2,16") -> DDPLinUCB:
    config = make_config("ddp-linucb", d=2, batch_schedule=spec, regularizer="noise",
                         batch_weight_power=power)
    policy = build_policy(config)
    assert isinstance(policy, DDPLinUCB)
    return policy


def _feed(policy: DDPLinUCB, batches: int, seed: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Ingest ``batches`` batches of random reports; returns each batch's (length, G̃_j, ũ_j) as
    the randomizer of its length estimates them (the per-batch sums, independently of the
    policy's accumulation)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(batches):
        n = policy.batch_size
        x = rng.normal(size=(n, 2))
        x /= 2 * np.linalg.norm(x, axis=1, keepdims=True)  # ‖x‖ = 1/2 ≤ L
        rows = policy.randomizer.randomize(x, rng.random(n), rng)
        stat = policy.randomizer.sufficient(rows)
        est = policy.randomizer.estimate(stat, n)
        out.append((n, est.G, est.u))
        # The batch sum as released, without the aggregators' noise: the weighting is what is
        # checked here, on exactly the statistic it weighs.
        policy.ingest_statistic(stat, n)
    return out


@pytest.mark.parametrize("power", [0.5, 1.0])
def test_sums_are_the_weighted_batch_sums(power: float) -> None:
    policy = _policy(power)
    batches = _feed(policy, 5, seed=3)  # lengths 4, 8, 16, 16, 16: the cap repeats
    assert [n for n, _, _ in batches] == [4, 8, 16, 16, 16]
    ref = max(n for n, _, _ in batches)
    weights = [(n / ref) ** power for n, _, _ in batches]
    G = sum(w * g for w, (_, g, _) in zip(weights, batches, strict=True))
    u = sum(w * v for w, (_, _, v) in zip(weights, batches, strict=True))
    np.testing.assert_allclose(policy.G, G, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(policy.u, u, rtol=1e-12, atol=1e-12)
    # Σ_j a_j² × (reports × per-report proxy) of batch j, for each kind of entry.
    for kind in ("matrix", "vector", "offdiag"):
        expected = 0.0
        for w, (n, _, _) in zip(weights, batches, strict=True):
            r = policy.randomizer_for(n)
            per_report = {"matrix": r.matrix_proxy(), "vector": r.vector_proxy(),
                          "offdiag": r.offdiag_proxy()}[kind]
            expected += w * w * n * per_report
        assert policy.noise_proxy(policy.reports, kind) == pytest.approx(expected, rel=1e-12)
    # Down-weighting removes noise: strictly less than the equal-weight proxy.
    equal = _policy(0.0)
    _feed(equal, 5, seed=3)
    assert policy.noise_proxy(policy.reports, "matrix") < equal.noise_proxy(equal.reports,
                                                                            "matrix")


def test_power_zero_is_every_batch_alike() -> None:
    policy = _policy(0.0)
    batches = _feed(policy, 4, seed=5)
    np.testing.assert_allclose(policy.G, sum(g for _, g, _ in batches), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(policy.u, sum(v for _, _, v in batches), rtol=1e-12, atol=1e-12)


def test_weighted_state_round_trip_continues_alike() -> None:
    a = _policy(0.5)
    _feed(a, 3, seed=9)
    b = _policy(0.5)
    b.set_state(json.loads(json.dumps(a.get_state())))
    assert b.weight_reference == a.weight_reference == 16
    for p in (a, b):
        _feed(p, 2, seed=10)  # the same next batches
    np.testing.assert_allclose(b.G, a.G, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(b.u, a.u, rtol=1e-12, atol=1e-12)
    assert b.noise_proxy(b.reports, "vector") == a.noise_proxy(a.reports, "vector")
    assert b.model.version == a.model.version


def test_a_refused_batch_changes_nothing() -> None:
    policy = _policy(1.0)
    _feed(policy, 1, seed=2)
    G, u, ref = policy.G.copy(), policy.u.copy(), policy.weight_reference
    bad = np.full(policy.randomizer.n, np.nan)  # a non-finite statistic is skipped
    policy.ingest_statistic(bad, policy.batch_size)
    np.testing.assert_array_equal(policy.G, G)
    np.testing.assert_array_equal(policy.u, u)
    assert policy.weight_reference == ref and policy.skipped == 1


def test_weights_learn_on_linear() -> None:
    """With weights the policy still learns (fixed seed; far below the random policy)."""
    from privbandit.shared.core.simulator import simulate, summarize

    config = make_config("ddp-linucb", d=5, epsilon=1.0, delta=1e-6,
                         **{**entry("ddp-linucb").practical, "batch_weight_power": 0.5})
    results, _ = simulate(config, "linear", 20, 40_000, 2, 11)
    s = summarize(results)
    assert s["final_regret_mean"] < 0.1 * s["random_regret_mean"]
