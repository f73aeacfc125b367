"""Every model's propensity is the probability with which its own decision rule takes the arm:
checked against the empirical frequency of that rule over many draws (k = 5 standard errors of
a binomial proportion, fixed seeds), and exactly 1 for the deterministic argmax models."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from privbandit.shared.core.environments.fixed_linear import FixedLinearEnvironment
from privbandit.shared.core.policies import build_policy, make_config
from privbandit.shared.core.policies.adar_gope import AdaRGOPE, PhaseModel
from privbandit.shared.core.policies.arm_model import ArmModel
from privbandit.shared.core.policies.lplr import LPLR
from privbandit.shared.core.policies.model import Model

K_SE = 5.0


def assert_frequencies(chosen: np.ndarray, probs: np.ndarray) -> None:
    """The frequency of each arm among ``chosen`` is within K_SE binomial standard errors of
    ``probs`` (which sum to 1)."""
    n = chosen.shape[0]
    freq = np.bincount(chosen, minlength=probs.shape[0]) / n
    se = np.sqrt(probs * (1 - probs) / n)
    assert np.all(np.abs(freq - probs) <= K_SE * se + 1e-12), (freq, probs)


def test_the_argmax_model_takes_its_arm_with_probability_one_ties_included() -> None:
    model = Model.initial(d=3, lam=1.0, beta=1.0)
    X = np.array([[[0.5, 0, 0], [0, 0.5, 0], [0, 0, 0.1]]] * 4)  # rows 0 and 1 tie
    a = model.decide(X)
    assert a.tolist() == [0, 0, 0, 0]  # the tie goes to the lowest index, every time
    assert model.propensity(X, a).tolist() == [1.0] * 4


def test_a_sampling_arm_model_states_the_probability_it_draws_with() -> None:
    w = np.array([0.5, 0.05, 0.25, 0.2])
    model = ArmModel(version=1, reports=0, probabilities=w)
    u = np.random.default_rng(11).random(200_000)
    chosen = model.decide(u)
    assert_frequencies(chosen, w)
    assert np.allclose(model.propensity(chosen[:50]), w[chosen[:50]])
    assert model.propensity(1)[0] == w[1] / w.sum()
    assert ArmModel(version=0, reports=0, indices=np.ones(4)).propensity([0, 3]).tolist() == \
        [1.0, 1.0]


def test_tsallis_before_its_first_report_is_uniform() -> None:
    policy = build_policy(make_config("ldp-mab", K=5, horizon=1000))
    assert np.allclose(policy.model.propensity(np.arange(5)), 0.2)


def gope_model() -> tuple[PhaseModel, np.ndarray]:
    env = FixedLinearEnvironment(3, 8, np.random.default_rng(5))
    policy = AdaRGOPE(make_config("adar-gope", d=3), np.random.default_rng(6))
    policy.bind_arms(env.fixed_arms)
    assert isinstance(policy.model, PhaseModel) and policy.model.support.size > 1
    return policy.model, env.fixed_arms


def test_the_simulators_phase_order_plays_each_arm_with_its_share_of_the_counts() -> None:
    """Over the analyzer's random start s, position i of the phase plays arm b with probability
    T_ℓ(b)/T_ℓ (``PhaseModel.propensity``), for any i."""
    model, arms = gope_model()
    seeds = np.random.default_rng(7).integers(2**63, size=20_000)
    X = arms[None, :, :]
    for offset in (0, 17):
        chosen = np.array([int(replace(model, order_seed=int(s), offset=offset).decide(X)[0])
                           for s in seeds])
        probs = model.propensity(X, np.arange(arms.shape[0]))
        assert math.isclose(probs.sum(), 1.0)
        assert_frequencies(chosen, probs)
        assert np.allclose(model.propensity(np.repeat(X, 5, axis=0), chosen[:5]),
                           probs[chosen[:5]])


def test_a_device_draw_from_the_design_has_probability_pi() -> None:
    model, arms = gope_model()
    assert model.weights is not None
    u = np.random.default_rng(8).random(100_000)
    chosen = np.array([model.sample(float(v)) for v in u])
    pi = np.array([model.probability(b) for b in range(arms.shape[0])])
    assert math.isclose(pi.sum(), 1.0)
    assert np.allclose(pi[model.support], model.weights / model.weights.sum())
    assert_frequencies(chosen, pi)


def test_lplr_chooses_uniformly_on_the_active_set() -> None:
    rng = np.random.default_rng(9)
    mask = np.array([[True, False, True, True], [False, True, False, False]] * 50_000)
    chosen = LPLR.choose(mask, rng)
    assert_frequencies(chosen[0::2], np.array([1 / 3, 0, 1 / 3, 1 / 3]))
    assert (chosen[1::2] == 1).all()
    policy = LPLR(make_config("lplr", d=2, K=4), rng)  # no finished epoch: every arm active
    X = rng.normal(size=(6, 4, 2)) / 3
    a = policy.decide(X, rng)
    assert np.allclose(policy.propensity(X, a), 0.25)
