"""End-to-end, ``ldp-glb`` and ``adar-gope`` (issue 9): simulated users over real HTTP through the
device, shuffler (pass-through) and analyzer as real processes (the small config's tasks), with
exact reconciliation of the three services' counts.

- ``small-ldp-glb``: users with logistic rewards; every report names a published model version
  and lies in the admissible box, so all are counted; the published model carries θ̂ in the ball
  of radius S, moved by the OGD steps.
- ``small-adar-gope``: decide takes no features, the device draws from the phase's design; the
  run crosses phase boundaries (the analyzer ends phase 1 after its planned reports, 75–77
  depending on the design Frank–Wolfe finds with the machine's floating point); reports
  drawn from a phase whose arm was eliminated when they arrived are refused, and the counts still
  reconcile: accepted = counted + refused.
"""

from __future__ import annotations

import asyncio
import tomllib
from pathlib import Path

import httpx
import numpy as np
import pytest

from privbandit.demo import DemoOptions, run_demo_against
from privbandit.launcher import Cluster
from privbandit.shared.core.policies import build_policy
from privbandit.shared.settings import TaskConfig
from tests.helpers import patience

pytestmark = pytest.mark.slow

USERS = 200


def _run(cluster: Cluster, task_id: str) -> dict:
    opts = DemoOptions("ldp", users=USERS, concurrency=4, seed=3, progress=False,
                       settle_timeout=patience(60))
    return asyncio.run(run_demo_against(cluster.urls, task_id, opts))


def test_ldp_glb_demo_reconciles_exactly(cluster: Cluster) -> None:
    out = _run(cluster, "small-ldp-glb")
    rec = out["reconciliation"]
    assert rec["consistent"], rec
    assert out["env"] == "logistic"
    assert rec["feedbacks_sent"] == rec["reports_accepted"] == rec["reports_counted"] == USERS
    assert rec["reports_refused"] == rec["reports_pending"] == 0
    model = httpx.get(f"{cluster.urls['analyzer']}/v1/tasks/small-ldp-glb/model").json()
    assert model["version"] == USERS // 25 and model["reports"] == USERS
    assert 0 < np.linalg.norm(model["theta_hat"]) <= 3.0 + 1e-9


def test_adar_gope_demo_crosses_phases_and_reconciles(cluster: Cluster, e2e_config: Path) -> None:
    out = _run(cluster, "small-adar-gope")
    rec = out["reconciliation"]
    assert rec["consistent"], rec
    assert out["env"] == "fixed-linear"
    assert rec["feedbacks_sent"] == rec["reports_accepted"] == USERS
    assert rec["reports_counted"] + rec["reports_refused"] == USERS
    assert rec["reports_pending"] == 0
    model = httpx.get(f"{cluster.urls['analyzer']}/v1/tasks/small-adar-gope/model").json()
    # Phase 1's planned length, as the analyzer computes it from the same config.
    (task,) = [t for t in tomllib.loads(e2e_config.read_text())["tasks"]
               if t["id"] == "small-adar-gope"]
    phase1 = build_policy(TaskConfig.model_validate(task).policy).model.length
    assert 50 <= phase1 <= 100  # the config's short phases (confidence_scale 0.3)
    assert model["phase"] >= 2 and model["reports"] >= phase1
    assert set(model["support"]) <= set(model["active"])
    assert out["privacy"]["rdp_epsilon"] == 1.0
