"""The demo's comparison with the simulator (issue 26 item 8): a z-score only where the
simulator's runs actually spread."""

from __future__ import annotations

import numpy as np

from privbandit.demo.report import _reference, _reference_line


def test_a_degenerate_spread_gives_no_z_score_and_says_why() -> None:
    # One-batch runs: every run plays before any model, equal up to float rounding.
    finals = np.array([1000.0, 1000.0 + 1e-13, 1000.0 - 1e-13, 1000.0])
    ref = _reference(finals, 1003.5, "runs")
    assert ref["demo_z"] is None
    assert "agree to rounding" in ref["demo_z_note"] and "+3.5" in ref["demo_z_note"]
    line = _reference_line(ref)[0]
    assert "no z-score" in line and " sd)" not in line


def test_a_real_spread_gives_the_z_score() -> None:
    finals = np.array([90.0, 100.0, 110.0])
    ref = _reference(finals, 120.0, "runs")
    assert ref["demo_z"] == 2.0 and "demo_z_note" not in ref
    assert "this run is +2.0 sd" in _reference_line(ref)[0]


def test_identical_runs_give_no_z_score() -> None:
    ref = _reference(np.full(5, 7.0), 7.0, "runs")
    assert ref["demo_z"] is None and ref["sd"] == 0.0
