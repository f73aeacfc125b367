"""Feedback: the sealed report carries exactly the estimator's inputs (randomised for noisy
tasks), errors change nothing, one feedback per decision, a decision survives a restart of the
device, and no feature vector reaches the device's disk."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from privbandit.shared.core.policies import randomizer_for
from privbandit.shared.crypto.hpke import unpack_report
from privbandit.shared.crypto.keystore import HpkeKeyStore
from privbandit.shared.settings import Settings
from tests.helpers import central_task, error, eventually, ldp_task, shuffle_task

from .support import D, decide, delivered, features, stack, status


async def test_feedback_queues_a_sealed_report_with_only_the_estimators_inputs(
    settings: Settings,
) -> None:
    """Central mode sends raw (x, r) inside HPKE: decrypting the uploaded report with the
    analyzer's key gives exactly the chosen arm's features and the reward, behind a fresh
    16-byte report id and nothing else."""
    rng = np.random.default_rng(4)
    async with stack(settings) as s:
        feats = features(rng)
        out = await decide(s.device, "cen", feats)
        resp = await s.device.post(
            "/v1/tasks/cen/feedback", json={"decision_id": out["decision_id"], "reward": 0.75}
        )
        assert resp.status_code == 202, resp.text
        assert resp.json()["queued"] is True
        await eventually(lambda: delivered(s, 1), what="upload")
        (report,) = s.shuffler.reports("cen")
        keys = HpkeKeyStore(Path(settings.data_dir) / "analyzer")
        plaintext = keys.open("cen", report)
        rand = randomizer_for(central_task().policy)
        report_id, row_bytes = unpack_report(plaintext, 8 * rand.width)
        assert len(report_id) == 16
        row = rand.from_bytes(row_bytes)
        np.testing.assert_array_equal(row[:D], np.asarray(feats[out["action"]]))
        assert row[D] == 0.75
        # The ciphertext is bound to its task: it does not open as another task's report.
        with pytest.raises(Exception, match="authentication"):
            keys.open("loc", report)
        st = await status(s.device)
        assert st["feedbacks"] == 1 and st["uploaded"] == 1 and st["outbox_pending"] == 0


async def test_randomized_reports_for_noisy_tasks(settings: Settings) -> None:
    """ldp and shuffle tasks send the randomizer's output, not the raw data."""
    rng = np.random.default_rng(5)
    async with stack(settings) as s:
        for task in ("loc", "shuf"):
            out = await decide(s.device, task, features(rng))
            resp = await s.device.post(
                f"/v1/tasks/{task}/feedback", json={"decision_id": out["decision_id"], "reward": 1}
            )
            assert resp.status_code == 202, resp.text
        await eventually(lambda: delivered(s, 2), what="upload")
        keys = HpkeKeyStore(Path(settings.data_dir) / "analyzer")
        for task, cfg in (("loc", ldp_task()), ("shuf", shuffle_task())):
            (report,) = s.shuffler.reports(task)
            rand = randomizer_for(cfg.policy)
            width = len(rand.to_bytes(np.zeros(rand.width)))
            _, row_bytes = unpack_report(keys.open(task, report), width)
            row = rand.from_bytes(row_bytes)
            assert row.shape == (rand.width,)
            if task == "shuf":
                assert set(np.unique(row)) <= {0.0, 1.0}


