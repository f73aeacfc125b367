"""`privbandit simulate` honours the JSON contract of spec §6 for every policy and environment."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
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
    "lplr": {"rdp_alpha", "rdp_epsilon"},
    "ddp-linucb": {"ldp_epsilon", "ldp_delta"},
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
    if algo == "ddp-linucb":
        argv += ["--batch-size", "200", "--epsilon", "1", "--honest-fraction", "0.5"]
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


@pytest.mark.parametrize("algo", ["ddp-linucb", "ldp-linucb"])
def test_an_intercept_the_environment_does_not_have_is_a_clear_error(algo: str, capsys) -> None:
    """A centered encoding sized for x[0] = c on contexts without that intercept: exit 2 with a
    one-line reason, before any simulation (the randomizer would refuse every context)."""
    base = ["simulate", "--algo", algo, "--T", "500", "--no-progress"]
    assert main([*base, "--env", "linear", "--intercept", "0.5"]) == 2
    assert "have x[0] = 0.707107" in capsys.readouterr().err
    assert main([*base, "--env", "digits", "--d", "20", "--K", "10", "--encoding", "centered",
                 "--intercept", "0.5"]) == 2
    assert "declare no intercept" in capsys.readouterr().err


# -- multi-armed tasks (--env mab, issue 8) ------------------------------------------------------
MAB_NULLS = {
    "ucb": {"ldp_epsilon", "ldp_delta", "central_epsilon", "central_delta", "rdp_alpha",
            "rdp_epsilon", "per_user_epsilon"},
    # heterogeneous levels (MAB_RUNS): no common ε, so no single LDP / central figure
    "heldp-ucb-l": {"rdp_alpha", "rdp_epsilon", "ldp_epsilon", "central_epsilon"},
    "heldp-ucb-b": {"rdp_alpha", "rdp_epsilon", "ldp_epsilon", "central_epsilon"},
    "ldp-mab": {"rdp_alpha", "rdp_epsilon"},
    "adar-ucb": {"ldp_epsilon", "ldp_delta", "per_user_epsilon"},
}
MAB_RUNS = {
    "ucb": [],
    "heldp-ucb-l": ["--epsilon-dist", "choice:0,0.2,1,2,100", "--eps-min", "1"],
    "heldp-ucb-b": ["--epsilon-dist", "normal:1,1", "--sigmoid", "--reward-dist", "gaussian"],
    "ldp-mab": ["--epsilon", "1", "--black-box", "ucb", "--reward-dist", "mixed"],
    "adar-ucb": ["--epsilon", "1", "--alpha", "2", "--means", "0.9,0.5,0.4,0.2"],
}


def _mab(tmp_path: Path, algo: str, *extra: str, T: int = 3000, runs: int = 2) -> dict:
    out = tmp_path / f"{algo}.json"
    argv = ["simulate", "--algo", algo, "--env", "mab", "--T", str(T), "--runs", str(runs),
            "--seed", "1", "--json", str(out), "--no-progress", *extra]
    assert main(argv) == 0
    return json.loads(out.read_text())


@pytest.mark.parametrize("algo", sorted(MAB_NULLS))
def test_mab_json_contract(tmp_path: Path, algo: str) -> None:
    data = _mab(tmp_path, algo, *MAB_RUNS[algo])
    assert TOP <= data.keys() and data["env"] == "mab" and data["algo"] == algo
    assert PRIVACY | {"per_user_epsilon"} <= data["privacy"].keys()
    for key in PRIVACY - {"accounting", "threat_model"} | {"per_user_epsilon"}:
        assert (data["privacy"][key] is None) == (key in MAB_NULLS[algo]), key
    curve = [v for _, v in data["regret_curve"]]
    assert curve == sorted(curve) and data["regret_curve"][-1][0] == 3000
    assert data["final_regret_mean"] < data["random_regret_mean"]
    assert data["params"]["K"] == len(data["params"]["means"])
    assert data["model_updates_mean"] >= 1
    per_user = data["privacy"]["per_user_epsilon"]
    if per_user is not None:
        assert set(per_user) == {"distribution", "mean", "fraction_used", "fraction_declined"}
        assert 0 < per_user["fraction_used"] <= 1


def test_mab_done_when_command(tmp_path: Path) -> None:
    """The issue's acceptance command, verbatim."""
    data = _mab(tmp_path, "heldp-ucb-b", "--epsilon", "2", T=100_000, runs=5)
    p = data["privacy"]
    assert (p["ldp_epsilon"], p["ldp_delta"], p["threat_model"]) == (2.0, 0.0, "ldp")
    assert p["per_user_epsilon"] == {"distribution": "fixed:2", "mean": 2.0,
                                     "fraction_used": 1.0, "fraction_declined": 0.0}
    assert data["runs"] == 5 and data["params"]["eps_min"] == 2.0


def test_heterogeneous_levels_report_measured_fractions(tmp_path: Path) -> None:
    png = tmp_path / "r.png"
    data = _mab(tmp_path, "heldp-ucb-l", "--epsilon-dist", "choice:0,0.2,1,2,100", "--plot",
                str(png), T=20_000)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    p = data["privacy"]
    assert p["ldp_epsilon"] is None and p["central_epsilon"] is None
    assert data["params"]["eps_min"] == 100.0  # the V_L heuristic's choice for this distribution
    assert abs(p["per_user_epsilon"]["fraction_used"] - 0.2) < 0.02
    assert abs(p["per_user_epsilon"]["fraction_declined"] - 0.2) < 0.02


