"""`privbandit privacy` (privbandit/privacy_cmd.py) and the ledger builders (ledgers.py)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from privbandit.privacy_cmd import add_privacy_parser, run_privacy
from privbandit.shared.core.accounting import ledgers
from privbandit.shared.core.accounting.ledger import PrivacyLedger
from privbandit.shared.core.accounting.rdp import gaussian_dp_epsilon_via_dp_accounting, rdp_to_dp
from privbandit.shared.core.accounting.shuffle import shuffle_epsilon


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="privbandit")
    add_privacy_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["privacy", *argv])


def run(argv: list[str], tmp_path: Path) -> tuple[int, dict]:
    out = tmp_path / "ledger.json"
    code = run_privacy(parse([*argv, "--json", str(out)]))
    return code, json.loads(out.read_text()) if out.exists() else {}


def assert_all_fields(data: dict) -> None:
    for field in PrivacyLedger.model_fields:
        assert field in data, field  # null, never omitted (spec §6)
    assert "central_epsilon_paper" in data


def test_spec_example(tmp_path: Path) -> None:
    code, data = run(
        ["--threat-model", "shuffle", "--eps0", "2", "--batch-size", "10000", "--delta", "1e-6",
         "--T", "100000", "--d", "5", "--m", "1", "--aggregation", "reports"],
        tmp_path,
    )
    assert code == 0
    assert_all_fields(data)
    assert data["threat_model"] == "shuffle"
    assert data["ldp_epsilon"] == 2.0 and data["ldp_delta"] == 0.0
    assert data["central_epsilon"] == pytest.approx(0.155, abs=0.01)
    assert data["central_delta"] == 1e-6
    assert data["rdp_alpha"] is None and data["rdp_epsilon"] is None
    assert data["central_epsilon_paper"] is None  # Thm 5 needs l ~ T here; its conditions fail
    assert data["aggregation"] == "reports"
    assert data["accounting"]


def test_secure_sum_and_inverse(tmp_path: Path) -> None:
    code, data = run(
        ["--threat-model", "shuffle", "--eps0", "8", "--batch-size", "200",
         "--aggregation", "secure-sum"],
        tmp_path,
    )
    assert code == 0 and data["aggregation"] == "secure-sum"
    assert data["central_epsilon"] < shuffle_epsilon(8.0, 200, 1e-6)

    code, data = run(
        ["--threat-model", "shuffle", "--batch-size", "1000", "--target-epsilon", "1",
         "--solve", "eps0", "--aggregation", "reports"],
        tmp_path,
    )
    assert code == 0
    assert_all_fields(data)
    assert data["solution"]["solve"] == "eps0"
    assert data["solution"]["eps0"] == data["ldp_epsilon"]
    assert data["central_epsilon"] <= 1.0

    code, data = run(
        ["--threat-model", "shuffle", "--eps0", "2", "--target-epsilon", "0.3",
         "--solve", "batch-size", "--aggregation", "reports"],
        tmp_path,
    )
    assert code == 0
    n = data["solution"]["batch_size"]
    assert shuffle_epsilon(2.0, n, 1e-6) <= 0.3 < shuffle_epsilon(2.0, n - 1, 1e-6)


def test_secure_sum_is_the_default_shuffle_transport(tmp_path: Path) -> None:
    code, data = run(["--threat-model", "shuffle", "--eps0", "8", "--batch-size", "200"], tmp_path)
    assert code == 0 and data["aggregation"] == "secure-sum"


def test_other_threat_models(tmp_path: Path) -> None:
    code, data = run(["--threat-model", "central", "--epsilon", "1", "--alpha", "4"], tmp_path)
    assert code == 0
    assert_all_fields(data)
    assert data["rdp_alpha"] == 4.0 and data["rdp_epsilon"] == 1.0
    # Full RDP curve of the episode Gaussian (σ/Δ = √(α/2ε)), never above the single order.
    curve = gaussian_dp_epsilon_via_dp_accounting(math.sqrt(4.0 / 2.0), 1.0, 1e-6)
    assert data["central_epsilon"] == pytest.approx(curve)
    assert data["central_epsilon"] <= rdp_to_dp(4.0, 1.0, 1e-6)
    assert data["ldp_epsilon"] is None and data["central_epsilon_paper"] is None

    code, data = run(["--threat-model", "ldp", "--epsilon", "1", "--delta", "1e-5"], tmp_path)
    assert code == 0
    assert_all_fields(data)
    assert data["ldp_epsilon"] == 1.0 and data["ldp_delta"] == 1e-5

    code, data = run(["--threat-model", "ldp", "--eps0", "3"], tmp_path)
    assert code == 0 and data["ldp_delta"] == 0.0 and data["central_epsilon"] == 3.0


@pytest.mark.parametrize(
    "argv",
    [
        ["--threat-model", "shuffle", "--eps0", "0", "--batch-size", "10"],
        ["--threat-model", "shuffle", "--eps0", "-1", "--batch-size", "10"],
        ["--threat-model", "shuffle", "--eps0", "1", "--batch-size", "10", "--delta", "1"],
        ["--threat-model", "shuffle", "--eps0", "1", "--batch-size", "10", "--delta", "0"],
        ["--threat-model", "shuffle", "--eps0", "1", "--batch-size", "0"],
        ["--threat-model", "shuffle", "--eps0", "nan", "--batch-size", "10"],
        ["--threat-model", "central", "--epsilon", "1", "--alpha", "1"],
        ["--threat-model", "bogus"],
    ],
)
def test_invalid_values_are_argparse_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(argv)
    assert exc.value.code == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["--threat-model", "shuffle", "--eps0", "1"],
        ["--threat-model", "shuffle", "--batch-size", "10"],
        ["--threat-model", "ldp"],
        ["--threat-model", "ldp", "--eps0", "1", "--epsilon", "1"],
        ["--threat-model", "central"],
        ["--threat-model", "shuffle", "--target-epsilon", "1", "--batch-size", "10"],
        ["--threat-model", "shuffle", "--solve", "eps0", "--target-epsilon", "1"],
        ["--threat-model", "central", "--epsilon", "1", "--solve", "eps0",
         "--target-epsilon", "1"],
    ],
)
def test_missing_parameters_exit_2(argv: list[str], tmp_path: Path) -> None:
    code, data = run(argv, tmp_path)
    assert code == 2 and data == {}


def test_ledger_builders() -> None:
    none = ledgers.none_ledger()
    assert none.threat_model == "none" and none.accounting == "non-private baseline"
    assert all(
        getattr(none, f) is None
        for f in ("ldp_epsilon", "ldp_delta", "central_epsilon", "central_delta", "rdp_alpha",
                  "rdp_epsilon")
    )
    shuffled = ledgers.shuffle_ledger(2.0, 10_000, 1e-6)
    assert shuffled.central_epsilon == shuffle_epsilon(2.0, 10_000, 1e-6)
    assert shuffled.model_dump()["central_epsilon_paper"] is None  # no T
    binary = ledgers.ldp_binary_ledger(1.5)
    assert binary.ldp_epsilon == binary.central_epsilon == 1.5
    assert binary.ldp_delta == binary.central_delta == 0.0
    central = ledgers.central_ledger(2.0, 0.5, 1e-6)
    assert central.ldp_epsilon is None
    curve = gaussian_dp_epsilon_via_dp_accounting(math.sqrt(2.0 / (2 * 0.5)), 1.0, 1e-6)
    assert central.central_epsilon == pytest.approx(curve)
    assert central.central_epsilon_single_order == rdp_to_dp(2.0, 0.5, 1e-6)
    assert central.central_epsilon < central.central_epsilon_single_order


def test_shuffle_ledger_dispatches_secure_sum() -> None:
    from privbandit.shared.core.accounting.sum_only import sum_only_epsilon

    sums = ledgers.shuffle_ledger(16.0, 300, 1e-6, aggregation="secure-sum")
    assert sums.model_dump()["aggregation"] == "secure-sum"
    assert sums.central_epsilon == pytest.approx(sum_only_epsilon(16.0, 300, 1e-6, 5, 1))
    with pytest.raises(ValueError):
        ledgers.shuffle_ledger(1.0, 10, 1e-6, aggregation="bogus")  # type: ignore[arg-type]


# -- per person (issue 24) -----------------------------------------------------------------


def test_contributions_add_the_per_person_object(tmp_path: Path) -> None:
    code, data = run(["--threat-model", "ldp", "--eps0", "0.5", "--contributions", "8",
                      "--period", "1d"], tmp_path)
    assert code == 0
    assert_all_fields(data)
    person = data["per_person"]
    assert person["k"] == 8 and person["period"] == "1d"
    assert data["ldp_epsilon"] == 0.5  # per report, unchanged, side by side
    assert person["ldp_epsilon"] == pytest.approx(4.0, rel=1e-3)
    assert data["parameters"]["contributions"] == 8


def test_solve_largest_k(tmp_path: Path) -> None:
    """The largest k whose per-person central ε meets the target, and k + 1 does not."""
    from privbandit.shared.core.accounting import persons

    code, data = run(["--threat-model", "ldp", "--epsilon", "1", "--delta", "1e-7",
                      "--target-epsilon", "4", "--solve", "k"], tmp_path)
    assert code == 0
    k = data["solution"]["k"]
    assert k >= 1 and data["per_person"]["k"] == k
    assert data["per_person"]["central_epsilon"] <= 4
    more = persons.person_figures(ledgers.ldp_gaussian_ledger(1.0, 1e-7), k + 1, 1e-7)
    assert more["central_epsilon"] > 4


def test_solve_per_report_epsilon_for_a_person_target(tmp_path: Path) -> None:
    code, data = run(["--threat-model", "central", "--contributions", "10",
                      "--target-epsilon", "3", "--solve", "epsilon"], tmp_path)
    assert code == 0
    eps = data["solution"]["epsilon"]
    assert data["rdp_epsilon"] == pytest.approx(eps)
    assert 2.99 <= data["per_person"]["central_epsilon"] <= 3.0


def test_solve_eps0_per_person_shuffle(tmp_path: Path) -> None:
    code, data = run(["--threat-model", "shuffle", "--batch-size", "1000", "--aggregation",
                      "reports", "--contributions", "4", "--target-epsilon", "4",
                      "--solve", "eps0"], tmp_path)
    assert code == 0
    assert data["per_person"]["central_epsilon"] <= 4
    assert data["parameters"]["eps0"] == data["solution"]["eps0"]


def test_person_question_without_solution(tmp_path: Path) -> None:
    code, data = run(["--threat-model", "ldp", "--eps0", "3", "--target-epsilon", "1",
                      "--solve", "k"], tmp_path)
    assert code == 1 and data["solution"]["k"] == 0 and "reason" in data["solution"]


@pytest.mark.parametrize("argv", [
    ["--threat-model", "ldp", "--target-epsilon", "1", "--solve", "epsilon"],  # needs K
    ["--threat-model", "central", "--contributions", "3", "--target-epsilon", "1",
     "--solve", "eps0"],
    ["--threat-model", "shuffle", "--contributions", "3", "--target-epsilon", "1",
     "--solve", "eps0"],  # needs --batch-size
])
def test_person_usage_errors(argv: list[str], tmp_path: Path) -> None:
    assert run(argv, tmp_path)[0] == 2


def test_contributions_must_be_positive() -> None:
    with pytest.raises(SystemExit):
        parse(["--threat-model", "ldp", "--eps0", "1", "--contributions", "0"])
def test_the_secure_sum_ledger_loads_no_policy_code_nor_dp_accounting() -> None:
    # Issue 26 item 7: the accountant is a calculator. `privbandit privacy` builds only its own
    # subcommand's parser (no policy, environment or service modules) and the sum-only ledger
    # composes its PLD itself (pld.py): dp-accounting and scipy.signal cost a second of start-up.
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from privbandit.cli import main\n"
        "assert main(['privacy', '--threat-model', 'shuffle', '--eps0', '2', '--batch-size', "
        "'1000', '--delta', '1e-6']) == 0\n"
        "loaded = [m for m in ('dp_accounting', 'scipy.signal', 'privbandit.shared.core.policies', "
        "'privbandit.shared.settings', 'privbandit.services_cmd') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert "0.0490988" in done.stdout
