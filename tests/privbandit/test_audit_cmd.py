"""`privbandit audit` (privbandit/audit_cmd.py) and `privbandit.audit`: the command's JSON rows,
its table, its refusals and its exit status; the library function behind it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import privbandit
from privbandit.cli import main


def test_json_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out" / "audit.json"
    code = main(["audit", "--mechanism", "sblb/bit", "--samples", "4000", "--seed", "3",
                 "--confidence", "0.9", "--json", str(out), "--no-progress"])
    assert code == 0
    rows = json.loads(out.read_text())
    assert len(rows) == 1
    row = rows[0]
    assert row["mechanism"] == "sblb/bit" and row["samples"] == 4000
    assert row["confidence"] == 0.9
    assert 0 < row["audited_epsilon_lower"] <= row["claimed_epsilon"]
    assert row["delta"] == 0.0
    text = capsys.readouterr().out
    assert "sblb/bit" in text and "ε_lo" in text and "…" not in text  # whole names


def test_same_seed_same_rows(tmp_path: Path) -> None:
    a = privbandit.audit("heldp-ucb-b@2", samples=2000, seed=5)[0]
    b = privbandit.audit("heldp-ucb-b@2", samples=2000, seed=5)[0]
    assert a.audited_epsilon_lower == b.audited_epsilon_lower


def test_planted_rows_exceed_their_claims(tmp_path: Path) -> None:
    out = tmp_path / "planted.json"
    code = main(["audit", "--mechanism", "heldp-ucb-l@0.5", "--samples", "20000", "--plant",
                 "--json", str(out), "--no-progress"])
    assert code == 0  # a planted run reports, it does not fail
    row = json.loads(out.read_text())[0]
    assert row["planted"] and row["audited_epsilon_lower"] > row["claimed_epsilon"]


def test_refusals(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--mechanism", "nope", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "unknown mechanism 'nope'" in err and "Traceback" not in err
    for misplaced in (["--mechanism", "sblb/bit"],
                      ["--task", "demo-ldp", "--device", "http://x", "--analyzer", "http://y"]):
        assert main(["audit", *misplaced, "--config", "cfg.toml", "--no-progress"]) == 2
        assert "--config names the file of --task's config" in capsys.readouterr().err
    for bad in (["--samples", "3"], ["--confidence", "1"], ["--seed", "-1"]):
        with pytest.raises(SystemExit) as exc:
            main(["audit", *bad])
        assert exc.value.code == 2


def test_list_names_every_mechanism(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--list"]) == 0
    listed = capsys.readouterr().out.split()
    assert "ddp-linucb/frobenius/analyzer" in listed and "adar-gope" in listed
    assert "ldp-linucb/centered-upper" in listed and "ldp-linucb/privunit/centered" in listed


def test_command_line_process(tmp_path: Path) -> None:
    """The installed entry point, in its own process (a rich table, the JSON file)."""
    out = tmp_path / "a.json"
    proc = subprocess.run([sys.executable, "-m", "privbandit", "audit", "--mechanism", "ldp-mab",
                           "--samples", "2000", "--json", str(out), "--no-progress"],
                          capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())[0]["mechanism"] == "ldp-mab"


def test_refuted_claim_fails_the_command(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """An honest run whose row exceeds its claim exits 1 and names it: here the planted
    mechanism stands in for a broken one (the runner is asked for plant=True behind the
    command's back)."""
    from privbandit.shared.core.audit import run

    real = run.audit
    monkeypatch.setattr(run, "audit", lambda *a, **k: real(*a[:4], True, *a[5:], **k))
    assert main(["audit", "--mechanism", "sblb/bit", "--samples", "20000", "--no-progress"]) == 1
    assert "claims refuted at confidence 0.95: sblb/bit" in capsys.readouterr().err


def test_a_task_is_audited_as_its_config_states_it(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``--task T`` without a deployment: the report of the config's task, by the mechanism the
    config names — demo-ldp's PrivUnit2 (pure ε = 4, centered, d = 5) in the packaged config,
    small-ldp's Gaussian report (ε = 1, δ = 10⁻⁶, plain) in small.toml — and the tasks it cannot
    audit refused in one line."""
    from privbandit.shared.settings import DEFAULT_CONFIG

    out = tmp_path / "task.json"
    base = ["audit", "--samples", "4000", "--no-progress", "--json", str(out)]
    assert main([*base, "--task", "demo-ldp", "--config", str(DEFAULT_CONFIG)]) == 0
    row = json.loads(out.read_text())[0]
    assert (row["mechanism"], row["family"], row["delta"]) == (
        "ldp-linucb/privunit/centered", "privunit", 0.0)
    assert row["claimed_epsilon"] == pytest.approx(4.0)
    assert 0 < row["audited_epsilon_lower"] <= row["claimed_epsilon"]
    small = DEFAULT_CONFIG.parent / "small.toml"
    assert main([*base, "--task", "small-ldp", "--config", str(small)]) == 0
    row = json.loads(out.read_text())[0]
    assert (row["mechanism"], row["claimed_epsilon"], row["delta"]) == (
        "ldp-linucb/plain", 1.0, 1e-6)
    capsys.readouterr()
    for task, words in (("demo-shuffle", "audited for ldp-linucb tasks"),
                        ("nope", "has no task 'nope'")):
        assert main(["audit", "--task", task, "--config", str(DEFAULT_CONFIG),
                     "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert words in err and "\n" not in err
