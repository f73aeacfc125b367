"""End-to-end: ``privbandit demo --task demo-ldp`` with the packaged defaults — ldp-linucb's
practical ones, including the centered report ("auto" with the linear contexts' intercept; issue
22) — over real HTTP: exact reconciliation, no honest report refused by the admissible box of the
centered encoding, the ledger of that encoding, and a regret where the in-process simulator lands
on the same users."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from privbandit.shared.core.environments.linear import LinearEnvironment
from privbandit.shared.core.policies.config import LDP_CENTERED_U_WEIGHT
from privbandit.shared.settings import DEFAULT_CONFIG
from tests.e2e.test_secure_sum import run_demo
from tests.helpers import with_policy

pytestmark = pytest.mark.slow

DEMO_LDP = "demo-ldp"


def test_demo_ldp_runs_the_centered_report_end_to_end(tmp_path: Path) -> None:
    users = 500
    packaged = tomllib.loads(DEFAULT_CONFIG.read_text())
    policy = next(t for t in packaged["tasks"] if t["id"] == DEMO_LDP)["policy"]
    assert (policy["encoding"], policy["intercept"]) == ("auto", LinearEnvironment.intercept)
    config = with_policy(DEFAULT_CONFIG, DEMO_LDP, tmp_path / "demo-ldp.toml", only=True)
    out = run_demo(DEMO_LDP, users, config, tmp_path / "data", seed=4)
    assert (out["params"]["encoding"], out["params"]["u_weight"]) == (
        "centered", LDP_CENTERED_U_WEIGHT)
    rec = out["reconciliation"]
    assert rec["consistent"], rec
    assert rec["feedbacks_sent"] == rec["reports_accepted"] == rec["reports_counted"] == users
    assert rec["reports_refused"] == 0 and rec["reports_pending"] == 0
    assert rec["model_versions"] >= users // policy["update_every"]
    privacy = out["privacy"]
    # The PrivUnit2 report (issue 44): pure ε-LDP, δ = 0 (the task's δ is the Gaussian's, unused).
    assert policy["mechanism"] == "privunit"
    assert (privacy["ldp_epsilon"], privacy["ldp_delta"]) == (4.0, 0.0)
    assert "PrivUnit2" in privacy["accounting"]
    assert "centered encoding's vector, its 19 non-constant entries" in privacy["accounting"]
    # Learning through the services lands where the simulator does on the same users (20 runs;
    # the devices may decide with a model one publication old).
    ref = out["simulator_reference"]
    assert abs(ref["demo_z"]) < 4, ref
