"""`privbandit privacy` (privbandit/privacy_cmd.py) and the ledger builders (ledgers.py)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from privbandit.privacy_cmd import add_privacy_parser, run_privacy
from shared.core.accounting import ledgers
from shared.core.accounting.ledger import PrivacyLedger
from shared.core.accounting.rdp import gaussian_dp_epsilon_via_dp_accounting, rdp_to_dp
from shared.core.accounting.shuffle import shuffle_epsilon


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
    from shared.core.accounting.sum_only import sum_only_epsilon

    sums = ledgers.shuffle_ledger(16.0, 300, 1e-6, aggregation="secure-sum")
    assert sums.model_dump()["aggregation"] == "secure-sum"
    assert sums.central_epsilon == pytest.approx(sum_only_epsilon(16.0, 300, 1e-6, 5, 1))
    with pytest.raises(ValueError):
        ledgers.shuffle_ledger(1.0, 10, 1e-6, aggregation="bogus")  # type: ignore[arg-type]


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
        "loaded = [m for m in ('dp_accounting', 'scipy.signal', 'shared.core.policies', "
        "'shared.settings', 'privbandit.services_cmd') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert "0.0490988" in done.stdout
