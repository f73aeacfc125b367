"""BCO tasks through the services (issue 12, item 3), in-process: the real analyzer and device
(a recording fake shuffler, whose uploads the test posts to the analyzer one batch per report,
l = 1), real SQLite and HPKE.

- decide takes no features and answers the point(s) to play, inside the ball;
- feedback takes the user's losses, checked (finite, in [0, B], one per point, no reward) before
  anything is stored;
- the analyzer learns from what the device sent: the published point moves toward x*;
- a sealed report no honest device could send (u not a unit vector, a value outside the clean range
  widened by τσ, a version never published or no longer kept, NaN) is refused alone;
- an analyzer restarted on the same data directory has the same state and model.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import httpx
import numpy as np
import pytest

from privbandit.services.analyzer.app import create_app as create_analyzer
from privbandit.shared.core.policies import build_policy
from privbandit.shared.core.policies.bco_service import VERSION_HISTORY
from privbandit.shared.crypto.hpke import pack_report, seal
from privbandit.shared.protocol.messages import (
    BatchAck,
    BCOModelMessage,
    EncryptedReport,
    b64decode,
)
from privbandit.shared.settings import Settings, TaskConfig
from tests.helpers import auth, error, eventually, ldp_task, make_settings, privacy
from tests.services.analyzer.support import assert_row_refused_alone, batch, hpke_of
from tests.services.device.support import PAILLIER_TEST_BITS, Stack, running, stack, status

X_STAR = np.array([0.5, -0.3])
D2 = float((1.0 + np.linalg.norm(X_STAR)) ** 2)  # the bco-quadratic scale D² (R = 1)


def bco_task(task_id: str, algo: str, **policy: object) -> TaskConfig:
    return TaskConfig.model_validate({
        "id": task_id, "threat_model": "ldp" if algo.startswith("ldp") else "none",
        "policy": {"algo": algo, "d": 2, "lipschitz": 1.4, "smoothness": 0.9,
                   "strong_convexity": 0.8, "horizon": 2000, **policy}})


ONE = bco_task("one", "ldp-bco", epsilon=2.0)
TWO = bco_task("two", "ldp-bco2", epsilon=20.0)
PLAIN = bco_task("plain", "bco")
TASKS = [ONE, TWO, PLAIN, ldp_task()]


@pytest.fixture
def bco_settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path / "data", tasks=TASKS)


def loss(x: np.ndarray) -> float:
    """‖x − x*‖²/D², in [0, 1] on the unit ball (no noise: the test is about the plumbing)."""
    return float(np.sum((x - X_STAR) ** 2) / D2)


async def decide(s: Stack, task: str) -> dict:
    resp = await s.device.post(f"/v1/tasks/{task}/decide", json={})
    assert resp.status_code == 200, resp.text
    return resp.json()


async def feedback(s: Stack, task: str, body: dict) -> httpx.Response:
    return await s.device.post(f"/v1/tasks/{task}/feedback", content=json.dumps(body),
                               headers={"content-type": "application/json"})


async def play(s: Stack, task: str) -> None:
    out = await decide(s, task)
    losses = [loss(np.asarray(p)) for p in out["points"]]
    resp = await feedback(s, task, {"decision_id": out["decision_id"], "losses": losses})
    assert resp.status_code == 202, resp.text


async def deliver(s: Stack, task: str, start: int, n: int) -> BatchAck:
    """Post the shuffler's reports start … start+n−1 of ``task``, one batch each."""
    async def have() -> bool:
        return sum(len(rs) for t, rs in s.shuffler.uploads if t == task) >= start + n
    await eventually(have, what=f"{start + n} reports of {task} uploaded")
    reports = [r for t, rs in s.shuffler.uploads for r in rs if t == task][start:start + n]
    ack = None
    for report in reports:
        resp = await s.analyzer.post(f"/v1/tasks/{task}/batches", json=batch([report]),
                                     headers=auth())
        assert resp.status_code == 200, resp.text
        ack = BatchAck.model_validate_json(resp.content)
        assert ack.counted == 1, ack
    assert ack is not None
    return ack


async def model(s: Stack, task: str) -> BCOModelMessage:
    return BCOModelMessage.model_validate_json(
        (await s.analyzer.get(f"/v1/tasks/{task}/model")).content)


