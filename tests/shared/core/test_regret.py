"""Learning behaviour: sublinear regret for OFUL; regret falls as the privacy budget grows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.shared.core.policies import build_policy, make_config
from privbandit.shared.core.simulator import simulate, summarize


def _finals(algo: str, T: int, runs: int, seed: int, **params) -> np.ndarray:
    results, _ = simulate(make_config(algo, d=4, **params), "linear", 10, T, runs, seed)
    return np.array([r.regret[-1] for r in results])


@pytest.mark.slow
def test_linucb_regret_is_sublinear() -> None:
    results, _ = simulate(make_config("linucb", d=5), "linear", 20, 40_000, 3, seed=2, points=40)
    s = summarize(results)
    curve = np.array(s["regret_curve"])
    t, reg = curve[:, 0], curve[:, 1]
    first = np.interp(10_000, t, reg) / 10_000  # per-round regret over the first quarter
    last = (reg[-1] - np.interp(30_000, t, reg)) / 10_000  # ... over the last quarter
    assert last < 0.2 * first
    assert s["final_regret_mean"] < 0.02 * s["random_regret_mean"]


# (policy, small budget, large budget): practical widths so that learning shows within T.
BUDGETS = [
    ("sblb", dict(eps0=2.0), dict(eps0=32.0), dict(batch_size=200, confidence_scale=0.3)),
    ("sblb-fixed", dict(eps0=2.0), dict(eps0=32.0), dict(batch_size=200, confidence_scale=0.3)),
    ("ldp-linucb", dict(epsilon=0.2), dict(epsilon=8.0), dict(update_every=200)),
    ("adar-oful", dict(epsilon=0.001), dict(epsilon=10.0), dict()),
    ("ddp-linucb", dict(epsilon=0.05), dict(epsilon=4.0), dict(batch_size=200)),
]


@pytest.mark.slow
@pytest.mark.parametrize("algo,small,large,common", BUDGETS, ids=[b[0] for b in BUDGETS])
def test_regret_decreases_with_privacy_budget(algo, small, large, common) -> None:
    """Mean final regret at the larger budget is lower by more than 3 standard errors."""
    practical = {"confidence_scale": 0.1, **common}
    if algo != "adar-oful":
        practical["regularizer"] = "clip"
    runs, T = 6, 20_000
    lo = _finals(algo, T, runs, 9, **small, **practical)
    hi = _finals(algo, T, runs, 9, **large, **practical)
    se = math.sqrt(lo.var(ddof=1) / runs + hi.var(ddof=1) / runs)
    assert lo.mean() - hi.mean() > 3 * se, (lo, hi)


@pytest.mark.parametrize(
    "algo,params",
    [("sblb", dict(eps0=3.0, batch_size=50)), ("ldp-linucb", dict(epsilon=1.0)),
     ("adar-oful", dict(epsilon=1.0)), ("ddp-linucb", dict(epsilon=1.0, batch_size=50))],
)
def test_privacy_does_not_depend_on_post_processing(algo: str, params: dict) -> None:
    """confidence_scale and the regularizer change neither the reports nor the ledger."""
    variants = [dict(), dict(confidence_scale=0.05)]
    if algo != "adar-oful":
        variants.append(dict(regularizer="clip"))
    x = np.full((20, 4), 0.3)
    r = np.linspace(0, 1, 20)
    outs, ledgers = [], []
    for v in variants:
        policy = build_policy(make_config(algo, d=4, **params, **v))
        outs.append(policy.randomizer.randomize(x, r, np.random.default_rng(5)))
        ledgers.append(policy.ledger(T=10_000).model_dump())
    for o, lg in zip(outs[1:], ledgers[1:], strict=True):
        assert np.array_equal(o, outs[0])
        assert lg == ledgers[0]
    # AdaR-OFUL's noise is on the analyzer: its law must not depend on the width either.
    if algo == "adar-oful":
        sig = {build_policy(make_config(algo, d=4, **params, **v)).noise_sigma for v in variants}
        assert len(sig) == 1


def test_simulation_is_reproducible() -> None:
    cfg = make_config("sblb", d=3, eps0=5.0, batch_size=100)
    a = summarize(simulate(cfg, "linear", 5, 3000, 2, seed=4)[0])
    b = summarize(simulate(cfg, "linear", 5, 3000, 2, seed=4)[0])
    c = summarize(simulate(cfg, "linear", 5, 3000, 2, seed=5)[0])
    assert a["regret_curve"] == b["regret_curve"]
    assert a["regret_curve"] != c["regret_curve"]


def test_same_users_replay_varies_only_private_randomness() -> None:
    """The demo's reference replays fixed users: a non-private policy is then deterministic,
    while a private one varies with the device randomness."""
    from privbandit.shared.core.simulator import same_users_regret

    exact = same_users_regret(make_config("linucb", d=3), "linear", 5, 2000, seed=3, reps=3)
    assert np.ptp(exact) == 0
    noisy = same_users_regret(make_config("sblb", d=3, eps0=4.0, batch_size=100), "linear", 5,
                              2000, seed=3, reps=3)
    assert np.ptp(noisy) > 0
    # The demo plot's band: the same runs, recorded at more checkpoints.
    from privbandit.shared.core.simulator import same_users_curves

    t, curves = same_users_curves(make_config("sblb", d=3, eps0=4.0, batch_size=100), "linear",
                                  5, 2000, seed=3, reps=3, points=20)
    assert t[-1] == 2000 and curves.shape == (3, 20)
    np.testing.assert_array_equal(curves[:, -1], noisy)
    assert (np.diff(curves, axis=1) >= 0).all()


def test_extra_checkpoints_only_record() -> None:
    """Times added with ``extra_checkpoints`` appear in the curve, and the runs are the same
    runs: the other checkpoints and the final regret are unchanged."""
    cfg = make_config("ddp-linucb", d=3, epsilon=1.0, batch_size=50, confidence_scale=0.1)
    plain, _ = simulate(cfg, "linear", 5, 2000, 2, seed=4, points=10)
    more, _ = simulate(cfg, "linear", 5, 2000, 2, seed=4, points=10,
                       extra_checkpoints=(50, 333, 10**6))
    for a, b in zip(plain, more, strict=True):
        assert {50, 333} <= set(b.checkpoints.tolist()) and 10**6 not in b.checkpoints
        keep = np.isin(b.checkpoints, a.checkpoints)
        np.testing.assert_array_equal(b.regret[keep], a.regret)
