"""`privbandit simulate --env bco-*` writes spec §6's JSON for the BCO policies (issue 12)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from privbandit.cli import main
from tests.privbandit.test_simulate_cmd import PRIVACY, TOP


@pytest.mark.parametrize("env", ["bco-quadratic", "bco-convex"])
@pytest.mark.parametrize("algo", ["bco", "ldp-bco", "bco2", "ldp-bco2"])
def test_bco_json_contract(tmp_path: Path, algo: str, env: str, capsys) -> None:
    out, png = tmp_path / "out.json", tmp_path / "out.png"
    assert main(["simulate", "--algo", algo, "--env", env, "--d", "3", "--T", "3000", "--runs",
                 "2", "--epsilon", "1", "--delta", "1e-6", "--json", str(out), "--plot",
                 str(png), "--no-progress"]) == 0
    data = json.loads(out.read_text())
    assert TOP <= data.keys() and PRIVACY <= data["privacy"].keys()
    assert data["regret_curve"][-1][0] == 3000 and data["params"]["d"] == 3
    curve = [v for _, v in data["regret_curve"]]
    assert curve == sorted(curve)  # fixed optimum: every round's regret is ≥ 0
    assert data["params"]["max_played_norm"] <= data["params"]["radius"] * (1 + 1e-12)
    p = data["privacy"]
    if algo.startswith("ldp"):
        assert p["threat_model"] == "ldp" and p["ldp_epsilon"] == 1.0 and p["ldp_delta"] == 1e-6
        assert p["calibration"] == "analytic"
    else:
        assert p["threat_model"] == "none" and p["ldp_epsilon"] is None
        assert "does not use --epsilon, --delta" in capsys.readouterr().err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bco_policies_and_environments_only_go_together(capsys) -> None:
    assert main(["simulate", "--algo", "bco", "--env", "linear", "--no-progress"]) == 2
    assert main(["simulate", "--algo", "linucb", "--env", "bco-convex", "--no-progress"]) == 2
    assert "BCO" in capsys.readouterr().err
    assert main(["simulate", "--algo", "bco", "--env", "bco-convex", "--loss-noise", "1.5",
                 "--no-progress"]) == 2
