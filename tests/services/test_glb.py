"""``ldp-glb`` through the services (issue 9), in-process: the real analyzer and device (a
recording fake shuffler whose uploads the test posts to the analyzer, l = 1), real SQLite and HPKE.

- the model message carries θ̂ (the OGD iterate) beside (θ̃, V, β); the OGD step is taken when a
  model is published, and θ̂ stays in the ball of radius S;
- the device anchors a report at the θ̂ of the model its decision was made with and names that
  model's version, even when a newer model arrived before the feedback (checked on the decrypted
  rows, at a budget whose noise is small enough to see the clean values);
- the analyzer counts such a stale report (delayed OGD) and refuses, alone, a sealed report no
  honest device could send: a version never published, an entry outside the admissible box, NaN.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.special import expit

from privbandit.shared.core.policies import build_policy
from privbandit.shared.crypto.hpke import row_length, unpack_report
from privbandit.shared.crypto.keystore import HpkeKeyStore
from privbandit.shared.protocol.messages import (
    BatchAck,
    EncryptedReport,
    GLBModelMessage,
)
from privbandit.shared.settings import Settings, TaskConfig
from tests.helpers import eventually, make_settings, privacy
from tests.services.analyzer.support import assert_row_refused_alone
from tests.services.device.support import Stack, features, stack, status
from tests.services.support import post_each, sealed_row, stored_state

D, K = 3, 4
# ε = 2000: σ ≈ 0.02, so each clean entry is visible in a decrypted row (within 7σ).
GLB = TaskConfig.model_validate({
    "id": "glb", "threat_model": "ldp", "K": K,
    "policy": {"algo": "ldp-glb", "d": D, "S": 2.0, "epsilon": 2000.0, "update_every": 2,
               "ogd_step": 0.5, "regularizer": "clip"}})
SIGMA = build_policy(GLB.policy).randomizer.sigma


@pytest.fixture
def glb_settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path / "data", tasks=[GLB])


async def decide(s: Stack, rng: np.random.Generator) -> tuple[dict, np.ndarray]:
    feats = features(rng, K, D)
    resp = await s.device.post("/v1/tasks/glb/decide", json={"features": feats})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    return out, np.asarray(feats[out["action"]])


async def feedback(s: Stack, did: str, reward: float) -> None:
    resp = await s.device.post("/v1/tasks/glb/feedback",
                               json={"decision_id": did, "reward": reward})
    assert resp.status_code == 202, resp.text


async def deliver(s: Stack, start: int, n: int) -> BatchAck:
    """Post the shuffler's reports start … start+n−1, one batch each; the last ack."""
    async def have() -> bool:
        return len(s.shuffler.reports("glb")) >= start + n
    await eventually(have, what=f"{start + n} reports uploaded")
    return await post_each(s.analyzer, "glb", s.shuffler.reports("glb")[start:start + n])


async def model(s: Stack) -> GLBModelMessage:
    return GLBModelMessage.model_validate_json(
        (await s.analyzer.get("/v1/tasks/glb/model")).content)


def opened_row(s: Stack, report: EncryptedReport) -> np.ndarray:
    """A report's row as the analyzer decodes it (its own HPKE key, the task's row format)."""
    rand = build_policy(GLB.policy).randomizer
    keys = HpkeKeyStore(Path(s.settings.data_dir) / "analyzer")
    _, data = unpack_report(keys.open("glb", report), row_length(rand))
    return rand.from_bytes(data)


def clean_row(x: np.ndarray, reward: float, theta_hat: np.ndarray) -> np.ndarray:
    """(upper(x xᵀ), z x, (g(z) − y) x), z = ⟨x, θ̂⟩: Zheng Alg. 3 line 9 before noise."""
    iu = np.triu_indices(D)
    z = float(x @ theta_hat)
    return np.concatenate([np.outer(x, x)[iu], z * x, (expit(z) - reward) * x])


