"""Multi-armed tasks through the services (issue 8, item 5), in-process: the real analyzer and
device (a recording fake shuffler), real SQLite and HPKE.

- decide takes no features (``{}``) and answers from the cached arm model; features for a
  multi-armed task, or none for a linear one, are refused;
- feedback checks the reward against the task and the user's own ε_t against the task's range
  (NaN, negative, above ε_max, or stated for a task without per-user levels → 422, nothing stored,
  the decision stays open);
- the analyzer learns from what the device sent (ε_t included: the ledger's per-user fractions are
  those of the stated levels) and refuses, alone, a sealed report no honest device could send:
  wrong arm index, NaN, a reward outside [0, 1], a Tsallis-INF p below every published one.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import httpx
import numpy as np
import pytest

from privbandit.shared.core.policies import build_policy
from privbandit.shared.crypto.hpke import pack_report, seal
from privbandit.shared.protocol.messages import (
    ArmModelMessage,
    BatchAck,
    EncryptedReport,
    b64decode,
)
from privbandit.shared.settings import Settings, TaskConfig
from tests.helpers import auth, error, eventually, ldp_task, make_settings, privacy
from tests.services.analyzer.support import assert_row_refused_alone, batch, hpke_of
from tests.services.device.support import Stack, features, stack, status

K = 5


def mab_task(task_id: str, threat_model: str, **policy: object) -> TaskConfig:
    return TaskConfig.model_validate(
        {"id": task_id, "threat_model": threat_model, "K": K, "policy": {"K": K, **policy}})


HELDP = mab_task("heldp", "ldp", algo="heldp-ucb-b", epsilon=1.0,
                 epsilon_dist="choice:0,0.2,1,2,100", eps_min=1.0)
TSALLIS = mab_task("tsallis", "ldp", algo="ldp-mab", epsilon=2.0)
ADAR = mab_task("adar", "central", algo="adar-ucb")
UCB = mab_task("ucb", "none", algo="ucb")
LINEAR = ldp_task()
TASKS = [HELDP, TSALLIS, ADAR, UCB, LINEAR]


@pytest.fixture
def mab_settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path / "data", tasks=TASKS)


async def decide(s: Stack, task: str) -> dict:
    resp = await s.device.post(f"/v1/tasks/{task}/decide", json={})
    assert resp.status_code == 200, resp.text
    return resp.json()


async def feedback(s: Stack, task: str, did: str, reward: object, **extra: object
                   ) -> httpx.Response:
    # Raw JSON so that NaN can be sent as the literal a broken client would write.
    body = json.dumps({"decision_id": did, "reward": reward, **extra})
    return await s.device.post(f"/v1/tasks/{task}/feedback", content=body,
                               headers={"content-type": "application/json"})


async def test_decide_takes_no_features(mab_settings: Settings) -> None:
    async with stack(mab_settings) as s:
        for cfg in (HELDP, TSALLIS, ADAR, UCB):
            out = await decide(s, cfg.id)
            assert 0 <= out["action"] < K
            # Tsallis-INF samples (version 0: uniform); the index and episode models do not.
            assert out["propensity"] == pytest.approx(1 / K if cfg is TSALLIS else 1.0)
        error(await s.device.post("/v1/tasks/heldp/decide",
                                  json={"features": [[0.1]] * K}), 422, "unexpected_features")
        error(await s.device.post("/v1/tasks/loc/decide", json={}), 422, "missing_features")


async def test_feedback_refuses_bad_levels_and_rewards_and_stores_nothing(
    mab_settings: Settings,
) -> None:
    async with stack(mab_settings) as s:
        did = (await decide(s, "heldp"))["decision_id"]
        refused = [
            ({"epsilon": float("nan")}, 1.0, "invalid_request"),
            ({"epsilon": -0.1}, 1.0, "epsilon_out_of_range"),
            ({"epsilon": 100.5}, 1.0, "epsilon_out_of_range"),
            ({"epsilon": 1.0}, 1.5, "reward_out_of_range"),
            ({"epsilon": 1.0}, -0.01, "reward_out_of_range"),
            ({"epsilon": 1.0}, float("nan"), "invalid_request"),
            ({"epsilon": "1"}, 1.0, "invalid_request"),
        ]
        for extra, reward, code in refused:
            error(await feedback(s, "heldp", did, reward, **extra), 422, code)
        # ε_t for a task without per-user levels.
        other = (await decide(s, "ucb"))["decision_id"]
        error(await feedback(s, "ucb", other, 1.0, epsilon=1.0), 422, "unexpected_epsilon")
        # A linear task's bounded reward is checked the same way.
        feats = features(np.random.default_rng(0))
        lin = (await s.device.post("/v1/tasks/loc/decide", json={"features": feats})).json()
        error(await feedback(s, "loc", lin["decision_id"], 1.5), 422, "reward_out_of_range")
        error(await feedback(s, "loc", lin["decision_id"], 1.0, epsilon=1.0), 422,
              "unexpected_epsilon")
        st = await status(s.device)
        assert st["feedbacks"] == 0 and st["outbox_pending"] == 0
        assert s.shuffler.reports() == []
        # The decision stayed open: a valid feedback is taken.
        resp = await feedback(s, "heldp", did, 1.0, epsilon=2.0)
        assert resp.status_code == 202, resp.text
        error(await feedback(s, "heldp", did, 1.0, epsilon=2.0), 409, "decision_used")


async def deliver(s: Stack, task: str, n: int) -> BatchAck:
    """Post the shuffler's first n reports of ``task`` to the analyzer, one batch each (l = 1);
    the ack of the last."""
    await eventually(lambda: _have(s, task, n), what=f"{n} reports of {task} uploaded")
    ack = None
    for report in [r for t, rs in s.shuffler.uploads for r in rs if t == task][:n]:
        resp = await s.analyzer.post(f"/v1/tasks/{task}/batches", json=batch([report]),
                                     headers=auth())
        assert resp.status_code == 200, resp.text
        ack = BatchAck.model_validate_json(resp.content)
    assert ack is not None
    return ack


async def _have(s: Stack, task: str, n: int) -> bool:
    return sum(len(rs) for t, rs in s.shuffler.uploads if t == task) >= n


async def test_users_state_their_own_levels(mab_settings: Settings) -> None:
    """Levels 0 (declines), 0.2 (below ε_min = 1: dropped), 2, 100 and the task's default 1."""
    levels = [0.0, 0.2, 2.0, 100.0, None]
    async with stack(mab_settings) as s:
        for eps in levels:
            did = (await decide(s, "heldp"))["decision_id"]
            extra = {} if eps is None else {"epsilon": eps}
            resp = await feedback(s, "heldp", did, 1.0, **extra)
            assert resp.status_code == 202, resp.text
        ack = await deliver(s, "heldp", len(levels))
        assert ack.model_version == len(levels)
        report = await privacy(s.analyzer, "heldp")
        assert report.reports_counted == len(levels) and report.reports_refused == 0
        per_user = report.ledger.per_user_epsilon
        assert per_user is not None
        assert per_user["fraction_declined"] == pytest.approx(1 / 5)
        assert per_user["fraction_used"] == pytest.approx(3 / 5)  # 2, 100 and the default 1
        model = ArmModelMessage.model_validate_json(
            (await s.analyzer.get("/v1/tasks/heldp/model")).content)
        assert model.version == len(levels) and model.indices is not None


