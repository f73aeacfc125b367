"""bench/experiments/frontier.py (issue 22): one ``privbandit simulate`` command per row, the
batched policies with fixed batches beside their defaults, the table's ratios to linucb, the plot,
and a rerun that skips finished rows."""

from __future__ import annotations

import json
from pathlib import Path

from bench.experiments import frontier


def test_small_grid(tmp_path: Path) -> None:
    argv = ["--T", "300", "--runs", "2", "--epsilons", "1", "--algos", "ddp-linucb,ldp-linucb",
            "--jobs", "2", "--out", str(tmp_path)]
    assert frontier.main(argv) == 0
    rows = json.loads((tmp_path / "linear.json").read_text())["rows"]
    assert {(r["label"], r["epsilon"]) for r in rows} == {
        ("linucb", None), ("ddp-linucb", 1.0), ("ddp-linucb fixed l=1000", 1.0),
        ("ldp-linucb", 1.0),
    }
    by = {r["label"]: r for r in rows}
    for r in rows:
        assert r["seed"] == 1 and r["runs"] == 2 and r["command"].startswith("privbandit simulate")
    # The ledger states the requested guarantee: central for ddp-linucb, per report for LDP.
    assert by["ddp-linucb"]["central_epsilon"] <= 1.0 + 1e-9
    assert by["ldp-linucb"]["ldp_epsilon"] == 1.0
    # The fixed row is the papers' schedule, the default row a growing one.
    assert by["ddp-linucb fixed l=1000"]["params"]["batch_size"] == 1000
    assert by["ddp-linucb"]["params"]["batch_schedule"].startswith("geometric:")
    md = (tmp_path / "linear.md").read_text()
    ratio = by["ddp-linucb"]["mean"] / by["linucb"]["mean"]
    assert f"{ratio:.1f} ±" in md
    assert (tmp_path / "linear.png").stat().st_size > 0
    before = (tmp_path / "linear.json").read_text()
    assert frontier.main(argv) == 0  # every row is there: nothing reruns
    assert (tmp_path / "linear.json").read_text() == before
