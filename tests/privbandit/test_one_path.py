"""Issue 46: ``privbandit simulate`` and ``privbandit.simulate`` are one code path — for every
registered policy they give the same final regret, regret curve, resolved config and ledger on
the same seed, and the library's result always carries the ledger (``privacy``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

import privbandit
from privbandit.cli import main
from privbandit.config_flags import NOT_FLAGS, config_fields
from privbandit.shared.core.policies.families import ARMS, BCO_FAMILY, GLB, PHASE
from privbandit.shared.core.policies.registry import REGISTRY
from privbandit.simulation import SimulationError
from tests.privbandit.test_simulate_cmd import PRIVACY

T = 400


def env_of(algo: str) -> str:
    """The environment a policy of each family runs on."""
    family = REGISTRY[algo].family
    return {ARMS: "mab", BCO_FAMILY: "bco-quadratic", GLB: "logistic",
            PHASE: "fixed-linear"}.get(family, "linear")


def cli_json(tmp_path: Path, argv: list[str]) -> dict[str, Any]:
    out = tmp_path / "out.json"
    assert main(["simulate", *argv, "--json", str(out), "--no-progress"]) == 0
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def as_json(out: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(json.dumps(out, allow_nan=False))
    return data


def assert_same(cli: dict[str, Any], lib: dict[str, Any]) -> None:
    lib = as_json(lib)
    for key in ("algo", "env", "T", "runs", "seed", "params", "final_regret_mean",
                "final_regret_stderr", "regret_curve", "random_regret_mean",
                "model_updates_mean", "reports_ingested_mean", "coverage", "privacy"):
        assert cli[key] == lib[key], key


@pytest.mark.parametrize("algo", sorted(REGISTRY))
def test_cli_and_library_agree_for_every_policy(tmp_path: Path, algo: str) -> None:
    env = env_of(algo)
    small = ["--K", "5"] if env in ("linear", "mab", "fixed-linear", "logistic") else []
    # sblb's default schedule (its ε0 per batch length: seconds of accounting) is CASES' first
    fixed = ["--batch-size", "200"] if algo.startswith("sblb") else []
    cli = cli_json(tmp_path, ["--algo", algo, "--env", env, "--T", str(T), "--runs", "2",
                              "--seed", "3", *small, *fixed])
    lib = privbandit.simulate(algo, env, T=T, runs=2, seed=3, **({"K": 5} if small else {}),
                              **({"batch_size": 200} if fixed else {}))
    assert_same(cli, lib)
    assert PRIVACY <= lib["privacy"].keys()
    assert lib["privacy"]["threat_model"] == REGISTRY[algo].threat_models[0]
    for key in PRIVACY - {"threat_model", "accounting"}:  # a figure, or null: never NaN
        value = lib["privacy"][key]
        assert value is None or (isinstance(value, (int, float)) and math.isfinite(value)), key


# The parameters of issue 46's table (sblb at its default schedule) and its other reports, each
# through both paths.
CASES = [
    ("sblb", ["--epsilon", "1", "--delta", "1e-6"], {"epsilon": 1.0, "delta": 1e-6}),
    ("sblb", ["--eps0", "3", "--batch-size", "100", "--aggregation", "reports"],
     {"eps0": 3.0, "batch_size": 100, "aggregation": "reports"}),
    ("ldp-glb", ["--S", "2.5", "--epsilon", "2"], {"S": 2.5, "epsilon": 2.0}),
    ("adar-oful", ["--central-epsilon", "2"], {"central_epsilon": 2.0}),
    ("heldp-ucb-b", ["--epsilon-dist", "choice:0.5,1,2", "--means", "0.8,0.5,0.2"],
     {"epsilon_dist": "choice:0.5,1,2", "means": [0.8, 0.5, 0.2]}),
    ("ldp-bco2", ["--loss-bound", "2", "--calibration", "paper"],
     {"loss_bound": 2.0, "calibration": "paper"}),
    ("lplr", ["--first-epoch", "100", "--matrix-noise", "wishart"],
     {"first_epoch": 100, "matrix_noise": "wishart"}),
    ("linucb", ["--users", "50", "--contributions", "3"], {"users": 50, "contributions": 3}),
]


@pytest.mark.parametrize(("algo", "flags", "kwargs"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_cli_and_library_agree_on_parameters(tmp_path: Path, algo: str, flags: list[str],
                                             kwargs: dict[str, Any]) -> None:
    env = env_of(algo)
    cli = cli_json(tmp_path, ["--algo", algo, "--env", env, "--T", str(T), "--seed", "1",
                              *flags])
    lib = privbandit.simulate(algo, env, T=T, seed=1, **kwargs)
    assert_same(cli, lib)


def test_sblb_noise_and_ledger_follow_the_aggregation() -> None:
    """The accountant that sizes sblb's ε0 is the one its ledger reports: the central ε is the
    target under either aggregation (never 0.0), and the ε0 differs between them."""
    outs = {agg: privbandit.simulate("sblb", "linear", T=T, d=3, K=4, epsilon=1.0, batch_size=200,
                                     aggregation=agg) for agg in ("secure-sum", "reports")}
    for agg, out in outs.items():
        assert out["params"]["accountant"] == agg
        assert out["privacy"]["central_epsilon"] == pytest.approx(1.0, rel=1e-3), agg
    assert outs["reports"]["privacy"]["ldp_epsilon"] < outs["secure-sum"]["privacy"][
        "ldp_epsilon"]


def test_horizon_follows_the_T_run_unless_given() -> None:
    for algo, env in (("ldp-glb", "logistic"), ("ldp-linucb", "linear"), ("ldp-mab", "mab"),
                      ("ldp-bco", "bco-convex")):
        assert privbandit.simulate(algo, env, T=300)["params"]["horizon"] == 300, algo
        assert privbandit.simulate(algo, env, T=300, horizon=5000)["params"]["horizon"] == 5000
    assert privbandit.config("ldp-glb", T=777).horizon == 777


def test_the_library_refuses_what_the_command_line_notes(tmp_path: Path, capsys) -> None:
    with pytest.raises(SimulationError, match="linucb has no parameter"):
        privbandit.simulate("linucb", "linear", T=100, eps0=3.0)
    cli_json(tmp_path, ["--algo", "linucb", "--T", "100", "--eps0", "3"])
    assert "does not use --eps0" in capsys.readouterr().err
    with pytest.raises(SimulationError, match="multi-armed"):
        privbandit.simulate("ucb", "linear", T=100)
    with pytest.raises(SimulationError, match="aggregation"):
        privbandit.simulate("sblb", "linear", T=100, accountant="reports")


def test_every_config_field_is_reachable_from_the_command_line() -> None:
    """Every field of every registered config is a flag of ``simulate`` (or set by one named in
    ``NOT_FLAGS``), and a generated flag reaches its field (``--S`` of ldp-glb)."""
    from privbandit.cli import build_parser

    parser = build_parser("simulate")
    sub = parser._subparsers._group_actions[0].choices["simulate"]  # type: ignore[union-attr]
    dests = {a.dest for a in sub._actions}
    for name in config_fields():
        assert name in dests or name in NOT_FLAGS, name
    args = parser.parse_args(["simulate", "--algo", "ldp-glb", "--S", "2", "--horizon", "9",
                              "--ogd-step", "0.1"])
    assert (args.S, args.horizon, args.ogd_step) == (2.0, 9, 0.1)


def test_policy_ledger_is_the_simulations_ledger() -> None:
    """``policy_ledger`` resolves the config as ``simulate`` does (aggregation, horizon)."""
    for agg in ("reports", "secure-sum"):
        out = privbandit.simulate("sblb", "linear", T=T, d=3, K=4, batch_size=200,
                                  aggregation=agg)
        ledger = privbandit.policy_ledger("sblb", T, agg, d=3, batch_size=200)
        assert as_json(ledger.model_dump()) == out["privacy"], agg


def test_a_config_object_runs_as_its_fields_say() -> None:
    cfg = privbandit.config("ldp-glb", d=3, horizon=1000, aggregation="reports")
    out = privbandit.simulate(cfg, "logistic", T=300, K=4, seed=2)
    assert out["params"]["horizon"] == 1000
    same = privbandit.simulate("ldp-glb", "logistic", T=300, d=3, K=4, seed=2, horizon=1000)
    assert out["final_regret_mean"] == same["final_regret_mean"]
    assert out["privacy"] == same["privacy"]
    sblb = privbandit.config("sblb", d=3, batch_size=200, aggregation="reports")
    assert privbandit.simulate(sblb, "linear", T=300, K=4)["params"]["accountant"] == "reports"
