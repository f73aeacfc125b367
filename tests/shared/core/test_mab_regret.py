"""Learning behaviour of the multi-armed policies, over seeded repetitions, at generous margins:
UCB < HeLDP-UCB-B < HeLDP-UCB-L at ε = 1 (Corollaries 8 and 11: factors 1, ((e+1)/(e−1))² ≈ 4.7
and (1 + 4)² = 25 on the same log T / Δ term), and regret falling as ε grows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.shared.core.environments.mab import MABEnvironment, default_means
from privbandit.shared.core.mab_simulator import simulate_mab
from privbandit.shared.core.policies import make_config

K, T, RUNS = 5, 20_000, 6
ENV = MABEnvironment(default_means(K))


def _finals(algo: str, seed: int = 3, **params) -> np.ndarray:
    results = simulate_mab(make_config(algo, K=K, **params), ENV, T, RUNS, seed, points=4)
    return np.array([r.regret[-1] for r in results])


def _clearly_below(lo: np.ndarray, hi: np.ndarray, factor: float) -> None:
    """mean(lo) · factor < mean(hi), and the mean paired difference exceeds 3 standard errors
    (run i of both uses the same seed, hence the same users: the runs are paired)."""
    diff = hi - lo
    se = diff.std(ddof=1) / math.sqrt(diff.size)
    assert lo.mean() * factor < hi.mean() and diff.mean() > 3 * se, (lo, hi)


@pytest.mark.slow
def test_ucb_below_heldp_b_below_heldp_l_at_eps_1() -> None:
    ucb = _finals("ucb")
    b = _finals("heldp-ucb-b", epsilon=1.0)
    lap = _finals("heldp-ucb-l", epsilon=1.0)
    _clearly_below(ucb, b, 1.5)
    _clearly_below(b, lap, 1.5)
    assert lap.mean() < 0.5 * T * ENV.gaps.mean()  # and all of them learn


@pytest.mark.slow
@pytest.mark.parametrize("algo,extra", [("heldp-ucb-l", {}), ("heldp-ucb-b", {}),
                                        ("ldp-mab", {"black_box": "ucb"}),
                                        ("ldp-mab", {"horizon": T})],
                         ids=["heldp-ucb-l", "heldp-ucb-b", "ldp-mab-ucb", "ldp-mab-tsallis"])
def test_regret_falls_as_epsilon_grows(algo: str, extra: dict) -> None:
    finals = [_finals(algo, epsilon=eps, **extra) for eps in (0.5, 2.0, 8.0)]
    for lo, hi in zip(finals[1:], finals[:-1], strict=True):
        _clearly_below(lo, hi, 1.2)


def test_adar_ucb_is_close_to_ucb_at_a_moderate_budget() -> None:
    """Azize–Basu Thm 5: the RDP cost is additive, O(√(α/ε) log T) per arm — at (2, 1) the
    regret stays within a small factor of UCB's (same t⁻⁴ level, β = 4)."""
    ucb = _finals("ucb", seed=4)
    adar = _finals("adar-ucb", seed=4, alpha=2.0, epsilon=1.0)
    assert adar.mean() < 10 * ucb.mean()
