"""``bench.experiments.adar_sweep``: paired variants on the same users, one line each."""

from __future__ import annotations

import pytest

from bench.experiments.adar_sweep import RDP_EPSILON, main
from privbandit.shared.core.policies import build_policy, make_config


def test_rdp_epsilons_are_the_stated_central_budgets() -> None:
    """Each RDP ε (α = 2) converts to its central ε at δ = 10⁻⁶, just below it (as found by
    ``bench.experiments.ddp.match_central_epsilon``, within 10⁻³)."""
    for central, rdp in RDP_EPSILON.items():
        ledger = build_policy(make_config("adar-oful", alpha=2.0, epsilon=rdp, delta=1e-6)).ledger()
        assert central - 1e-3 <= ledger.central_epsilon <= central


def test_a_variant_against_itself_differs_by_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--T", "300", "--runs", "2", "--seed", "3", '{"first_episode": 50}',
          '{"first_episode": 50}', '{"first_episode": 50, "switching": 8}'])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3
    assert "Δ     +0.0 ±    0.0" in lines[1]  # same users, same seeds: the same runs
    assert "(ledger 1.0000)" in lines[0]
