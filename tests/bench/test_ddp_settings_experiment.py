"""bench/experiments/ddp_settings.py: settings parse (schedules keep their commas), every
setting runs on the same users, and the paired line is the per-run differences' mean ± s.e."""

from __future__ import annotations

import numpy as np
import pytest

from bench.experiments import ddp_settings


def test_parse_setting() -> None:
    assert ddp_settings.parse_setting("a=encoding:frobenius,u_weight:1.4") == (
        "a", {"encoding": "frobenius", "u_weight": 1.4})
    assert ddp_settings.parse_setting("b=noise_ridge:0.7,batch_schedule:geometric:350,2,100") == (
        "b", {"noise_ridge": 0.7, "batch_schedule": "geometric:350,2,100"})
    assert ddp_settings.parse_setting("base=") == ("base", {})


def test_paired_line() -> None:
    line = ddp_settings.paired_line("x", 10, np.array([3.0, 5.0]), np.array([1.0, 2.0]), "ref")
    # differences 2 and 3: mean 2.5, s.e. 0.5
    assert "4.0 ±    1.0" in line and "+2.5 ±    0.5" in line


def test_small_run(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--T", "300", "--runs", "2", "same=encoding:upper", "again=encoding:upper",
            "frob=encoding:frobenius"]
    assert ddp_settings.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert "vs same:     +0.0 ±    0.0" in lines[1]  # same setting, same users: identical runs
