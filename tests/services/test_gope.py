"""``adar-gope`` through the services (issue 9), in-process: the real analyzer and device (a
recording fake shuffler whose uploads the test posts to the analyzer, l = 1), real SQLite and HPKE.

- the analyzer publishes per phase the active arms, the design's support, weights and planned
  counts and the phase id (``PhaseModelMessage``), for the fixed arms the task's ``arm_seed``
  defines; decide takes no features and the device draws its arm from the design's support;
- the analyzer ends the phase after the planned number of counted reports and publishes the next
  (its active arms a subset of the last);
- it refuses, alone, a report naming an arm outside the current support, a phase not yet
  published, an arm index ≥ K, a reward outside [0, 1] or NaN; a late report (an earlier phase)
  whose arm is still in the support is counted into the current phase.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from privbandit.shared.core.policies import build_policy
from privbandit.shared.core.policies.gope_service import AdaRGOPEService, seeded_arms
from privbandit.shared.protocol.messages import BatchAck, EncryptedReport, PhaseModelMessage
from privbandit.shared.settings import Settings, TaskConfig
from tests.helpers import error, eventually, make_settings, privacy
from tests.services.analyzer.support import hpke_of
from tests.services.device.support import Stack, stack
from tests.services.support import post_each, sealed_row, stored_state

D, K = 3, 8
GOPE = TaskConfig.model_validate({
    "id": "gope", "threat_model": "central", "K": K,
    "policy": {"algo": "adar-gope", "d": D, "K": K, "arm_seed": 7, "epsilon": 1.0,
               "confidence_scale": 0.3}})


@pytest.fixture
def gope_settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path / "data", tasks=[GOPE])


async def model(s: Stack) -> PhaseModelMessage:
    return PhaseModelMessage.model_validate_json(
        (await s.analyzer.get("/v1/tasks/gope/model")).content)


async def post(s: Stack, reports: list[EncryptedReport]) -> BatchAck:
    return await post_each(s.analyzer, "gope", reports)


def test_the_task_defines_its_arms() -> None:
    policy = build_policy(GOPE.policy)
    assert isinstance(policy, AdaRGOPEService)
    assert policy.arms is not None
    assert np.array_equal(policy.arms, seeded_arms(K, D, 7))
    assert np.allclose(np.linalg.norm(policy.arms, axis=1), 1.0)
    with pytest.raises(ValueError, match="arm_seed"):
        TaskConfig.model_validate({"id": "g", "threat_model": "central", "K": K,
                                   "policy": {"algo": "adar-gope", "d": D}})
    with pytest.raises(ValueError, match="K"):
        TaskConfig.model_validate({**GOPE.model_dump(), "K": K + 1})


async def test_devices_draw_from_the_design_and_phases_end_on_schedule(
    gope_settings: Settings,
) -> None:
    async with stack(gope_settings) as s:
        m1 = await model(s)
        local = build_policy(GOPE.policy).model
        assert (m1.version, m1.phase) == (0, 1) and m1.active == list(range(K))
        assert m1.support == local.support.tolist() and m1.counts == local.counts.tolist()
        assert sum(m1.weights) == pytest.approx(1.0) and m1.length == sum(m1.counts)
        error(await s.device.post("/v1/tasks/gope/decide", json={"features": [[0.1] * D] * K}),
              422, "unexpected_features")
        plays = []
        for _ in range(12):
            resp = await s.device.post("/v1/tasks/gope/decide", json={})
            assert resp.status_code == 200, resp.text
            out = resp.json()
            assert out["action"] in m1.support and out["model_version"] == 0
            # drawn from the design: its propensity is π_1(action)
            assert out["propensity"] == pytest.approx(
                m1.weights[m1.support.index(out["action"])] / sum(m1.weights))
            plays.append(out)
            resp = await s.device.post("/v1/tasks/gope/feedback",
                                       json={"decision_id": out["decision_id"], "reward": 1.0})
            assert resp.status_code == 202, resp.text

        async def uploaded() -> bool:
            return len(s.shuffler.reports("gope")) >= 12
        await eventually(uploaded, what="12 reports uploaded")
        ack = await post(s, s.shuffler.reports("gope"))
        assert ack.counted == 1 and ack.model_version == 0
        # The rest of phase 1 from a sealed client, then phase 2 is published.
        hpke = await hpke_of(s.analyzer)
        rng = np.random.default_rng(0)
        arms = seeded_arms(K, D, 7)
        best = int(np.argmax(arms @ np.array([0.5, 0.5, 0.5])))
        rest = m1.length - 12
        rows = [[a, 1, float(a == best)] for a in rng.choice(m1.support, rest)]
        ack = await post(s, [sealed_row(hpke, GOPE, r) for r in rows[:-1]])
        assert ack.model_version == 0
        ack = await post(s, [sealed_row(hpke, GOPE, rows[-1])])
        assert ack.model_version == 1
        m2 = await model(s)
        assert m2.phase == 2 and set(m2.active) <= set(m1.active)
        assert m2.reports == m1.length
        report = await privacy(s.analyzer, "gope")
        assert (report.reports_counted, report.reports_refused) == (m1.length, 0)
        # A late report of phase 1 whose arm is still in phase 2's support is counted.
        ack = await post(s, [sealed_row(hpke, GOPE, [m2.support[0], 1, 0.5])])
        assert (ack.counted, ack.rejected) == (1, 0)
        assert stored_state(s, "gope")["late"] == 1


@pytest.mark.parametrize(("row", "why"), [
    ([K, 1, 1.0], "arm index beyond K"),
    (["in", 2, 1.0], "a phase not yet published"),
    (["in", 0, 1.0], "phase 0"),
    (["in", 1, 1.5], "reward above 1"),
    (["in", 1, -0.1], "reward below 0"),
    (["in", 1, float("nan")], "NaN reward"),
    (["outside", 1, 1.0], "an arm outside the design's support"),
])
async def test_analyzer_refuses_forged_reports_alone(
    gope_settings: Settings, row: list, why: str,
) -> None:
    async with stack(gope_settings) as s:
        hpke = await hpke_of(s.analyzer)
        m = await model(s)
        outside = sorted(set(range(K)) - set(m.support))
        assert outside, "the test needs an arm outside the phase-1 support"
        support_arm = m.support[0]
        # "in": an arm of the support; "outside": one of no design's support. (Arm 0 may be
        # either, depending on the design the solver finds.)
        row = [{"outside": outside[0], "in": support_arm}.get(v, v) if isinstance(v, str) else v
               for v in row]
        ack = await post(s, [sealed_row(hpke, GOPE, row)])
        assert (ack.counted, ack.rejected) == (0, 1), why
        report = await privacy(s.analyzer, "gope")
        assert (report.reports_counted, report.reports_refused) == (0, 1), why
        ack = await post(s, [sealed_row(hpke, GOPE, [support_arm, 1, 1.0])])  # the control
        assert (ack.counted, ack.rejected) == (1, 0), why


def test_state_round_trips_and_the_restored_policy_continues_identically() -> None:
    """The analyzer's stored state restores the phase, its sums and the arms exactly; fed the same
    rows with the same noise generator, the restored policy ends the phase identically."""
    a = build_policy(GOPE.policy, np.random.default_rng(1))
    m = a.model
    rows = np.array([[m.support[i % len(m.support)], 1, i % 2] for i in range(m.length - 3)],
                    dtype=float)
    a.ingest(rows)
    b = build_policy(GOPE.policy, np.random.default_rng(1))
    b.set_state(json.loads(json.dumps(a.get_state())))
    assert b.get_state() == a.get_state()
    a.rng, b.rng = np.random.default_rng(2), np.random.default_rng(2)
    tail = np.array([[m.support[0], 1, 1.0]] * 3)
    assert a.ingest(tail) == b.ingest(tail) == 3
    assert a.model.phase == b.model.phase == 2
    assert a.get_state() == b.get_state()


def test_device_draw_is_the_documented_inverse_cdf() -> None:
    """``PhaseModel.sample`` is protocol.md §4's rule as the independent client implements it."""
    from tests.interop import client

    m = build_policy(GOPE.policy).model
    message = {"support": m.support.tolist(), "weights": m.weights.tolist()}
    for u in np.random.default_rng(4).random(2000):
        assert m.sample(float(u)) == client.choose_phase_arm(message, float(u))
