"""`privbandit simulate` on the environments and policies of issue 9 (fixed-linear, logistic,
letter; adar-gope, ldp-glb), with the JSON contract of spec §6."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from privbandit.cli import main
from tests.privbandit.test_simulate_cmd import NULLS, PRIVACY, TOP

NEW_NULLS = {**NULLS, "adar-gope": NULLS["adar-oful"], "ldp-glb": NULLS["ldp-linucb"]}
CASES = [(algo, env) for env in ("fixed-linear", "logistic", "letter")
         for algo in ("linucb", "ldp-linucb", "sblb", "adar-oful", "ldp-glb")]
CASES.append(("adar-gope", "fixed-linear"))


@pytest.mark.parametrize("algo,env", CASES)
def test_json_contract_on_new_environments(tmp_path: Path, algo: str, env: str) -> None:
    out = tmp_path / "out.json"
    argv = ["simulate", "--algo", algo, "--env", env, "--T", "2000", "--runs", "2", "--seed", "1",
            "--json", str(out), "--no-progress"]
    if env != "letter":
        argv += ["--d", "4", "--K", "7"]
    if algo == "sblb":
        argv += ["--batch-size", "200", "--eps0", "4"]
    assert main(argv) == 0
    data = json.loads(out.read_text())
    assert TOP <= data.keys() and PRIVACY <= data["privacy"].keys()
    for key in PRIVACY - {"accounting", "threat_model"}:
        assert (data["privacy"][key] is None) == (key in NEW_NULLS[algo]), key
    curve = [v for _, v in data["regret_curve"]]
    assert curve == sorted(curve) and data["regret_curve"][-1][0] == 2000
    assert data["params"]["d"] == (52 if env == "letter" else 4)
    assert data["params"]["K"] == (26 if env == "letter" else 7)


def test_help_lists_every_environment(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = capsys.readouterr().out
    for env in ("linear", "digits", "fixed-linear", "logistic", "letter", "mab"):
        assert env in text
    assert "adar-gope" in text and "ldp-glb" in text


def test_adar_gope_needs_a_fixed_arm_set(capsys) -> None:
    assert main(["simulate", "--algo", "adar-gope", "--env", "logistic", "--T", "100",
                 "--no-progress"]) == 2
    assert "fixed-linear" in capsys.readouterr().err


def test_fixed_linear_takes_ten_thousand_arms(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    assert main(["simulate", "--algo", "adar-gope", "--env", "fixed-linear", "--K", "10000",
                 "--T", "20000", "--json", str(out), "--no-progress"]) == 0
    assert json.loads(out.read_text())["params"]["K"] == 10000
