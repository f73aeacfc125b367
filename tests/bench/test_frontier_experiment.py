"""bench/experiments/frontier.py (issue 22): rows for every policy and ε, the table's ratios to
linucb at its defaults, the plot, and a rerun that skips finished rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.experiments import frontier


def test_small_grid(tmp_path: Path) -> None:
    argv = ["--T", "300", "--runs", "2", "--epsilons", "1", "--out", str(tmp_path)]
    assert frontier.main(argv) == 0
    rows = json.loads((tmp_path / "frontier.json").read_text())["rows"]
    assert {(r["policy"], r["epsilon"]) for r in rows} == {
        ("linucb (defaults)", None), ("linucb (width 0.1)", None),
        ("ddp-linucb fixed l=1000", 1.0), ("ddp-linucb defaults", 1.0),
    }
    for r in rows:
        assert len(r["finals"]) == 2 and r["seed"] == 1
        if r["epsilon"] is not None:
            assert r["central_epsilon"] <= r["epsilon"]
    ref = next(r for r in rows if r["policy"] == "linucb (defaults)")
    geo = next(r for r in rows if r["policy"] == "ddp-linucb defaults" and r["epsilon"] == 1.0)
    md = (tmp_path / "frontier.md").read_text()
    assert f"{geo['mean'] / ref['mean']:.1f} ±" in md
    assert (tmp_path / "frontier.png").stat().st_size > 0
    before = (tmp_path / "frontier.json").read_text()
    assert frontier.main(argv) == 0  # every row is there: nothing reruns
    assert (tmp_path / "frontier.json").read_text() == before


def test_same_users_for_every_policy() -> None:
    """Every policy runs on the same seed, hence the same θ* and contexts per run."""
    assert {c.d for c in frontier.configs(5, 1.0).values()} == {5}
    with pytest.raises(StopIteration):
        frontier.table([])