async def test_decide_answers_points_in_the_ball(bco_settings: Settings) -> None:
    async with stack(bco_settings) as s:
        for cfg, k in ((ONE, 1), (TWO, 2), (PLAIN, 1)):
            out = await decide(s, cfg.id)
            assert out["action"] == 0 and len(out["points"]) == k
            assert all(len(p) == 2 and np.linalg.norm(p) < 1.0 for p in out["points"])
        m = await model(s, "two")
        pts = (await decide(s, "two"))["points"]
        # y ± ρu: the two points are 2ρ apart, centred on y.
        assert np.linalg.norm(np.subtract(*pts)) == pytest.approx(2 * m.rho, rel=1e-9)
        assert np.mean(pts, axis=0) == pytest.approx(m.y, abs=1e-12)
        error(await s.device.post("/v1/tasks/one/decide", json={"features": [[0.1, 0.2]] * 2}),
              422, "unexpected_features")


async def test_bad_feedback_is_refused_and_nothing_stored(bco_settings: Settings) -> None:
    async with stack(bco_settings) as s:
        one = (await decide(s, "one"))["decision_id"]
        two = (await decide(s, "two"))["decision_id"]
        refused = [
            ("one", one, {"losses": [1.5]}, "loss_out_of_range"),
            ("one", one, {"losses": [-0.01]}, "loss_out_of_range"),
            ("one", one, {"losses": [float("nan")]}, "invalid_request"),
            ("one", one, {"losses": [float("inf")]}, "invalid_request"),
            ("one", one, {"losses": [0.1, 0.2]}, "wrong_loss_count"),
            ("two", two, {"losses": [0.1]}, "wrong_loss_count"),
            ("one", one, {"reward": 0.5}, "missing_losses"),
            ("one", one, {}, "missing_losses"),
            ("one", one, {"losses": [0.1], "reward": 0.5}, "missing_losses"),
            ("one", one, {"losses": [0.1], "epsilon": 1.0}, "unexpected_epsilon"),
            ("one", one, {"losses": []}, "invalid_request"),
            ("loc", one, {"losses": [0.1]}, "unexpected_losses"),
        ]
        for task, did, extra, code in refused:
            # NaN and inf as the literals a broken client would write
            body = json.dumps({"decision_id": did, **extra})
            resp = await s.device.post(f"/v1/tasks/{task}/feedback", content=body,
                                       headers={"content-type": "application/json"})
            error(resp, 422, code)
        st = await status(s.device)
        assert st["feedbacks"] == 0 and st["outbox_pending"] == 0
        assert s.shuffler.reports() == []
        # The decisions stayed open.
        assert (await feedback(s, "one", {"decision_id": one, "losses": [1.0]})).status_code \
            == 202
        assert (await feedback(s, "two", {"decision_id": two, "losses": [0.0, 1.0]})
                ).status_code == 202
        error(await feedback(s, "one", {"decision_id": one, "losses": [1.0]}), 409,
              "decision_used")


@pytest.mark.parametrize("task", [TWO, PLAIN])
async def test_a_bco_task_learns(bco_settings: Settings, task: TaskConfig) -> None:
    """300 users; the device plays from whatever model it holds (often an older version than
    the analyzer's latest: the analyzer rebuilds each report's gradient from that version). The
    published point starts at 0, ‖0 − x*‖ = 0.58; it must end within 0.25 of x* (seeded device)."""
    n = 300
    async with stack(bco_settings) as s:
        s.app.state.runtime.rng = np.random.default_rng(5)
        for i in range(n):
            await play(s, task.id)
            if i % 10 == 9:
                await deliver(s, task.id, i - 9, 10)
        m = await model(s, task.id)
        assert m.version == n and m.reports == n
        assert np.linalg.norm(np.asarray(m.y) - X_STAR) < 0.25, m.y
        report = await privacy(s.analyzer, task.id)
        assert (report.reports_counted, report.reports_refused) == (n, 0)


def sealed(hpke: object, task: TaskConfig, row: list[float]) -> EncryptedReport:
    """A correctly sealed report holding exactly ``row`` (bypassing every device-side check)."""
    rand = build_policy(task.policy).randomizer
    data = struct.pack(rand._format, int(row[0]), *row[1:])  # noqa: SLF001
    return seal(b64decode(hpke.public_key), hpke.key_id, task.id,  # type: ignore[attr-defined]
                pack_report(data)[1])


U = [0.6, 0.8]


