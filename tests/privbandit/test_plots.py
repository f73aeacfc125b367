"""The regret plot (issue 45 item 7): the guarantee (ε, δ) in the title, the simulator's spread
as a band beside a demo's curve, and an inset where the random policy's regret would flatten
the policy's curve against the axis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.collections import PolyCollection

from privbandit.plots import regret_figure, regret_plot

T = np.arange(100, 10_001, 100, dtype=float)
PRIVACY = {"threat_model": "shuffle", "central_epsilon": 1.0, "central_delta": 1e-6,
           "ldp_epsilon": 122.0, "ldp_delta": 0.0}


def result(random: float, reference: bool) -> dict[str, Any]:
    mean = 30 * np.sqrt(T)
    out: dict[str, Any] = {"algo": "sblb", "env": "linear", "privacy": PRIVACY,
                           "regret_curve": np.c_[T, mean].tolist(),
                           "random_regret_mean": random}
    if reference:
        out["reference"] = {"curve": {"t": T.tolist(), "mean": (mean * 1.1).tolist(),
                                      "p10": (mean * 0.9).tolist(), "p90": (mean * 1.3).tolist(),
                                      "sd": (mean * 0.1).tolist()}}
    return out


def test_the_title_states_the_guarantee_and_the_simulator_is_a_band(tmp_path: Path) -> None:
    fig = regret_figure(result(random=4000.0, reference=True), "sblb via the services")
    (ax,) = fig.axes
    assert ax.get_title() == "sblb via the services (shuffle, central ε = 1, δ = 1e-06)"
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert [b.get_label() for b in bands] == ["simulator, same users: 10–90 % of runs"]
    assert ax.child_axes == []  # the random policy's regret is on the policy's scale
    regret_plot(result(random=4000.0, reference=True), tmp_path / "demo.png")
    assert (tmp_path / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_inset_shows_the_policy_when_the_random_policy_dwarfs_it() -> None:
    fig = regret_figure(result(random=100_000.0, reference=False))
    (ax,) = fig.axes
    (inset,) = ax.child_axes
    assert inset.get_title() == "the policy alone"
    # The inset's scale is the policy's: its top is near the policy's final regret (3000),
    # far below the random policy's 100 000.
    assert inset.get_ylim()[1] < 4000 < 90_000 < ax.get_ylim()[1]
    local = regret_figure(result(random=100_000.0, reference=False) | {
        "privacy": {"threat_model": "ldp", "ldp_epsilon": 2.0, "ldp_delta": 0.0}})
    assert local.axes[0].get_title().endswith("(ldp, ldp ε = 2, δ = 0)")
