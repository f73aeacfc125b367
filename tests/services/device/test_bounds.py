"""The device's bounds (issue 13): a full outbox refuses feedback with 429 before anything is
stored, keeping the decision open for a retry; undecided decisions expire in minutes (they are
not stored at all); tombstones of used ones are pruned in chunks, never before the id expires."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import numpy as np
import pydantic
import pytest

from privbandit.services.device.decision_ids import uid_floor
from privbandit.services.device.store import DeviceStore
from privbandit.shared.settings import DeviceTiming, Limits
from tests.helpers import FAST_DEVICE, error, eventually, make_settings

from .support import FakeShuffler, decide, delivered, features, stack, status


async def test_a_full_outbox_refuses_feedback_with_429_and_the_decision_stays_open(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path / "data", limits=Limits(outbox_reports=2, retry_after=2))
    shuffler = FakeShuffler(status=503)  # outage: the outbox only fills
    rng = np.random.default_rng(1)
    async with stack(settings, shuffler) as s:
        ids = [(await decide(s.device, "cen", features(rng)))["decision_id"] for _ in range(3)]
        for did in ids[:2]:
            resp = await s.device.post("/v1/tasks/cen/feedback",
                                       json={"decision_id": did, "reward": 0.5})
            assert resp.status_code == 202, resp.text
        resp = await s.device.post("/v1/tasks/cen/feedback",
                                   json={"decision_id": ids[2], "reward": 0.5})
        error(resp, 429, "outbox_full")
        assert resp.headers["Retry-After"] == "2"
        st = await status(s.device)
        assert (st["feedbacks"], st["outbox_pending"]) == (2, 2)  # nothing of it stored
        metrics = (await s.device.get("/metrics")).text
        assert 'privbandit_device_requests_rejected_total{code="outbox_full"} 1.0' in metrics

        # The shuffler is back: the outbox drains and the same decision takes its feedback.
        shuffler.status = 202
        await eventually(lambda: delivered(s, 2), what="outbox drained")
        resp = await s.device.post("/v1/tasks/cen/feedback",
                                   json={"decision_id": ids[2], "reward": 0.5})
        assert resp.status_code == 202, resp.text
        await eventually(lambda: delivered(s, 3), what="third report uploaded")
        assert len(shuffler.reports("cen")) == 3


async def test_concurrent_feedbacks_cannot_overfill_the_outbox(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", limits=Limits(outbox_reports=3))
    rng = np.random.default_rng(2)
    async with stack(settings, FakeShuffler(status=503)) as s:
        ids = [(await decide(s.device, "cen", features(rng)))["decision_id"] for _ in range(8)]
        answers = await asyncio.gather(*(
            s.device.post("/v1/tasks/cen/feedback", json={"decision_id": d, "reward": 1.0})
            for d in ids
        ))
        codes = sorted(a.status_code for a in answers)
        assert codes == [202] * 3 + [429] * 5
        assert (await status(s.device))["outbox_pending"] == 3


def test_undecided_decisions_expire_in_minutes_and_tombstones_outlive_them() -> None:
    timing = DeviceTiming()
    assert timing.unused_decision_ttl <= 600
    assert timing.used_decision_ttl >= timing.unused_decision_ttl
    # A tombstone forgotten while its id still opens would let the id take a second feedback.
    with pytest.raises(pydantic.ValidationError, match="must be at least unused_decision_ttl"):
        DeviceTiming(unused_decision_ttl=120, used_decision_ttl=60)


async def test_an_undecided_decision_expires_and_its_feedback_is_unknown(tmp_path: Path) -> None:
    timing = FAST_DEVICE.model_copy(update={"unused_decision_ttl": 0.3, "prune_interval": 300})
    settings = make_settings(tmp_path / "data", device_timing=timing)
    rng = np.random.default_rng(3)
    async with stack(settings) as s:
        used = (await decide(s.device, "cen", features(rng)))["decision_id"]
        resp = await s.device.post("/v1/tasks/cen/feedback",
                                   json={"decision_id": used, "reward": 1.0})
        assert resp.status_code == 202
        stale = (await decide(s.device, "cen", features(rng)))["decision_id"]
        await asyncio.sleep(0.6)  # twice the TTL
        resp = error(await s.device.post("/v1/tasks/cen/feedback",
                                         json={"decision_id": stale, "reward": 1.0}),
                     404, "unknown_decision")
        assert "expired" in resp.message, resp
        # An answered decision's tombstone lives an hour: a late repeat is still told 409.
        error(await s.device.post("/v1/tasks/cen/feedback",
                                  json={"decision_id": used, "reward": 1.0}),
              409, "decision_used")
        assert (await status(s.device))["feedbacks"] == 1


async def test_a_pruned_tombstone_never_lets_its_id_count_twice(tmp_path: Path) -> None:
    """Once a used decision's tombstone is pruned (after ``used_decision_ttl``), its id is past
    ``unused_decision_ttl`` too: a replay is 404, never a second 202."""
    timing = FAST_DEVICE.model_copy(update={
        "unused_decision_ttl": 0.3, "used_decision_ttl": 0.5, "prune_interval": 0.05})
    settings = make_settings(tmp_path / "data", device_timing=timing)
    rng = np.random.default_rng(4)
    async with stack(settings) as s:
        used = (await decide(s.device, "cen", features(rng)))["decision_id"]
        body = {"decision_id": used, "reward": 1.0}
        assert (await s.device.post("/v1/tasks/cen/feedback", json=body)).status_code == 202

        async def pruned() -> bool:
            n = await s.app.state.runtime.store.run(
                lambda conn: conn.execute("SELECT COUNT(*) FROM used_decisions").fetchone()[0])
            return n == 0

        await eventually(pruned, timeout=5, what="the tombstone pruned")
        error(await s.device.post("/v1/tasks/cen/feedback", json=body), 404, "unknown_decision")
        assert (await status(s.device))["feedbacks"] == 1


async def test_pruning_forgets_every_old_tombstone_in_chunks_and_keeps_the_rest(
    tmp_path: Path,
) -> None:
    store = DeviceStore(tmp_path / "device.sqlite3")
    store.start()
    now_ms = int(time.time() * 1000)
    # Tombstone ids as ``decision_ids`` makes them: the issue time in ms, then random bytes.
    old = [uid_floor(now_ms - 7_200_000 + i)[:6] + os.urandom(6) for i in range(25)]
    new = [uid_floor(now_ms - 60_000 + i)[:6] + os.urandom(6) for i in range(4)]
    try:
        for uid in old + new:
            await store.complete_feedback(uid, "cen", "{}")

        def left(conn: object) -> list[bytes]:
            return [bytes(r[0]) for r in conn.execute(  # type: ignore[attr-defined]
                "SELECT id FROM used_decisions ORDER BY id").fetchall()]

        # Older than an hour: the 25 two-hour-old tombstones go, four at a time.
        assert await store.prune_decisions(3600, chunk=4) == 25
        assert await store.run(left) == sorted(new)
        assert await store.prune_decisions(3600) == 0
        assert await store.prune_decisions(30, chunk=3) == 4
        assert await store.run(left) == []
    finally:
        await store.stop()
        store.close()