@pytest.mark.parametrize(("task", "row", "why"), [
    (ONE, [0, 0.6, 0.7, 0.5], "u not a unit vector"),
    (ONE, [0, 0.0, 0.0, 0.5], "u = 0"),
    (ONE, [0, *U, float("nan")], "NaN value"),
    (ONE, [0, float("nan"), 0.8, 0.5], "NaN direction"),
    (ONE, [0, *U, 1e6], "value far above B + τσ"),
    (ONE, [0, *U, -1e3], "value far below −τσ"),
    (ONE, [1, *U, 0.5], "a version never published"),
    (PLAIN, [0, *U, 1.01], "a non-private value above B"),
    (TWO, [0, *U, 1.0], "a difference beyond 2ρG + τ·2ρσ"),
])
async def test_analyzer_refuses_forged_reports_alone(
    bco_settings: Settings, task: TaskConfig, row: list[float], why: str,
) -> None:
    async with stack(bco_settings) as s:
        hpke = await assert_row_refused_alone(s.analyzer, task, row, why, sealed)
        # The control: an honest row for version 0 is counted.
        honest = [0, *U, 0.5] if task is not TWO else [0, *U, 0.0]
        resp = await s.analyzer.post(f"/v1/tasks/{task.id}/batches",
                                     json=batch([sealed(hpke, task, honest)]), headers=auth())
        assert BatchAck.model_validate_json(resp.content).counted == 1


async def test_too_old_versions_are_refused_and_restart_keeps_state(
    bco_settings: Settings,
) -> None:
    """Once VERSION_HISTORY reports passed without one for version 0 it is no longer kept: its
    report is refused
    (counted as refused, the task goes on); a restarted analyzer has the same state and model."""
    async with stack(bco_settings) as s:
        hpke = await hpke_of(s.analyzer)
        for i in range(VERSION_HISTORY + 1):
            resp = await s.analyzer.post(
                "/v1/tasks/plain/batches",
                json=batch([sealed(hpke, PLAIN, [i, *U, 0.3])]), headers=auth())
            assert BatchAck.model_validate_json(resp.content).counted == 1
        resp = await s.analyzer.post("/v1/tasks/plain/batches",
                                     json=batch([sealed(hpke, PLAIN, [0, *U, 0.3])]),
                                     headers=auth())
        assert BatchAck.model_validate_json(resp.content).rejected == 1
        latest = VERSION_HISTORY + 1
        resp = await s.analyzer.post("/v1/tasks/plain/batches",
                                     json=batch([sealed(hpke, PLAIN, [latest, *U, 0.3])]),
                                     headers=auth())
        assert BatchAck.model_validate_json(resp.content).counted == 1
        before = (await s.analyzer.get("/v1/tasks/plain/model")).json()
    again = create_analyzer(bco_settings, paillier_key_bits=PAILLIER_TEST_BITS)
    async with running(again) as analyzer:
        assert (await analyzer.get("/v1/tasks/plain/model")).json() == before
        assert before["version"] == VERSION_HISTORY + 2
        restored = again.state.runtime.tasks["plain"].policy
        assert sorted(restored.history) == list(range(2, VERSION_HISTORY + 3))
        report = await privacy(analyzer, "plain")
        assert (report.reports_counted, report.reports_refused) == (VERSION_HISTORY + 2, 1)


async def test_the_version_fetched_after_an_outage_is_kept_through_the_backlog(
    bco_settings: Settings,
) -> None:
    """The e2e crash test's sequence, through the analyzer: users kept playing version a while
    it was down, a backlog of more than VERSION_HISTORY reports; back up, a few reports into
    the drain, the device fetches the then latest version b, whose reports were formed after
    the backlog and so arrive after it. The analyzer restarts once more in the middle of the
    drain. Every report is counted, none refused."""
    backlog = VERSION_HISTORY + 40

    async def post(analyzer: httpx.AsyncClient, hpke: object, version: int) -> None:
        resp = await analyzer.post("/v1/tasks/two/batches",
                                   json=batch([sealed(hpke, TWO, [version, *U, 0.0])]),
                                   headers=auth())
        ack = BatchAck.model_validate_json(resp.content)
        assert (ack.counted, ack.rejected) == (1, 0), (version, ack)

    async with stack(bco_settings) as s:
        hpke = await hpke_of(s.analyzer)
        for v in range(10):  # before the outage: the latest version each time
            await post(s.analyzer, hpke, v)
        a = 10
        for _ in range(10):
            await post(s.analyzer, hpke, a)
        b = (await model(s, "two")).version  # what the device fetches once it is back
        for _ in range(backlog // 2 - 10):
            await post(s.analyzer, hpke, a)
    again = create_analyzer(bco_settings, paillier_key_bits=PAILLIER_TEST_BITS)
    async with running(again) as analyzer:
        for _ in range(backlog - backlog // 2):
            await post(analyzer, hpke, a)
        latest = BCOModelMessage.model_validate_json(
            (await analyzer.get("/v1/tasks/two/model")).content).version
        assert latest - b > VERSION_HISTORY
        for _ in range(20):
            await post(analyzer, hpke, b)
        report = await privacy(analyzer, "two")
        assert (report.reports_counted, report.reports_refused) == (10 + backlog + 20, 0)
