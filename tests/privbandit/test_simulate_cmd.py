"""`privbandit simulate` honours the JSON contract of spec §6 for every policy and environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from privbandit.cli import main

TOP = {"algo", "env", "T", "runs", "seed", "params", "final_regret_mean", "final_regret_stderr",
       "regret_curve", "model_updates_mean", "wall_seconds", "privacy"}
PRIVACY = {"threat_model", "ldp_epsilon", "ldp_delta", "central_epsilon", "central_delta",
           "rdp_alpha", "rdp_epsilon", "accounting"}
# Which privacy fields must be null for which policy.
NULLS = {
    "linucb": {"ldp_epsilon", "ldp_delta", "central_epsilon", "central_delta", "rdp_alpha",
               "rdp_epsilon"},
    "ldp-linucb": {"rdp_alpha", "rdp_epsilon"},
    "sblb": {"rdp_alpha", "rdp_epsilon"},
    "sblb-fixed": {"rdp_alpha", "rdp_epsilon"},
    "adar-oful": {"ldp_epsilon", "ldp_delta"},
}


@pytest.mark.parametrize("env", ["linear", "digits"])
@pytest.mark.parametrize("algo", sorted(NULLS))
def test_json_contract(tmp_path: Path, algo: str, env: str, capsys) -> None:
    out = tmp_path / "out.json"
    argv = ["simulate", "--algo", algo, "--env", env, "--T", "3000", "--runs", "2", "--seed", "1",
            "--json", str(out), "--no-progress"]
    if env == "linear":
        argv += ["--d", "4", "--K", "6"]
    if algo.startswith("sblb"):
        argv += ["--batch-size", "200", "--eps0", "4"]
    assert main(argv) == 0
    data = json.loads(out.read_text())
    assert TOP <= data.keys()
    assert PRIVACY <= data["privacy"].keys()
    for key in PRIVACY - {"accounting", "threat_model"}:
        assert (data["privacy"][key] is None) == (key in NULLS[algo]), key
    assert data["T"] == 3000 and data["runs"] == 2 and data["algo"] == algo
    assert data["regret_curve"][-1][0] == 3000
    curve = [v for _, v in data["regret_curve"]]
    assert curve == sorted(curve)  # cumulative regret never decreases
    assert data["final_regret_mean"] == pytest.approx(curve[-1])
    assert data["params"]["d"] == (4 if env == "linear" else 40)
    assert "final regret" in capsys.readouterr().out


def test_plot_and_ignored_flags(tmp_path: Path, capsys) -> None:
    png = tmp_path / "r.png"
    assert main(["simulate", "--algo", "linucb", "--T", "500", "--eps0", "3", "--plot", str(png),
                 "--no-progress"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "does not use --eps0" in capsys.readouterr().err


def test_invalid_parameters_are_clear_errors(capsys) -> None:
    assert main(["simulate", "--algo", "sblb", "--eps0", "-1", "--no-progress"]) == 2
    assert "eps0" in capsys.readouterr().err