@pytest.mark.parametrize("argv,needle", [
    (["--algo", "ucb", "--env", "linear"], "multi-armed"),
    (["--algo", "linucb", "--env", "mab"], "linear"),
    (["--algo", "heldp-ucb-l", "--env", "mab", "--reward-dist", "gaussian"], "sigmoid"),
    (["--algo", "heldp-ucb-b", "--env", "mab", "--epsilon-dist", "normal:1"], "epsilon"),
    (["--algo", "heldp-ucb-b", "--env", "mab", "--eps-min", "0"], "eps_min"),
    (["--algo", "ucb", "--env", "mab", "--means", "0.5"], "two arm"),
    (["--algo", "ucb", "--env", "mab", "--means", "0.5,0.7", "--K", "3"], "--K"),
    (["--algo", "adar-ucb", "--env", "mab", "--beta", "2"], "beta"),
])
def test_mab_invalid_parameters_are_clear_errors(argv: list[str], needle: str, capsys) -> None:
    assert main(["simulate", *argv, "--T", "100", "--no-progress"]) == 2
    assert needle in capsys.readouterr().err


def test_mab_flags_a_policy_does_not_use_are_reported(tmp_path: Path, capsys) -> None:
    _mab(tmp_path, "adar-ucb", "--epsilon-dist", "fixed:1", "--sigmoid", "--eps0", "2", T=500)
    assert "does not use --eps0, --epsilon-dist, --sigmoid" in capsys.readouterr().err


def test_log_writes_a_uniform_bandit_feedback(tmp_path: Path) -> None:
    from privbandit.shared.core.logged import load_feedback

    log, out = tmp_path / "uniform.npz", tmp_path / "out.json"
    assert main(["simulate", "--algo", "random", "--env", "digits", "--T", "2000", "--log",
                 str(log), "--json", str(out), "--no-progress"]) == 0
    fb = load_feedback(log)
    assert fb["n_rounds"] == 2000 and fb["n_actions"] == 10
    assert np.allclose(fb["pscore"], 0.1) and fb["feature_map"] == "disjoint"
    data = json.loads(out.read_text())
    assert data["log"]["n_rounds"] == 2000 and data["privacy"]["threat_model"] == "none"
    # the uniform policy's regret is the uniformly random policy's on the same users
    assert data["final_regret_mean"] == pytest.approx(data["random_regret_mean"], rel=0.05)


@pytest.mark.parametrize("extra", [["--runs", "2"], ["--algo", "ucb", "--env", "mab"]])
def test_log_is_refused_where_it_records_nothing(tmp_path: Path, extra: list[str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--algo", "linucb", "--T", "10", "--log", str(tmp_path / "l.npz"),
            "--no-progress", *extra]
    assert main(argv) == 2
    assert "--log" in capsys.readouterr().err
    assert not (tmp_path / "l.npz").exists()


def test_evaluate_prints_and_writes_every_estimate(tmp_path: Path) -> None:
    log, out = tmp_path / "u.npz", tmp_path / "ev.json"
    assert main(["simulate", "--algo", "random", "--env", "digits", "--T", "3000", "--log",
                 str(log), "--no-progress"]) == 0
    assert main(["evaluate", "--log", str(log), "--algo", "linucb", "--repeats", "2",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["estimates"]) == {"replay", "ips", "snips", "dr"}
    for e in data["estimates"].values():
        assert e["low"] <= e["value"] <= e["high"] and 0 < e["n"] <= 3000
    assert len(data["estimates"]["replay"]["replays"]) == 2
    assert data["frozen"] == {"train_rounds": 1500, "eval_rounds": 1500,
                              "model_version": data["frozen"]["model_version"],
                              "estimand": data["frozen"]["estimand"]}
    assert data["frozen"]["estimand"].startswith("frozen value")
    assert data["estimates"]["replay"]["estimand"].startswith("online value")
    assert data["overlap"]["unsupported"] == 0 and data["refused"] == {}
    assert main(["evaluate", "--log", str(log), "--algo", "linucb", "--methods", "bogus"]) == 2
    assert main(["evaluate", "--log", str(tmp_path / "none.npz"), "--algo", "linucb"]) == 2
# -- returning users (issue 24) --------------------------------------------------------------


@pytest.mark.parametrize("algo,extra", [
    ("ldp-linucb", ["--d", "4", "--K", "6"]),
    ("ddp-linucb", ["--d", "4", "--K", "6", "--batch-size", "100", "--epsilon", "1"]),
    ("heldp-ucb-b", ["--env", "mab", "--K", "5", "--epsilon-dist", "choice:0.5,1",
                     "--user-offset", "0.05"]),
])
def test_returning_users_json(tmp_path: Path, algo: str, extra: list[str]) -> None:
    out = tmp_path / "out.json"
    argv = ["simulate", "--algo", algo, "--T", "2000", "--runs", "2", "--seed", "3",
            "--users", "100", "--contributions", "6", "--json", str(out), "--no-progress",
            *extra]
    assert main(argv) == 0
    data = json.loads(out.read_text())
    assert TOP <= data.keys()
    assert data["params"]["users"] == 100 and data["params"]["contributions"] == 6
    assert data["withheld_mean"] == 2000 - 600 and data["max_reports_per_person"] == 6
    person = data["privacy"]["per_person"]
    assert person["k"] == 6 and person["central_epsilon"] is not None
    if data["privacy"]["central_epsilon"] is not None:  # composed: above one report's figure
        assert person["central_epsilon"] > data["privacy"]["central_epsilon"]


@pytest.mark.parametrize("argv", [
    ["--contributions", "3"],  # no --users
    ["--users", "10", "--env", "digits"],
    ["--users", "0"],
    ["--users", "10", "--contributions", "0"],
])
def test_returning_users_bad_options(argv: list[str]) -> None:
    assert main(["simulate", "--algo", "ldp-linucb", "--T", "100", "--no-progress", *argv]) == 2
