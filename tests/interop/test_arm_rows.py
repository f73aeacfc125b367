"""Multi-armed rows interop (in process): the independent client's rows (tests/interop/client.py,
from docs/protocol.md §3.3 "Multi-armed tasks" and §4 alone) have the project's wire layout and
the law of the project's randomizers (CTL, CTB: HeLDP Curators 1 and 3; Zheng et al. Alg. 1's
Gaussian), and its arm choice is the project's device's.

Laws: n = 20 000 reports of one (r, ε_t) per case; the sample mean, and for the continuous
mechanisms the sample variance, of the independent client's values and of the project's are each
within 6 standard errors of the closed form (mean: √(Var/n); variance: √((μ₄ − Var²)/n), μ₄ the
fourth central moment: 4!·b⁴ = 24b⁴ for Laplace(b), 3σ⁴ for the Gaussian)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.shared.core.policies.arm_model import ArmModel
from privbandit.shared.core.randomizers.arms import GaussianArmRandomizer, IdentityArmRandomizer
from privbandit.shared.core.randomizers.heldp import CTBRandomizer, CTLRandomizer
from tests.interop import client

K, N, TOL = 10, 20_000, 6.0


def policy(algo: str, **extra: object) -> dict[str, object]:
    return {"algo": algo, "K": K, **extra}


# algo policy, the project's randomizer, a row [arm, middle..., value], bytes per §3.3's table
WIRE = [
    (policy("ucb"), IdentityArmRandomizer(K), [3, 0.25], 10),
    (policy("adar-ucb"), IdentityArmRandomizer(K), [9, 1.0], 10),
    (policy("heldp-ucb-l"), CTLRandomizer(K), [2, 0.7, -1.5], 18),
    (policy("heldp-ucb-l"), CTLRandomizer(K), [2, 0.0, 0.0], 18),  # declined
    (policy("heldp-ucb-b"), CTBRandomizer(K), [7, 100.0, 1], 11),
    (policy("heldp-ucb-b"), CTBRandomizer(K), [0, 0.0, 0], 11),  # declined
    (policy("ldp-mab", epsilon=2.0, delta=1e-6), GaussianArmRandomizer(K, 2.0, 1e-6, True),
     [4, 0.125, 0.3], 18),
    (policy("ldp-mab", epsilon=2.0, delta=1e-6, black_box="ucb"),
     GaussianArmRandomizer(K, 2.0, 1e-6), [4, -0.3], 10),
]


@pytest.mark.parametrize(("pol", "rand", "fields", "size"), WIRE)
def test_rows_have_the_documented_size_and_decode_with_the_projects_code(
    pol: dict, rand, fields: list[float], size: int
) -> None:
    row = client.mab_row(pol, fields)
    assert len(row) == size
    assert rand.from_bytes(row).tolist() == [float(f) for f in fields]
    assert rand.to_bytes(np.array(fields, dtype=float)) == row


@pytest.mark.parametrize(("eps", "delta"), [(2.0, 1e-6), (0.5, 1e-5), (8.0, 1e-9)])
def test_independent_gaussian_calibration_matches_at_sensitivity_one(eps: float, delta: float
                                                                     ) -> None:
    ours = GaussianArmRandomizer(K, eps, delta).sigma
    assert client.analytic_gaussian_sigma(eps, delta, 1.0) == pytest.approx(ours, rel=1e-7)


def within(sample: np.ndarray, mean: float, var: float, fourth: float | None) -> None:
    """Sample mean (and variance, given μ₄) within TOL standard errors of the closed form."""
    n = sample.shape[0]
    assert abs(sample.mean() - mean) < TOL * math.sqrt(var / n), (sample.mean(), mean)
    if fourth is not None:
        se = math.sqrt((fourth - var * var) / n)
        assert abs(sample.var() - var) < TOL * se, (sample.var(), var)


@pytest.mark.parametrize(("r", "eps"), [(0.2, 2.0), (1.0, 0.5)])
def test_laplace_values_have_the_ctl_law(r: float, eps: float) -> None:
    """CTL: x = s + Laplace(b), b = 1/ε_t: mean s, variance 2b², μ₄ = 24b⁴."""
    rng = np.random.default_rng(11)
    theirs = np.array([client.laplace_value(r, eps, rng) for _ in range(N)])
    ours = CTLRandomizer(K).values(np.full(N, r), np.full(N, eps), rng)
    b = 1.0 / eps
    for sample in (theirs, ours):
        within(sample, r, 2 * b * b, 24 * b**4)


@pytest.mark.parametrize(("s", "eps"), [(0.0, 1.0), (1.0, 1.0), (0.3, 0.2), (0.9, 3.0)])
def test_bernoulli_bits_have_the_ctb_law(s: float, eps: float) -> None:
    """CTB: P(x = 1) = 1/(1 + e^ε) + s·tanh(ε/2) (so P(1 | s=1)/P(1 | s=0) = e^ε exactly)."""
    rng = np.random.default_rng(12)
    p1 = 1.0 / (1.0 + math.exp(eps)) + s * math.tanh(eps / 2)
    theirs = np.array([client.bernoulli_bit(s, eps, rng) for _ in range(N)], dtype=float)
    ours = CTBRandomizer(K).values(np.full(N, s), np.full(N, eps), rng)
    assert set(np.unique(theirs)) <= {0.0, 1.0}
    for sample in (theirs, ours):
        within(sample, p1, p1 * (1 - p1), None)


def test_declined_users_send_zero() -> None:
    rng = np.random.default_rng(13)
    assert client.laplace_value(0.4, 0.0, rng) == 0.0
    assert client.bernoulli_bit(1.0, 0.0, rng) == 0


@pytest.mark.parametrize("r", [0.0, 0.8])
def test_gaussian_rewards_have_zhengs_law(r: float) -> None:
    """ldp-mab: y = r − 1/2 + N(0, σ²): mean r − 1/2, variance σ², μ₄ = 3σ⁴."""
    rng = np.random.default_rng(14)
    rand = GaussianArmRandomizer(K, 2.0, 1e-6)
    theirs = np.array([client.gaussian_reward(r, 2.0, 1e-6, rng) for _ in range(N)])
    ours = rand.values(np.full(N, r), None, rng)
    for sample in (theirs, ours):
        within(sample, r - 0.5, rand.sigma**2, 3 * rand.sigma**4)


def test_arm_choice_is_the_project_devices() -> None:
    """§4's rule, on random probability vectors, index vectors with ties and nulls (+∞), and an
    episode arm, against ``ArmModel.decide`` for 200 uniforms each."""
    rng = np.random.default_rng(15)
    models = [{"arm": 6}]
    for _ in range(20):
        p = rng.dirichlet(np.full(K, 0.5))
        models.append({"probabilities": p.tolist()})
        idx = rng.integers(0, 3, K).astype(float)
        models.append({"indices": [None if v == 2 and rng.random() < 0.5 else float(v)
                                   for v in idx]})
    for m in models:
        full = {"version": 1, "reports": 1, "indices": None, "probabilities": None, "arm": None,
                **m}
        project = ArmModel.from_dict(full)
        for u in rng.random(200):
            arm, p = client.choose_arm(full, float(u))
            assert arm == int(project.decide(u)[0]), (m, u)
            if "probabilities" in m:
                assert p == m["probabilities"][arm]
            else:
                assert p is None
