"""End-to-end, multi-armed tasks (issue 8, item 5): simulated users over real HTTP through the
device, shuffler (pass-through) and analyzer as real processes, for every multi-armed task of the
small config. Decide takes no features, users state their own ε_t where the task has per-user
levels; the counts reconcile exactly; bad ε_t, NaN and out-of-range rewards are refused over HTTP
with nothing stored; killing the shuffler and the analyzer mid-run loses and duplicates nothing,
and a restarted analyzer publishes exactly the model it had (one crash for these tasks and the
BCO ones: ``test_restart.py``)."""

from __future__ import annotations

import httpx
import pytest

from privbandit.launcher import Cluster
from tests.helpers import assert_feedback_refused, pass_through_demo, patience

pytestmark = pytest.mark.slow

USERS = 150
MAB_TASKS = ["small-ucb", "small-heldp", "small-heldp-l", "small-ldp-mab", "small-adar-ucb"]


@pytest.mark.parametrize("task_id", MAB_TASKS)
def test_mab_demo_reconciles_exactly(cluster: Cluster, task_id: str) -> None:
    out = pass_through_demo(cluster, task_id, USERS)
    assert out["env"] == "mab" and out["params"]["d"] is None
    assert 0 <= out["final_regret"] <= USERS
    per_user = out["privacy"]["per_user_epsilon"]
    if task_id == "small-heldp":  # choice:0,0.2,1,2,100 with ε_min = 1: users stated their ε_t
        assert per_user["distribution"] == "choice:0,0.2,1,2,100"
        # Each user declines with probability 1/5 and is used with probability 3/5; 150 users:
        # the fractions lie within 5 binomial standard errors (≤ 0.2 each).
        assert abs(per_user["fraction_declined"] - 0.2) < 5 * (0.2 * 0.8 / USERS) ** 0.5
        assert abs(per_user["fraction_used"] - 0.6) < 5 * (0.6 * 0.4 / USERS) ** 0.5
    elif task_id in ("small-ucb", "small-adar-ucb"):
        assert per_user is None


def test_refusals_over_http_store_nothing(cluster: Cluster) -> None:
    device = cluster.urls["device"]
    with httpx.Client(base_url=device, timeout=patience(10)) as c:
        before = c.get("/v1/status").json()
        assert c.post("/v1/tasks/small-heldp/decide",
                      json={"features": [[0.1, 0.2, 0.3]] * 5}).status_code == 422
        did = c.post("/v1/tasks/small-heldp/decide", json={}).json()["decision_id"]
        bad = [
            ('{"decision_id": "%s", "reward": 1.0, "epsilon": NaN}', "invalid_request"),
            ('{"decision_id": "%s", "reward": 1.0, "epsilon": -1}', "epsilon_out_of_range"),
            ('{"decision_id": "%s", "reward": 1.0, "epsilon": 1000}', "epsilon_out_of_range"),
            ('{"decision_id": "%s", "reward": NaN, "epsilon": 1}', "invalid_request"),
            ('{"decision_id": "%s", "reward": 1.5, "epsilon": 1}', "reward_out_of_range"),
        ]
        # Nothing stored, and the decision stayed open.
        assert_feedback_refused(c, "small-heldp", did, bad, before,
                                {"reward": 0.0, "epsilon": 2.0})