async def test_reports_are_anchored_at_the_deciding_models_theta_hat(
    glb_settings: Settings,
) -> None:
    rng = np.random.default_rng(3)
    async with stack(glb_settings) as s:
        m0 = await model(s)
        assert m0.version == 0 and m0.theta_hat == [0.0] * D
        old, x_old = await decide(s, rng)  # decided under v0; its feedback comes after v1
        plays = [await decide(s, rng) for _ in range(2)]
        for out, _ in plays:
            await feedback(s, out["decision_id"], 1.0)
        ack = await deliver(s, 0, 2)
        assert ack.model_version == 1 and ack.counted == 1
        m1 = await model(s)
        theta_hat = np.asarray(m1.theta_hat)
        assert 0 < np.linalg.norm(theta_hat) <= 2.0 + 1e-12  # the OGD step moved θ̂, inside W
        assert m1.reports == 2

        async def device_has_v1() -> bool:
            return (await status(s.device))["tasks"]["glb"] == 1
        await eventually(device_has_v1, what="device holds v1")
        await feedback(s, old["decision_id"], 0.0)
        new, x_new = await decide(s, rng)
        assert new["model_version"] == 1
        await feedback(s, new["decision_id"], 1.0)
        await eventually(lambda: _have(s, 4), what="4 reports uploaded")
        reports = s.shuffler.reports("glb")
        rows = [opened_row(s, r) for r in reports]
        assert [int(r[0]) for r in rows] == [0, 0, 0, 1]
        for row, x, reward, anchor in (
            (rows[2], x_old, 0.0, np.zeros(D)),  # stale: anchored at θ̂_0, not θ̂_1
            (rows[3], x_new, 1.0, theta_hat),
        ):
            assert np.abs(row[1:] - clean_row(x, reward, anchor)).max() < 7 * SIGMA
        ack = await deliver(s, 2, 2)
        assert ack.model_version == 2
        state = stored_state(s, "glb")
        assert state["stale"] == 1 and state["reports"] == 4
        assert state["model"]["theta_hat"] == state["theta_hat"]
        report = await privacy(s.analyzer, "glb")
        assert (report.reports_counted, report.reports_refused) == (4, 0)


async def _have(s: Stack, n: int) -> bool:
    return len(s.shuffler.reports("glb")) >= n


WIDTH = D * (D + 1) // 2 + 2 * D


def _row(version: int, **entries: float) -> list[float]:
    row = [float(version)] + [0.0] * WIDTH
    for index, value in entries.items():
        row[1 + int(index[1:])] = value
    return row


@pytest.mark.parametrize(("row", "why"), [
    (_row(1), "a version never published"),
    (_row(0, e0=1.0 + 8 * SIGMA), "x_1² above L² + τσ"),
    (_row(0, e6=2.0 * 1.0 + 8 * SIGMA), "z x_1 above L² S + τσ"),
    (_row(0, e9=-1.0 - 8 * SIGMA), "a gradient entry below −L − τσ"),
    (_row(0, e7=float("nan")), "NaN"),
])
async def test_analyzer_refuses_forged_reports_alone(
    glb_settings: Settings, row: list[float], why: str,
) -> None:
    async with stack(glb_settings) as s:
        hpke = await assert_row_refused_alone(s.analyzer, GLB, row, why, sealed_row)
        # The control: the box's edges themselves are admissible.
        edge = _row(0, e0=1.0 + 6 * SIGMA, e6=2.0, e9=-1.0)
        ack = await post_each(s.analyzer, "glb", [sealed_row(hpke, GLB, edge)])
        assert (ack.counted, ack.rejected) == (1, 0), why


def test_state_round_trips_with_theta_hat_and_versions() -> None:
    rng = np.random.default_rng(5)
    a = build_policy(GLB.policy, np.random.default_rng(0))
    x = rng.normal(size=(5, D))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    for k in range(5):  # two publications, one report pending
        a.ingest(a.randomizer.randomize(x[k:k + 1], np.array([k % 2]), rng))
    assert a.model.version == 2 and a.randomizer.version == 2
    b = build_policy(GLB.policy, np.random.default_rng(0))
    b.set_state(json.loads(json.dumps(a.get_state())))
    assert b.get_state() == a.get_state()
    assert np.array_equal(b.model.theta_hat, a.randomizer.anchor)
    assert b.randomizer.version == 2


def test_device_ignores_a_model_whose_theta_hat_leaves_the_ball() -> None:
    """The report is calibrated for ‖θ̂‖ ≤ S only: a model with θ̂ outside is not installed."""
    from privbandit.services.device.cache import ModelCache

    base = {"task": "glb", "version": 3, "theta": [0.0] * D, "V": np.eye(D).tolist(),
            "beta": 1.0, "reports": 6}
    inside = GLBModelMessage(**base, theta_hat=[2.0, 0.0, 0.0])  # ‖θ̂‖ = S
    outside = GLBModelMessage(**base, theta_hat=[2.0, 0.1, 0.0])
    assert ModelCache._build(GLB, inside) is not None  # noqa: SLF001
    assert ModelCache._build(GLB, outside) is None  # noqa: SLF001
