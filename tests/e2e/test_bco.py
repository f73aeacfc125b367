"""End-to-end, bandit-convex-optimisation tasks (issue 12, item 3): simulated users over real HTTP
through the device, shuffler (pass-through) and analyzer as real processes, for the BCO tasks of
the small config. Decide takes no features and answers the point(s); users send their losses; the
counts reconcile exactly and the regret lands where the simulator's does; bad losses are
refused over HTTP with nothing stored; killing the shuffler and the analyzer mid-run loses and
duplicates nothing, and a restarted analyzer publishes exactly the model it had (one crash for
these tasks and the multi-armed ones: ``test_restart.py``)."""

from __future__ import annotations

import httpx
import pytest

from privbandit.launcher import Cluster
from tests.helpers import assert_feedback_refused, pass_through_demo, patience

pytestmark = pytest.mark.slow

USERS = 400
BCO_TASKS = ["small-ldp-bco2", "small-ldp-bco"]


@pytest.mark.parametrize("task_id", BCO_TASKS)
def test_bco_demo_reconciles_exactly(cluster: Cluster, task_id: str) -> None:
    out = pass_through_demo(cluster, task_id, USERS)
    assert out["env"] == "bco-quadratic" and out["params"]["d"] == 2
    # Each user's regret F(played) − min F is ≥ 0. (Below the uniformly random point's is not
    # asserted: at ε = 2 and 400 users ldp-bco2 is sometimes above it, and the devices' u come
    # from the OS CSPRNG, so a run cannot be seeded.)
    assert out["final_regret"] >= 0
    # Learning through the services lands where the in-process simulator does on the same
    # instance (20 runs): within 4 of their standard deviations. The devices may play a version
    # a few reports old (concurrency 4), which the simulator never does; the gap is small.
    ref = out["simulator_reference"]
    assert abs(ref["demo_z"]) < 4, ref


def test_bad_losses_over_http_store_nothing(cluster: Cluster) -> None:
    device = cluster.urls["device"]
    with httpx.Client(base_url=device, timeout=patience(10)) as c:
        before = c.get("/v1/status").json()
        assert c.post("/v1/tasks/small-ldp-bco/decide",
                      json={"features": [[0.1, 0.2]] * 2}).status_code == 422
        out = c.post("/v1/tasks/small-ldp-bco2/decide", json={}).json()
        assert len(out["points"]) == 2
        did = out["decision_id"]
        bad = [
            ('{"decision_id": "%s", "losses": [NaN, 0.1]}', "invalid_request"),
            ('{"decision_id": "%s", "losses": [1.5, 0.1]}', "loss_out_of_range"),
            ('{"decision_id": "%s", "losses": [0.1]}', "wrong_loss_count"),
            ('{"decision_id": "%s", "reward": 0.1}', "missing_losses"),
        ]
        assert_feedback_refused(c, "small-ldp-bco2", did, bad, before, {"losses": [0.2, 0.3]})
