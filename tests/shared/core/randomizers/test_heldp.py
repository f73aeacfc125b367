"""The HeLDP curators and the other one-arm randomizers (shared/core/randomizers/{heldp,arms}.py).

Exact privacy: the likelihood ratio of every output between any two rewards is at most e^ε
(and attained), computed from the mechanisms' exact output laws, not sampled. Exact means: the CTB
response mean of Lemma 9. Wire form: round trip and refusal of what no honest device sends.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.shared.core.accounting.gaussian import gaussian_delta
from privbandit.shared.core.randomizers.arms import GaussianArmRandomizer, IdentityArmRandomizer
from privbandit.shared.core.randomizers.heldp import (
    CTBRandomizer,
    CTLRandomizer,
    debias_bernoulli,
    sigmoid,
)

EPS = [0.05, 0.2, 1.0, 2.0, 5.0, 30.0]
REWARDS = np.linspace(0.0, 1.0, 21)


@pytest.mark.parametrize("eps", EPS)
def test_ctl_is_eps_ldp_exactly(eps: float) -> None:
    """sup_x p(x | r) / p(x | r') over a fine grid of outputs and all pairs of rewards."""
    x = np.linspace(-40 / eps, 1 + 40 / eps, 20_001)
    dens = np.stack([CTLRandomizer.density(x, r, eps) for r in REWARDS])
    log_ratio = np.log(dens[:, None, :]) - np.log(dens[None, :, :])
    assert log_ratio.max() <= eps * (1 + 1e-12)
    assert log_ratio.max() == pytest.approx(eps, rel=1e-9)  # attained (r = 1, r' = 0, x ≥ 1)


@pytest.mark.parametrize("eps", EPS)
def test_ctb_is_eps_ldp_exactly(eps: float) -> None:
    p1 = CTBRandomizer.one_probability(REWARDS, eps)
    probs = np.stack([p1, 1 - p1])  # P(x = 1 | r), P(x = 0 | r)
    log_ratio = np.log(probs[:, :, None]) - np.log(probs[:, None, :])
    assert log_ratio.max() <= eps * (1 + 1e-12)
    assert log_ratio.max() == pytest.approx(eps, rel=1e-9)


@pytest.mark.parametrize("eps", [0.2, 1.0, 3.0])
def test_sigmoid_variants_are_eps_ldp_for_any_real_reward(eps: float) -> None:
    r = np.array([-1e6, -30.0, -1.0, 0.0, 0.5, 2.0, 40.0, 1e6])
    s = sigmoid(r)
    assert ((s >= 0) & (s <= 1)).all()
    p1 = CTBRandomizer.one_probability(s, eps)
    for probs in (p1, 1 - p1):
        assert np.log(probs.max() / probs.min()) <= eps * (1 + 1e-12)
    x = np.linspace(-30, 31, 4001)
    dens = np.stack([CTLRandomizer.density(x, v, eps) for v in s])
    assert (np.log(dens.max(axis=0) / dens.min(axis=0)) <= eps * (1 + 1e-12)).all()


def test_ctb_response_mean_is_lemma_9() -> None:
    """E[x] = 1/2 + (2μ − 1)(e^ε − 1)/(2(e^ε + 1)): exactly for a reward μ, and in Monte Carlo
    for mixed rewards (CTB is linear in r, so only the mean of r matters)."""
    for eps in EPS:
        mu = REWARDS
        exact = 0.5 + (2 * mu - 1) * (math.exp(eps) - 1) / (2 * (math.exp(eps) + 1))
        assert np.allclose(CTBRandomizer.one_probability(mu, eps), exact, atol=1e-15)
        assert np.allclose(CTBRandomizer.response_mean(mu, eps), exact, atol=1e-15)
    rng = np.random.default_rng(2)
    n, eps = 400_000, 1.3
    r = rng.beta(4, 1, size=n)  # mean 0.8
    x = CTBRandomizer(3).values(r, np.full(n, eps), rng)
    want = float(CTBRandomizer.response_mean(0.8, eps))
    assert abs(x.mean() - want) < 5 * math.sqrt(want * (1 - want) / n)


def test_debiasing_inverts_the_response_mean() -> None:
    for eps in EPS:
        for mu in (0.0, 0.3, 1.0):
            m = CTBRandomizer.response_mean(mu, eps)
            g = m * debias_bernoulli(1.0, eps) + (1 - m) * debias_bernoulli(0.0, eps)
            assert g == pytest.approx(mu, abs=1e-9 / min(eps, 1))
        assert debias_bernoulli(1.0, eps) - debias_bernoulli(0.0, eps) == pytest.approx(
            (math.exp(eps) + 1) / (math.exp(eps) - 1))


@pytest.mark.parametrize("cls", [CTLRandomizer, CTBRandomizer])
def test_declined_users_send_nothing_informative(cls) -> None:
    rz = cls(4)
    rng = np.random.default_rng(0)
    rows = rz.randomize(np.array([0, 1, 2, 3]), np.array([0.0, 0.3, 0.9, 1.0]), rng,
                        eps=np.zeros(4))
    assert (rows[:, 1] == 0).all() and (rows[:, 2] == 0).all()
    grid = rz.values(np.random.default_rng(1).random((50, 4)), np.zeros(50), rng)
    assert (grid == 0).all()


@pytest.mark.parametrize("cls", [CTLRandomizer, CTBRandomizer])
def test_wire_round_trip_and_refusals(cls) -> None:
    rz = cls(5)
    rng = np.random.default_rng(4)
    rows = rz.randomize(np.arange(5), np.linspace(0, 1, 5), rng, eps=np.array([0, .2, 1, 2, 100]))
    for row in rows:
        data = rz.to_bytes(row)
        assert len(data) == (11 if cls is CTBRandomizer else 18)
        assert np.array_equal(rz.from_bytes(data), row)
    bad = [
        [5, 1.0, 0.0],           # arm out of range
        [-1, 1.0, 0.0],
        [1.5, 1.0, 0.0],         # not an index
        [0, -0.1, 0.0],          # ε below 0
        [0, 100.5, 0.0],         # ε above ε_max
        [0, float("nan"), 1.0],  # not finite
        [0, 0.0, 1.0],           # declined but informative
    ]
    bad.append([0, 1.0, 0.5] if cls is CTBRandomizer else [0, 1.0, 1e300])
    for row in bad:
        with pytest.raises(ValueError):
            rz.check_row(np.array(row))
    with pytest.raises(ValueError):
        rz.from_bytes(b"\x00" * 3)
    with pytest.raises(ValueError):
        rz.randomize(np.array([0]), np.array([1.5]), rng, eps=np.array([1.0]))  # r ∉ [0, 1]
    with pytest.raises(ValueError):
        rz.randomize(np.array([0]), np.array([0.5]), rng, eps=np.array([-1.0]))


def test_gaussian_arm_randomizer_is_calibrated_exactly() -> None:
    for eps, delta in [(0.5, 1e-6), (1.0, 1e-6), (4.0, 1e-8)]:
        rz = GaussianArmRandomizer(4, eps, delta)
        assert gaussian_delta(eps, rz.sigma, 1.0) <= delta
        assert gaussian_delta(eps, rz.sigma * (1 - 1e-6), 1.0) > delta  # and not more noise
        assert rz.sigma < rz.paper_sigma or eps >= 1  # Balle–Wang beats Thm 2's constant
    rz = GaussianArmRandomizer(4, 1.0, 1e-6)
    rng = np.random.default_rng(0)
    y = rz.values(np.full(200_000, 0.3), None, rng)
    assert abs(y.mean() + 0.2) < 5 * rz.sigma / math.sqrt(y.size)
    row = rz.randomize(np.array([2]), np.array([1.0]), rng)[0]
    assert np.array_equal(rz.from_bytes(rz.to_bytes(row)), row)
    with pytest.raises(ValueError):
        rz.check_row(np.array([0, 0.5 + 10 * rz.sigma]))


def test_identity_checks_the_reward_range() -> None:
    bounded, free = IdentityArmRandomizer(3), IdentityArmRandomizer(3, bounded=False)
    with pytest.raises(ValueError):
        bounded.check_row(np.array([0, 1.2]))
    assert free.check_row(np.array([0, -3.5]))[1] == -3.5
    with pytest.raises(ValueError):
        free.check_row(np.array([0, float("inf")]))
