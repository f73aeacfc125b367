"""Our estimators against Open Bandit Pipeline's on the same data, where ``obp`` is importable.

obp 0.5.7 (its latest release) declares Python < 3.11 and needs torch, so it does not install
beside this project (Python ≥ 3.11); in a scratch venv forced with
``pip install --no-deps --ignore-requires-python obp==0.5.7`` plus its dependencies it imports
and these tests run (docs/api.md, "Off-policy evaluation"). Elsewhere they are skipped."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.shared.core.ope import dr, ips, snips

obp_ope = pytest.importorskip("obp.ope")

N, K = 5000, 6


def shared_data(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    pi0 = rng.dirichlet(np.ones(K), size=N) * 0.7 + 0.3 / K
    action = (rng.random(N)[:, None] > np.cumsum(pi0, axis=1)).sum(axis=1)
    mu = rng.uniform(size=(N, K))
    reward = (rng.random(N) < mu[np.arange(N), action]).astype(float)
    pi_e = rng.dirichlet(np.full(K, 0.5), size=N)  # a randomised evaluated policy
    q = np.clip(mu + rng.normal(0, 0.1, size=(N, K)), 0, 1)
    return {"reward": reward, "action": action, "pscore": pi0[np.arange(N), action],
            "action_dist": pi_e[:, :, None], "q": q[:, :, None]}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_our_estimates_are_obps(seed: int) -> None:
    s = shared_data(seed)
    common = {"reward": s["reward"], "action": s["action"], "pscore": s["pscore"],
              "action_dist": s["action_dist"]}
    theirs = {
        "ips": obp_ope.InverseProbabilityWeighting().estimate_policy_value(**common),
        "snips": obp_ope.SelfNormalizedInverseProbabilityWeighting()
        .estimate_policy_value(**common),
        "dr": obp_ope.DoublyRobust().estimate_policy_value(
            **common, estimated_rewards_by_reg_model=s["q"]),
    }
    ours = {"ips": ips(**common), "snips": snips(**common),
            "dr": dr(**common, estimated_rewards=s["q"])}
    for name, value in theirs.items():
        assert ours[name].value == pytest.approx(float(value), rel=1e-10, abs=1e-12), name
    # obp's bootstrap interval (2000 resamples) and our normal one agree to a few percent of
    # their width: both estimate the spread of the same mean.
    boot = obp_ope.InverseProbabilityWeighting().estimate_interval(
        **common, n_bootstrap_samples=2000, random_state=seed)
    lo, hi = (v for k, v in boot.items() if "CI" in k)
    width = ours["ips"].high - ours["ips"].low
    assert abs(lo - ours["ips"].low) <= 0.1 * width and abs(hi - ours["ips"].high) <= 0.1 * width
