"""Confidence-set coverage: θ* lies in {θ : ‖θ − θ̃‖_V ≤ β} at every published model.

For each policy at the paper's width (confidence_scale = 1, the paper's regularizer) we run R
seeded repetitions and require that the fraction of runs in which *every* published model covers
θ* is at least 1 − δ (δ = failure_prob). We also record how tight the widths are: the largest
observed ‖θ̃ − θ*‖_V / β, reported in the assertion message.
"""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.shared.core.environments.linear import LinearEnvironment
from privbandit.shared.core.policies import build_policy, make_config
from privbandit.shared.core.simulator import checkpoints_for, run_once

DELTA = 0.1

CASES = {
    "linucb": dict(),
    "adar-oful": dict(epsilon=1.0, alpha=2.0),
    "sblb": dict(eps0=20.0, batch_size=100),
    "sblb-fixed": dict(eps0=20.0, batch_size=100),
    "ldp-linucb": dict(epsilon=4.0, delta=1e-5, update_every=50, horizon=20_000),
    "ddp-linucb": dict(epsilon=1.0, batch_size=100),
}


def coverage(algo: str, params: dict, runs: int, T: int, d: int = 3, K: int = 5):
    covered = 0
    worst = 0.0
    models = 0
    for seed in range(runs):
        env_rng, reward_rng, device_rng, policy_rng = (
            np.random.default_rng(s) for s in np.random.SeedSequence([17, seed]).spawn(4)
        )
        env = LinearEnvironment(d, K, env_rng)
        config = make_config(algo, d=d, failure_prob=DELTA, **params)
        policy = build_policy(config, policy_rng)
        ratios: list[float] = []
        seen = [0]

        def check(_: int, policy=policy, env=env, ratios=ratios, seen=seen) -> None:
            m = policy.model
            if m.version != seen[0]:
                seen[0] = m.version
                err = m.theta - env.theta
                ratios.append(float(np.sqrt(err @ m.V @ err)) / m.beta)

        run_once(policy, env, T, reward_rng, device_rng, checkpoints_for(T, 4), check)
        models += len(ratios)
        if ratios:
            worst = max(worst, max(ratios))
        covered += all(r <= 1 for r in ratios)
    return covered / runs, worst, models


@pytest.mark.slow
@pytest.mark.parametrize("algo", sorted(CASES))
def test_paper_width_covers_theta_star(algo: str) -> None:
    rate, worst, models = coverage(algo, CASES[algo], runs=40, T=20_000)
    assert models > 40, "too few published models to test coverage"
    assert rate >= 1 - DELTA, f"{algo}: coverage {rate:.2f}, max ratio {worst:.3f}"


def test_coverage_check_has_teeth() -> None:
    """The same check fails when the width is far too small (β scaled by 0.01)."""
    rate, worst, _ = coverage("linucb", {"confidence_scale": 0.01}, runs=10, T=5000)
    assert rate < 1 - DELTA and worst > 1