async def test_feedback_errors_change_nothing(settings: Settings) -> None:
    rng = np.random.default_rng(6)
    async with stack(settings) as s:
        out = await decide(s.device, "cen", features(rng))
        did = out["decision_id"]
        before = await status(s.device)
        cases = [
            ("cen", {"decision_id": "0" * 32, "reward": 1.0}, 404, "unknown_decision"),
            ("loc", {"decision_id": did, "reward": 1.0}, 404, "unknown_decision"),  # other task
            ("nope", {"decision_id": did, "reward": 1.0}, 404, "unknown_task"),
            ("cen", {"decision_id": did, "reward": 1.5}, 422, "reward_out_of_range"),
            ("cen", {"decision_id": did, "reward": -0.1}, 422, "reward_out_of_range"),
            ("cen", {"decision_id": did, "reward": "1"}, 422, "invalid_request"),
            ("cen", {"decision_id": did}, 422, "missing_reward"),  # BCO tasks take losses
            # Altered ids do not open: unknown, whatever was changed.
            ("cen", {"decision_id": did.swapcase(), "reward": 1.0}, 404, "unknown_decision"),
            ("cen", {"decision_id": did[:-1], "reward": 1.0}, 404, "unknown_decision"),
            ("cen", {"decision_id": did[:-2], "reward": 1.0}, 404, "unknown_decision"),
            ("cen", {"decision_id": did + "A", "reward": 1.0}, 404, "unknown_decision"),
            ("cen", {"decision_id": did[:40] + ("B" if did[40] != "B" else "C") + did[41:],
                     "reward": 1.0}, 404, "unknown_decision"),
            ("cen", {"decision_id": did + "=", "reward": 1.0}, 422, "invalid_request"),
            ("cen", {"decision_id": did[:30] + "/" + did[31:], "reward": 1.0}, 422,
             "invalid_request"),
            ("cen", {"decision_id": "", "reward": 1.0}, 422, "invalid_request"),
            ("cen", {"decision_id": "A" * 400_001, "reward": 1.0}, 422, "invalid_request"),
            ("cen", {"decision_id": did, "reward": 1.0, "x": 1}, 422, "invalid_request"),
        ]
        for task, body, code, err in cases:
            resp = await s.device.post(f"/v1/tasks/{task}/feedback", json=body)
            error(resp, code, err)
        nan = '{"decision_id": "' + did + '", "reward": NaN}'
        resp = await s.device.post("/v1/tasks/cen/feedback", content=nan,
                                   headers={"Content-Type": "application/json"})
        error(resp, 422)
        assert await status(s.device) == before
        # The decision is still open: a valid feedback now succeeds, a second one is a conflict.
        ok = await s.device.post("/v1/tasks/cen/feedback", json={"decision_id": did, "reward": 1})
        assert ok.status_code == 202, ok.text
        again = await s.device.post("/v1/tasks/cen/feedback", json={"decision_id": did,
                                                                    "reward": 0})
        error(again, 409, "decision_used")
        assert (await status(s.device))["feedbacks"] == 1


async def test_concurrent_double_feedback_counts_once(settings: Settings) -> None:
    rng = np.random.default_rng(7)
    async with stack(settings) as s:
        for _ in range(5):
            did = (await decide(s.device, "cen", features(rng)))["decision_id"]
            body = {"decision_id": did, "reward": 0.5}
            results = await asyncio.gather(
                *(s.device.post("/v1/tasks/cen/feedback", json=body) for _ in range(4))
            )
            codes = sorted(r.status_code for r in results)
            assert codes == [202, 409, 409, 409], codes
        await eventually(lambda: delivered(s, 5), what="uploads")
        assert len(s.shuffler.reports()) == 5
        assert (await status(s.device))["feedbacks"] == 5


async def test_no_feature_vector_reaches_the_device_disk(settings: Settings) -> None:
    """Decide writes nothing (the chosen arm's features are sealed in the decision id) and the
    queued report is HPKE-sealed: the raw bytes of the chosen vector appear in no file of the
    device's data directory, neither before nor after the feedback."""
    rng = np.random.default_rng(8)
    device_dir = Path(settings.data_dir) / "device"

    def on_disk(needle: bytes) -> list[str]:
        return [f.name for f in device_dir.iterdir() if f.is_file() and needle in f.read_bytes()]

    async with stack(settings) as s:
        feats = features(rng)
        out = await decide(s.device, "cen", feats)
        chosen = np.asarray(feats[out["action"]], dtype="<f8").tobytes()
        assert on_disk(b"") != [] and on_disk(chosen) == []
        resp = await s.device.post("/v1/tasks/cen/feedback", json={
            "decision_id": out["decision_id"], "reward": 0})
        assert resp.status_code == 202
        assert (await status(s.device))["outbox_pending"] + len(s.shuffler.reports()) == 1
        assert on_disk(chosen) == []


async def test_a_decision_survives_a_restart_of_the_device(settings: Settings) -> None:
    """Durable without a write: an id issued before a restart takes its feedback after it (the
    key that seals it is on disk), and only once."""
    rng = np.random.default_rng(9)
    async with stack(settings) as s:
        did = (await decide(s.device, "cen", features(rng)))["decision_id"]
    async with stack(settings) as s:
        body = {"decision_id": did, "reward": 0.5}
        assert (await s.device.post("/v1/tasks/cen/feedback", json=body)).status_code == 202
    async with stack(settings) as s:
        error(await s.device.post("/v1/tasks/cen/feedback", json=body), 409, "decision_used")