async def test_tsallis_reports_carry_the_device_models_probability(
    mab_settings: Settings,
) -> None:
    async with stack(mab_settings) as s:
        for _ in range(3):
            did = (await decide(s, "tsallis"))["decision_id"]
            assert (await feedback(s, "tsallis", did, 1.0)).status_code == 202
        await deliver(s, "tsallis", 3)
        model = ArmModelMessage.model_validate_json(
            (await s.analyzer.get("/v1/tasks/tsallis/model")).content)
        assert model.probabilities is not None and model.version == 3
        assert sum(model.probabilities) == pytest.approx(1.0)
        assert (await privacy(s.analyzer, "tsallis")).reports_refused == 0


def sealed(hpke: object, task: TaskConfig, row: list[float]) -> EncryptedReport:
    """A correctly sealed report of ``task`` holding exactly ``row`` (packed by the task's
    struct layout, bypassing every device-side check)."""
    rand = build_policy(task.policy).randomizer
    data = struct.pack(rand._format, int(row[0]), *row[1:-1],  # noqa: SLF001
                       int(row[-1]) if rand.value_code == "B" else row[-1])
    return seal(b64decode(hpke.public_key), hpke.key_id, task.id,  # type: ignore[attr-defined]
                pack_report(data)[1])


@pytest.mark.parametrize(("task", "row", "why"), [
    (ADAR, [7, 1.0], "arm index beyond K"),
    (ADAR, [0, float("nan")], "NaN reward"),
    (ADAR, [0, 1.5], "reward above 1 for a bounded task"),
    (UCB, [1, -0.5], "reward below 0 for a bounded task"),
    (HELDP, [0, float("nan"), 1], "NaN level"),
    (HELDP, [0, 101.0, 1], "level above ε_max"),
    (HELDP, [0, 0.0, 1], "a declined report that carries a value"),
    (TSALLIS, [0, 0.0, 0.1], "a probability no published model gave"),
    (TSALLIS, [0, float("nan"), 0.1], "NaN probability"),
    (TSALLIS, [0, 0.2, float("nan")], "NaN value"),
])
async def test_analyzer_refuses_forged_reports_alone(
    mab_settings: Settings, task: TaskConfig, row: list[float], why: str,
) -> None:
    async with stack(mab_settings) as s:
        await assert_row_refused_alone(s.analyzer, task, row, why, sealed)


async def test_an_honest_tsallis_probability_is_counted(mab_settings: Settings) -> None:
    """The control of the forged case: p = 1/K (the version-0 model's) is counted."""
    async with stack(mab_settings) as s:
        hpke = await hpke_of(s.analyzer)
        resp = await s.analyzer.post(
            "/v1/tasks/tsallis/batches", json=batch([sealed(hpke, TSALLIS, [0, 1 / K, 0.1])]),
            headers=auth())
        ack = BatchAck.model_validate_json(resp.content)
        assert (ack.counted, ack.rejected) == (1, 0)
