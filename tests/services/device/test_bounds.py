"""The device's bounds (issue 13): a full outbox refuses feedback with 429 before anything is
stored, keeping the decision open for a retry; undecided decisions expire in minutes, pruned
often enough, in chunks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from services.device.runtime import prune_every
from services.device.store import DeviceStore
from shared.settings import DeviceTiming, Limits
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


def test_undecided_decisions_expire_in_minutes_and_are_pruned_often_enough(
    tmp_path: Path,
) -> None:
    timing = DeviceTiming()
    assert timing.unused_decision_ttl <= 600
    settings = make_settings(tmp_path, device_timing=timing)
    assert prune_every(settings) <= timing.unused_decision_ttl / 10
    # A long prune interval does not let undecided decisions outlive 1.1 × their TTL.
    slow = DeviceTiming(unused_decision_ttl=120, prune_interval=3600)
    assert prune_every(make_settings(tmp_path, device_timing=slow)) == 12


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
        await asyncio.sleep(0.6)  # twice the TTL; the pruner runs every 0.03 s

        async def forgotten() -> bool:
            resp = await s.device.post("/v1/tasks/cen/feedback",
                                       json={"decision_id": stale, "reward": 1.0})
            return resp.status_code == 404

        await eventually(forgotten, timeout=5, what="the undecided decision pruned")
        error(await s.device.post("/v1/tasks/cen/feedback",
                                  json={"decision_id": stale, "reward": 1.0}),
              404, "unknown_decision")
        # An answered decision's tombstone lives an hour: a repeat is still told 409.
        error(await s.device.post("/v1/tasks/cen/feedback",
                                  json={"decision_id": used, "reward": 1.0}),
              409, "decision_used")


async def test_pruning_forgets_every_expired_decision_in_chunks_and_keeps_the_rest(
    tmp_path: Path,
) -> None:
    store = DeviceStore(tmp_path / "device.sqlite3")
    store.start()
    try:
        x = np.zeros(3)
        for i in range(25):
            await store.add_decision(f"old-{i}", "cen", x)
        for i in range(7):
            await store.add_decision(f"used-{i}", "cen", x)
            await store.complete_feedback(f"used-{i}", "cen", "{}")
        await asyncio.sleep(0.2)
        for i in range(4):
            await store.add_decision(f"new-{i}", "cen", x)
        # Undecided after 0.1 s, tombstones after an hour: the 25 old open decisions go.
        assert await store.prune_decisions(3600, 0.1, chunk=4) == 25

        def left(conn: object) -> list[tuple[str, int]]:
            return conn.execute(  # type: ignore[attr-defined]
                "SELECT id, x IS NULL FROM decisions ORDER BY id").fetchall()

        rows = await store.run(left)
        assert sorted(r[0] for r in rows) == sorted(
            [f"new-{i}" for i in range(4)] + [f"used-{i}" for i in range(7)])
        assert await store.prune_decisions(0.1, 3600, chunk=3) == 7  # now the tombstones
        assert len(await store.run(left)) == 4
        assert await store.prune_decisions(3600, 3600) == 0
    finally:
        await store.stop()
        store.close()
