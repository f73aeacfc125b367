"""The baselines' privacy-parameter search of ``bench.experiments.ddp``: the ledger's central ε
of the parameter found lies within 10⁻³ below the target, and the parameter grows with it."""

from __future__ import annotations

import pytest

from bench.experiments.ddp import match_central_epsilon
from privbandit.shared.core.policies import PolicyConfig, build_policy, make_config

T = 1_000_000


def sblb(p: float) -> PolicyConfig:
    return make_config("sblb", d=5, eps0=p, batch_size=100, delta=1e-6)


def adar(p: float) -> PolicyConfig:
    return make_config("adar-oful", d=5, alpha=2.0, epsilon=p, delta=1e-6)


@pytest.mark.parametrize(("config_for", "aggregation", "starts"),
                         [(sblb, "secure-sum", (0.5, 200.0)), (adar, "reports", (1e-3, 1e3))])
def test_hits_target_from_below_and_is_monotone(config_for, aggregation, starts) -> None:
    found = []
    for target in (0.5, 1.0, 4.0):
        # Start far from the answer on both sides: the bracket must expand either way.
        for start in starts:
            p, central = match_central_epsilon(config_for, target, T, aggregation, start=start)
            # The returned ε is the ledger's own figure for p, not a value of the search.
            again = build_policy(config_for(p)).ledger(T, aggregation=aggregation).central_epsilon
            assert again == pytest.approx(central, abs=1e-12)
            assert target - 1e-3 <= central <= target
        found.append(p)
    assert found[0] < found[1] < found[2]


def test_unreachable_target_is_refused() -> None:
    # linucb's ledger states no central ε: refused, not treated as a number.
    with pytest.raises(ValueError, match="no central"):
        match_central_epsilon(lambda p: make_config("linucb", d=5), 1.0, T)
