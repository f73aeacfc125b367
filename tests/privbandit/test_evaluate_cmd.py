"""`privbandit evaluate` on logs read from files (issue 42): an Open Bandit Dataset-format log
(a small file the test writes) gives every estimate under its label with the overlap
diagnostic; a greedy log refuses IPS and SNIPS (exit 3); a malformed file is one line on
stderr, never a traceback; the library's offpolicy doctests run."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest

from privbandit import offpolicy
from privbandit.cli import main
from tests.shared.core.obd_format import write_obd


def test_an_obd_log_is_evaluated_with_overlap(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    write_obd(tmp_path / "obd", n=900, K=6, seed=1)
    out = tmp_path / "ev.json"
    rc = main(["evaluate", "--log", str(tmp_path / "obd"), "--algo", "linucb", "--repeats",
               "2", "--user-columns", "user_feature_0", "--json", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    data = json.loads(out.read_text())
    assert data["feature_map"] == "shared" and data["positions"] == "feature"
    assert data["n_rounds"] == 900 and data["n_actions"] == 6
    assert set(data["estimates"]) == {"replay", "ips", "snips", "dr"}
    assert data["refused"] == {}
    o = data["overlap"]
    assert 0 < o["ess"] <= 450 and o["max_weight"] == pytest.approx(6)
    for line in ("ONLINE value (replay", "FROZEN value (the policy trained on rounds [0, 450)",
                 "overlap: ESS", "positions: the position's one-hot joins the user features"):
        assert line in printed, printed
    # One position only: its rounds alone.
    rc = main(["evaluate", "--log", str(tmp_path / "obd" / "all.csv"), "--algo", "linucb",
               "--methods", "ips", "--positions", "2", "--json", str(out)])
    assert rc == 0
    assert "position 2 only" in capsys.readouterr().out
    assert json.loads(out.read_text())["n_rounds"] < 900


def test_a_greedy_log_is_refused_not_estimated(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "g.npz"
    assert main(["simulate", "--algo", "linucb", "--env", "linear", "--d", "4", "--K", "6",
                 "--T", "2000", "--log", str(log), "--no-progress"]) == 0
    capsys.readouterr()
    rc = main(["evaluate", "--log", str(log), "--algo", "ldp-linucb", "--epsilon", "2",
               "--json", str(tmp_path / "ev.json")])
    printed = capsys.readouterr().out
    assert rc == 3, printed
    data = json.loads((tmp_path / "ev.json").read_text())
    assert set(data["refused"]) == {"replay", "ips", "snips"}
    assert set(data["estimates"]) == {"dr"}
    assert data["overlap"]["deterministic_log"] and data["overlap"]["unsupported"] > 0.05
    assert "warning: every logged propensity is 1" in printed
    assert "refused ips:" in printed and "warning (dr)" in printed


def test_an_exploring_log_supports_every_policy(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "e.npz"
    assert main(["simulate", "--algo", "linucb", "--env", "linear", "--d", "4", "--K", "6",
                 "--T", "2000", "--log", str(log), "--explore", "epsilon-greedy:0.5",
                 "--no-progress"]) == 0
    rc = main(["evaluate", "--log", str(log), "--algo", "ldp-linucb", "--epsilon", "2",
               "--methods", "ips,snips,dr", "--json", str(tmp_path / "ev.json")])
    assert rc == 0, capsys.readouterr()
    data = json.loads((tmp_path / "ev.json").read_text())
    assert data["overlap"]["unsupported"] == 0 and data["overlap"]["unsupported_exact"]
    assert data["overlap"]["max_weight"] <= 6 / 0.5 + 1e-9
    assert main(["simulate", "--algo", "linucb", "--T", "10", "--explore", "softmax:0",
                 "--no-progress"]) == 2
    assert "--explore" in capsys.readouterr().err


def test_a_malformed_log_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    write_obd(tmp_path, n=30, K=4, seed=2)
    path = tmp_path / "all.csv"
    lines = path.read_text().splitlines()
    fields = lines[7].split(",")
    fields[5] = "1.5"
    lines[7] = ",".join(fields)
    path.write_text("\n".join(lines) + "\n")
    assert main(["evaluate", "--log", str(path), "--algo", "linucb"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert "line 8, column propensity_score: 1.5 is not a probability in (0, 1]" in err
    (tmp_path / "plain.csv").write_text("action,reward\n0,1\n")
    assert main(["evaluate", "--log", str(tmp_path / "plain.csv"), "--algo", "linucb"]) == 2
    assert "no column 'pscore'" in capsys.readouterr().err


def test_the_offpolicy_docstring_runs() -> None:
    result = doctest.testmod(offpolicy, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_obps_dict_without_a_feature_map_names_the_flag(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """The issue's case: obp's real-data feedback (a per-user context, the items' features)
    used to end in a traceback; now one line says to name the encoding, and with it the log is
    evaluated."""
    import numpy as np

    rng = np.random.default_rng(3)
    n, K = 400, 5
    fb = {"n_rounds": n, "n_actions": K, "action": rng.integers(0, K, n),
          "reward": rng.integers(0, 2, n).astype(float), "pscore": np.full(n, 1 / K),
          "position": np.zeros(n, dtype=int), "context": rng.normal(size=(n, 3)),
          "action_context": rng.normal(size=(K, 2))}
    with (tmp_path / "obp.npz").open("wb") as fh:
        np.savez(fh, **fb)
    argv = ["evaluate", "--log", str(tmp_path / "obp.npz"), "--algo", "linucb", "--methods",
            "ips,dr"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--encoding shared or disjoint" in err
    assert main([*argv, "--encoding", "shared"]) == 0
    assert "shared features" in capsys.readouterr().out
