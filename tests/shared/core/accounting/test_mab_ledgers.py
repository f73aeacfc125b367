"""Ledgers of the multi-armed policies (shared/core/accounting/mab_ledgers.py)."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant

from privbandit.shared.core.accounting.gaussian import gaussian_delta
from privbandit.shared.core.accounting.rdp import rdp_to_dp
from privbandit.shared.core.policies import build_policy, make_config

FIELDS = {"threat_model", "ldp_epsilon", "ldp_delta", "central_epsilon", "central_delta",
          "rdp_alpha", "rdp_epsilon", "accounting", "per_user_epsilon"}
PER_USER = {"distribution", "mean", "fraction_used", "fraction_declined"}


def _ledger(algo: str, **params) -> dict:
    return build_policy(make_config(algo, K=4, **params)).ledger(T=10_000).model_dump()


def test_every_field_is_present_and_null_where_it_does_not_apply() -> None:
    cases = {
        "ucb": ({}, {"ldp_epsilon", "ldp_delta", "central_epsilon", "central_delta", "rdp_alpha",
                     "rdp_epsilon", "per_user_epsilon"}),
        "heldp-ucb-l": ({"epsilon": 1.0}, {"rdp_alpha", "rdp_epsilon"}),
        "heldp-ucb-b": ({"epsilon": 1.0}, {"rdp_alpha", "rdp_epsilon"}),
        "ldp-mab": ({"epsilon": 1.0}, {"rdp_alpha", "rdp_epsilon"}),
        "adar-ucb": ({"epsilon": 1.0}, {"ldp_epsilon", "ldp_delta", "per_user_epsilon"}),
    }
    for algo, (params, nulls) in cases.items():
        led = _ledger(algo, **params)
        assert FIELDS <= led.keys(), algo
        for key in FIELDS - {"threat_model", "accounting"}:
            assert (led[key] is None) == (key in nulls), (algo, key)
        if led["per_user_epsilon"] is not None:
            assert PER_USER == led["per_user_epsilon"].keys()


@pytest.mark.parametrize("algo", ["heldp-ucb-l", "heldp-ucb-b"])
def test_heldp_is_pure_ldp_at_each_users_level(algo: str) -> None:
    homo = _ledger(algo, epsilon=2.0)
    assert homo["threat_model"] == "ldp"
    assert homo["ldp_epsilon"] == 2.0 and homo["ldp_delta"] == 0.0
    assert homo["central_epsilon"] == 2.0 and homo["central_delta"] == 0.0
    assert homo["per_user_epsilon"] == {"distribution": "fixed:2", "mean": 2.0,
                                        "fraction_used": 1.0, "fraction_declined": 0.0}
    het = _ledger(algo, epsilon_dist="choice:0,0.2,1,2,100", eps_min=1.0)
    assert het["ldp_epsilon"] is None and het["central_epsilon"] is None
    assert het["ldp_delta"] == 0.0
    pu = het["per_user_epsilon"]
    assert pu["distribution"] == "choice:0,0.2,1,2,100"
    assert pu["mean"] == pytest.approx(20.64)
    assert pu["fraction_used"] == pytest.approx(0.6) and pu["fraction_declined"] == 0.2
    assert "sigmoid" in _ledger(algo, epsilon=1.0, sigmoid=True)["accounting"]


def test_measured_fractions_follow_the_reports() -> None:
    policy = build_policy(make_config("heldp-ucb-l", K=3, epsilon_dist="normal:1,1", eps_min=1.0))
    rng = np.random.default_rng(3)
    n = 20_000
    eps = policy.config.levels.sample(n, rng)
    values = policy.randomizer.values(rng.random((n, 3)), eps, rng)
    policy.play(values, eps, rng.random(n))
    pu = policy.ledger().model_dump()["per_user_epsilon"]
    assert pu["fraction_used"] == pytest.approx(np.mean(eps >= 1.0))
    assert abs(pu["fraction_used"] - policy.config.levels.prob_at_least(1.0)) < 0.02


def test_zheng_reduction_is_eps_delta_ldp() -> None:
    led = _ledger("ldp-mab", epsilon=1.0, delta=1e-6)
    assert (led["ldp_epsilon"], led["ldp_delta"]) == (1.0, 1e-6)
    sigma = build_policy(make_config("ldp-mab", K=4, epsilon=1.0, delta=1e-6)).randomizer.sigma
    assert gaussian_delta(1.0, sigma, 1.0) <= 1e-6  # the noise on the report really is enough
    assert led["per_user_epsilon"]["distribution"] == "fixed:1"


@pytest.mark.parametrize(("alpha", "eps"), [(2.0, 1.0), (8.0, 0.5), (1.5, 4.0)])
def test_adar_ucb_rdp_and_its_conversion(alpha: float, eps: float) -> None:
    """The episode mean has sensitivity 1/n and noise σ = √(α/(2ε))/n: σ/Δ = √(α/(2ε)).
    Cross-checks: dp-accounting's RDP at order α is ε; the (ε, δ) figure is dp-accounting's
    whole-curve conversion, at most the closed-form single-order bound, and a true (ε, δ)
    guarantee of that Gaussian (Balle–Wang's exact δ)."""
    led = _ledger("adar-ucb", alpha=alpha, epsilon=eps, delta=1e-6)
    assert (led["rdp_alpha"], led["rdp_epsilon"], led["central_delta"]) == (alpha, eps, 1e-6)
    policy = build_policy(make_config("adar-ucb", K=4, alpha=alpha, epsilon=eps))
    n = 7
    ratio = policy.noise_sd(n) / (1.0 / n)
    assert ratio == pytest.approx(math.sqrt(alpha / (2 * eps)))
    acc = RdpAccountant(orders=[alpha])
    acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier=ratio))
    assert acc.rdp[0] == pytest.approx(eps, rel=1e-9)
    full = RdpAccountant()
    full.compose(dp_accounting.GaussianDpEvent(noise_multiplier=ratio))
    assert led["central_epsilon"] == pytest.approx(min(full.get_epsilon(1e-6),
                                                       rdp_to_dp(alpha, eps, 1e-6)))
    assert led["central_epsilon"] <= rdp_to_dp(alpha, eps, 1e-6) + 1e-12
    assert gaussian_delta(led["central_epsilon"], ratio, 1.0) <= 1e-6
