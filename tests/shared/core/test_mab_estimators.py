"""Estimators and confidence widths of the multi-armed policies.

Unbiasedness: every estimator's mean is the arm's mean (or E[s(R)] under the sigmoid), within
5 standard errors on fixed seeds. Coverage: at the paper's width (confidence_scale = 1) the true
mean lies in [m_a − w_a, m_a + w_a] for every arm at every checkpoint of every seeded run — the
failure probability of each check is at most 2t⁻⁴ (2t^{−β} for AdaR-UCB), so across the runs at
least 1 − δ of them must cover completely; the largest |m_a − μ_a| / w_a is reported. A control
with the width shrunk 100× must fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.shared.core.environments.mab import MABEnvironment, default_means
from privbandit.shared.core.policies import build_policy, make_config
from privbandit.shared.core.privacy_levels import parse_levels
from privbandit.shared.core.randomizers.arms import GaussianArmRandomizer
from privbandit.shared.core.randomizers.heldp import (
    CTBRandomizer,
    CTLRandomizer,
    debias_bernoulli,
    sigmoid,
)

N = 300_000
K_SE = 5
DELTA = 0.1


def _close(x: np.ndarray, target: float) -> None:
    se = x.std() / math.sqrt(x.size)
    assert abs(x.mean() - target) < K_SE * se, (x.mean(), target, se)


def _rewards(dist: str, mu: float, rng: np.random.Generator) -> np.ndarray:
    env = MABEnvironment([mu, mu, mu], dist)  # arm 0: Beta (mixed), Bernoulli or Gaussian
    return env.reward_grid(N, rng)[:, 0]


def smoothed_mean(mu: float) -> float:
    """E[s(μ + Z)], Z ~ N(0, 1), by Gauss–Hermite quadrature (what -LS/-BS estimate)."""
    z, w = np.polynomial.hermite_e.hermegauss(80)
    return float(np.sum(w * sigmoid(mu + z)) / math.sqrt(2 * math.pi))


@pytest.mark.parametrize("dist", ["bernoulli", "mixed"])
def test_ctl_and_ctb_estimators_are_unbiased_under_heterogeneous_levels(dist: str) -> None:
    rng = np.random.default_rng(12)
    r = _rewards(dist, 0.8, rng)
    eps = parse_levels("choice:0.2,1,2,100").sample(N, rng)
    x = CTLRandomizer(3).values(r, eps, rng)
    _close(x, 0.8)
    bits = CTBRandomizer(3).values(r, eps, rng)
    _close(debias_bernoulli(bits, eps), 0.8)


def test_sigmoid_estimators_target_the_smoothed_mean() -> None:
    rng = np.random.default_rng(13)
    r = _rewards("gaussian", 0.3, rng)
    eps = np.full(N, 2.0)
    target = smoothed_mean(0.3)
    _close(CTLRandomizer(3, sigmoid=True).values(r, eps, rng), target)
    _close(debias_bernoulli(CTBRandomizer(3, sigmoid=True).values(r, eps, rng), eps), target)
    # Lemma 12: the smoothed gap is a positive multiple of the gap (here c_s ≈ 0.2).
    assert 0.15 < (smoothed_mean(0.9) - smoothed_mean(0.3)) / 0.6 < 0.25


def test_zheng_feedback_is_unbiased() -> None:
    rng = np.random.default_rng(14)
    rz = GaussianArmRandomizer(3, 1.0, 1e-6)
    _close(rz.values(_rewards("mixed", 0.8, rng), None, rng) + 0.5, 0.8)


def test_adar_ucb_released_means_are_unbiased() -> None:
    """Both arms at μ = 0.4: every released episode mean (plus its noise) estimates 0.4."""
    released, sds = [], []
    for seed in range(30):
        policy = build_policy(make_config("adar-ucb", K=2, epsilon=1.0),
                              np.random.default_rng(seed))
        R = MABEnvironment([0.4, 0.4]).reward_grid(2000, np.random.default_rng(100 + seed))
        for i in range(2000):
            arm, before = policy.arm, policy.episodes
            policy.play(R[i:i + 1], None, np.zeros(1))
            if policy.episodes > before:
                n = policy.last_n[arm]
                released.append(policy.released[arm])
                sds.append(math.sqrt(0.24 / n + policy.noise_sd(n) ** 2))
    z = (np.array(released) - 0.4) / np.array(sds)  # standardised: mean 0, variance 1
    assert abs(z.mean()) < K_SE / math.sqrt(z.size) and 0.7 < z.var() < 1.3


# -- coverage -----------------------------------------------------------------------------------
CASES = {
    "ucb": dict(),
    "heldp-ucb-l": dict(epsilon_dist="choice:0,0.2,1,2,100", eps_min=1.0),
    "heldp-ucb-b": dict(epsilon_dist="normal:1,1"),
    "heldp-ucb-b-sigmoid": dict(epsilon=2.0, sigmoid=True),
    "ldp-mab-ucb": dict(epsilon=1.0, black_box="ucb"),
    "adar-ucb": dict(epsilon=1.0),
}


def coverage(case: str, runs: int, T: int, scale: float = 1.0, K: int = 5):
    algo = case.replace("-sigmoid", "").replace("ldp-mab-ucb", "ldp-mab")
    dist = "gaussian" if case.endswith("sigmoid") else "mixed"
    env = MABEnvironment(default_means(K), dist)
    target = np.array([smoothed_mean(m) for m in env.means]) if dist == "gaussian" else env.means
    covered, worst, checks = 0, 0.0, 0
    for seed in range(runs):
        streams = [np.random.default_rng(s) for s in np.random.SeedSequence([23, seed]).spawn(4)]
        policy = build_policy(make_config(algo, K=K, confidence_scale=scale, **CASES[case]),
                              streams[0])
        levels = policy.config.levels if policy.randomizer.per_user_epsilon else None
        ok = True
        for _ in range(0, T, 250):
            R = env.reward_grid(250, streams[1])
            eps = None if levels is None else levels.sample(250, streams[2])
            policy.play(policy.randomizer.values(R, eps, streams[3]), eps, streams[3].random(250))
            est, width = _interval(policy, algo)
            live = np.isfinite(width) & (width > 0)
            ratio = np.abs(est - target)[live] / width[live]
            checks += int(live.sum())
            if ratio.size:
                worst = max(worst, float(ratio.max()))
                ok &= bool((ratio <= 1).all())
        covered += ok
    return covered / runs, worst, checks


def _interval(policy, algo: str) -> tuple[np.ndarray, np.ndarray]:
    """(estimate, half-width) per arm at the current state; +∞ width where none applies."""
    if algo == "adar-ucb":
        t = policy.t + 1
        width = np.array([policy.bonus(n, t) if n else math.inf for n in policy.last_n])
        return np.array(policy.released), width
    idx = policy.index
    s = 2 * math.sqrt(math.log(max(idx.t, 2)))
    width = np.array([s * g if n else math.inf for g, n in zip(idx.g, idx.N, strict=True)])
    if idx.forced:  # Lemma 6 needs A_a > ε_min⁻² ln t⁴ (the warm-up condition)
        width[np.array(idx.W) <= idx.forced * 4 * math.log(max(idx.t, 2))] = math.inf
    return np.array([m if n else 0.0 for m, n in zip(idx.m, idx.N, strict=True)]), width


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_paper_width_covers_the_arm_means(case: str) -> None:
    rate, worst, checks = coverage(case, runs=20, T=10_000)
    assert checks > 1000
    assert rate >= 1 - DELTA, f"{case}: coverage {rate:.2f}, max ratio {worst:.3f}"


def test_coverage_check_has_teeth() -> None:
    rate, worst, _ = coverage("heldp-ucb-b", runs=4, T=2000, scale=0.01)
    assert rate < 1 - DELTA and worst > 1
