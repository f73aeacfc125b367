"""bench/experiments/frontier.py (issues 22 and 44): one ``privbandit simulate`` command per row,
the batched policies with fixed batches beside their defaults, the yardstick (linucb over its
search grid, the best of it the divisor), the learning table over horizons, the plot, and a rerun
that skips finished rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.experiments import frontier


def test_small_grid(tmp_path: Path) -> None:
    argv = ["--T", "300", "--runs", "2", "--epsilons", "1", "--algos", "ddp-linucb,ldp-linucb",
            "--grid", "0", "--jobs", "2", "--out", str(tmp_path)]
    assert frontier.main(argv) == 0
    rows = json.loads((tmp_path / "linear.json").read_text())["rows"]
    assert {(r["label"], r["epsilon"]) for r in rows} == {
        ("linucb", None), ("linucb --confidence-scale 0", None), ("ddp-linucb", 1.0),
        ("ddp-linucb fixed l=1000", 1.0), ("ldp-linucb", 1.0),
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
    assert by["linucb --confidence-scale 0"]["params"]["confidence_scale"] == 0.0
    md = (tmp_path / "linear.md").read_text()
    # × linucb divides by the best linucb row (defaults or a grid width) of the run.
    best = min(by["linucb"]["mean"], by["linucb --confidence-scale 0"]["mean"])
    assert f"{by['ddp-linucb']['mean'] / best:.1f} ±" in md
    assert (tmp_path / "linear.png").stat().st_size > 0
    before = (tmp_path / "linear.json").read_text()
    assert frontier.main(argv) == 0  # every row is there: nothing reruns
    assert (tmp_path / "linear.json").read_text() == before


def row(label: str, eps: float | None, T: int, mean: float, random: float = 100.0
        ) -> dict[str, Any]:
    return {"label": label, "epsilon": eps, "T": T, "mean": mean, "stderr": 1.0,
            "random": random, "coverage": None, "central_epsilon": eps, "ldp_epsilon": None,
            "env": "linear", "runs": 3, "seed": 1}


def test_yardstick_and_learning_table() -> None:
    rows = [row("linucb", None, 10, 8.0), row("linucb --confidence-scale 0.1", None, 10, 4.0),
            row("linucb --confidence-scale 1", None, 10, 8.0),
            row("ddp-linucb", 1.0, 10, 60.0), row("ddp-linucb", 1.0, 20, 45.0),
            row("ddp-linucb", 1.0, 30, 30.0), row("ddp-linucb fixed l=1000", 1.0, 20, 10.0),
            row("ldp-linucb", 1.0, 10, 90.0), row("ldp-linucb", 4.0, 10, 70.0),
            row("ldp-linucb", 4.0, 30, 49.0)]
    assert frontier.best_reference([r for r in rows if r["T"] == 10])["mean"] == 4.0
    md = frontier.table([r for r in rows if r["T"] == 10])
    assert "| ddp-linucb | 1 | 1 / — | 60 ± 1 | 15.0 ± " in md  # 60 / 4, not 60 / 8
    lines = frontier.learning_table(rows).splitlines()
    assert lines[0] == ("| policy | ε | T = 10 | T = 20 | T = 30 | smallest T below 50 % of "
                        "random |")
    # The first T at which the growing-batch default ends below half of random; the fixed-batch
    # row is not the policy's default and is not asked.
    assert "| ddp-linucb | 1 | 60.0% | 45.0% | 30.0% | 20 |" in lines
    assert "| ldp-linucb | 1 | 90.0% | — | — | not by the largest T run |" in lines
    assert "| ldp-linucb | 4 | 70.0% | — | 49.0% | 30 |" in lines
    assert not any("fixed" in x for x in lines)
