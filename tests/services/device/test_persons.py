"""Returning users on the device (issue 24; services/device/persons.py): at most k reports per
person and period leave the device, under sequential and concurrent feedbacks of one person and
across restarts; the user key never leaves the device nor reaches its disk; a lost database is
not replaced without ``--forget-persons``, and no decision issued before the new one reports
(issue 40 item 7)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import numpy as np
import pytest

from privbandit.services.common.datadir import StartupRefused
from privbandit.services.device.persons import period_of, person_name, slot_for
from privbandit.services.device.store import DeviceStore, PersonSlot
from privbandit.shared.settings import Settings, TaskConfig
from tests.helpers import eventually, ldp_task, make_settings
from tests.services.device.support import decide, features, stack, status

USER = "alice-7f3a9c-returning-user-key"


def bounded(k: int, period: int | None = None, task_id: str = "loc") -> TaskConfig:
    base = ldp_task(task_id).model_dump()
    return TaskConfig.model_validate(
        {**base, "contributions": {"k": k, "period_seconds": period}})


async def feedback(s, task: str, rng: np.random.Generator, user: str | None) -> tuple[int, dict]:
    did = (await decide(s.device, task, features(rng)))["decision_id"]
    body: dict = {"decision_id": did, "reward": float(rng.uniform())}
    if user is not None:
        body["user"] = user
    resp = await s.device.post(f"/v1/tasks/{task}/feedback", json=body)
    return resp.status_code, resp.json()


async def test_first_k_reports_leave_the_rest_are_withheld(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    async with stack(make_settings(tmp_path, tasks=[bounded(3)])) as s:
        answers = [await feedback(s, "loc", rng, USER) for _ in range(5)]
        assert [code for code, _ in answers] == [202] * 5
        assert [a["withheld"] for _, a in answers] == [False] * 3 + [True] * 2
        assert [a["queued"] for _, a in answers] == [True] * 3 + [False] * 2
        other = await feedback(s, "loc", rng, "bob")  # another person has her own bound
        assert other[1]["queued"] is True
        await eventually(lambda: _delivered(s, 4), what="4 reports at the shuffler")
        st = await status(s.device)
        assert st["feedbacks"] == 4 and st["withheld"] == 2
        await asyncio.sleep(0.2)
        assert len(s.shuffler.reports("loc")) == 4  # never a fifth
        metrics = (await s.device.get("/metrics")).text
        assert 'device_feedbacks_withheld_total{task="loc"} 2.0' in metrics


async def _delivered(s, n: int) -> bool:
    return len(s.shuffler.reports()) >= n and (await status(s.device))["outbox_pending"] == 0


async def test_concurrent_feedbacks_of_one_person_queue_exactly_k(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    async with stack(make_settings(tmp_path, tasks=[bounded(4)])) as s:
        ids = [(await decide(s.device, "loc", features(rng)))["decision_id"] for _ in range(24)]
        resps = await asyncio.gather(*(
            s.device.post("/v1/tasks/loc/feedback",
                          json={"decision_id": d, "reward": 0.5, "user": USER}) for d in ids))
        assert all(r.status_code == 202 for r in resps)
        assert sum(not r.json()["withheld"] for r in resps) == 4
        await eventually(lambda: _delivered(s, 4), what="4 reports at the shuffler")
        st = await status(s.device)
        assert st["feedbacks"] == 4 and st["withheld"] == 20
        assert len(s.shuffler.reports("loc")) == 4


async def test_the_count_survives_a_restart(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    settings = make_settings(tmp_path, tasks=[bounded(2)])
    async with stack(settings) as s:
        for _ in range(2):
            assert (await feedback(s, "loc", rng, USER))[1]["queued"] is True
    async with stack(settings) as s:
        code, answer = await feedback(s, "loc", rng, USER)
        assert code == 202 and answer["withheld"] is True
        assert (await status(s.device))["withheld"] == 1


@pytest.mark.parametrize("user,code", [
    (None, "missing_user"),
    ("", None), ("has space", None), ("x" * 257, None), ("tab\tkey", None),
])
async def test_bad_or_missing_user_is_refused_alone(tmp_path: Path, user: str | None,
                                                    code: str | None) -> None:
    rng = np.random.default_rng(4)
    async with stack(make_settings(tmp_path, tasks=[bounded(2)])) as s:
        status_code, answer = await feedback(s, "loc", rng, user)
        assert status_code == 422
        if code is not None:
            assert answer["code"] == code
        # The refusal changed nothing: the same person still has her whole bound.
        assert (await feedback(s, "loc", rng, USER))[1]["queued"] is True
        assert (await status(s.device))["withheld"] == 0


async def test_an_unbounded_task_ignores_the_user_key(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    async with stack(make_settings(tmp_path, tasks=[ldp_task()])) as s:
        answers = [await feedback(s, "loc", rng, USER) for _ in range(4)]
        assert all(a["queued"] and not a["withheld"] for _, a in answers)


async def test_the_user_key_never_leaves_the_device(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Not in what the shuffler receives, nor in the metrics, the logs or the device's files."""
    rng = np.random.default_rng(6)
    caplog.set_level(logging.DEBUG)
    async with stack(make_settings(tmp_path, tasks=[bounded(2)])) as s:
        for _ in range(3):
            await feedback(s, "loc", rng, USER)
        await eventually(lambda: _delivered(s, 2), what="2 reports at the shuffler")
        metrics = (await s.device.get("/metrics")).text
    needle = USER.encode()
    assert all(needle not in body for _, body in s.shuffler.bodies)
    assert USER not in metrics and USER not in caplog.text
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert needle not in path.read_bytes(), path


def test_period_windows_and_names() -> None:
    assert period_of(None, 1e9) == 0
    assert period_of(3600, 7199.9) == 1 and period_of(3600, 7200.0) == 2
    key = bytes(32)
    assert person_name(key, "a", "u") != person_name(key, "b", "u")  # per task
    assert person_name(key, "a", "u") != person_name(bytes([1]) * 32, "a", "u")  # keyed
    cfg = bounded(3, period=86400)
    one, two = slot_for(cfg, key, "u", now=86400.0 * 5), slot_for(cfg, key, "u", now=86400.0 * 6)
    assert one is not None and two is not None and (one.period, two.period) == (5, 6)
    assert slot_for(ldp_task(), key, None) is None


async def test_a_new_period_has_a_new_bound_and_old_ones_are_pruned(tmp_path: Path) -> None:
    store = DeviceStore(tmp_path / "device.sqlite3")
    store.start()
    try:
        name = person_name(store.person_key, "loc", USER)
        seqs = []
        for i in range(3):
            seqs.append(await store.complete_feedback(
                bytes([i]) * 12, "loc", "{}", slot=PersonSlot(name, 7, 2)))
        assert [s is None for s in seqs] == [False, False, True]
        assert await store.complete_feedback(bytes([9]) * 12, "loc", "{}",
                                             slot=PersonSlot(name, 8, 2)) is not None
        assert await store.prune_periods({"loc": 8}) == 1
        assert await store.person_reports("loc", name, 7) == 0
        assert await store.person_reports("loc", name, 8) == 1
    finally:
        await store.stop()
        store.close()
    reopened = DeviceStore(tmp_path / "device.sqlite3")
    assert reopened.person_key == store.person_key  # the key lives with the counts
    assert reopened.counters.withheld == 1
    reopened.close()


def lose_database(settings: Settings) -> Path:
    """The device's database (and its WAL and index) deleted, as a lost disk would."""
    db = Path(settings.data_dir) / "device" / "device.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)
    return db


async def used_and_open(s, rng: np.random.Generator) -> tuple[str, str]:
    """Two decisions: one whose feedback was queued (used), one still open."""
    used = (await decide(s.device, "loc", features(rng)))["decision_id"]
    resp = await s.device.post("/v1/tasks/loc/feedback",
                               json={"decision_id": used, "reward": 0.5, "user": USER})
    assert resp.status_code == 202 and resp.json()["queued"] is True
    return used, (await decide(s.device, "loc", features(rng)))["decision_id"]


async def test_init_alone_does_not_replace_a_database_with_per_person_counts(
    tmp_path: Path,
) -> None:
    """Issue 40 item 7: a lost database held the per-person counts; ``--init`` alone refuses,
    naming it and ``--forget-persons``. Said in so many words, the device starts on a new
    database: the counts start again at 0 (what the operator accepted), and no decision issued
    before it takes feedback, so a used decision's report is never queued twice."""
    rng = np.random.default_rng(7)
    settings = make_settings(tmp_path, tasks=[bounded(2)])
    async with stack(settings) as s:
        used, still_open = await used_and_open(s, rng)
    db = lose_database(settings)
    with pytest.raises(StartupRefused, match="--init --forget-persons") as refused:
        async with stack(settings, init=True):
            pass
    assert str(db) in str(refused.value) and "per-person contribution counts" in str(refused.value)
    assert not db.exists()
    async with stack(settings, init=True, forget_persons=True) as s:
        for did in (used, still_open):
            resp = await s.device.post("/v1/tasks/loc/feedback",
                                       json={"decision_id": did, "reward": 0.5, "user": USER})
            assert resp.status_code == 404, resp.text
            assert "issued before this device's database was made" in resp.json()["message"]
        answers = [await feedback(s, "loc", rng, USER) for _ in range(3)]
        # Two more reports of a person who had given one: the cost --forget-persons accepts.
        assert [a["queued"] for _, a in answers] == [True, True, False]


async def test_a_used_decision_does_not_report_again_after_a_lost_database(
    tmp_path: Path,
) -> None:
    """Without a per-person bound ``--init`` alone replaces a lost database; the decisions
    issued before it are refused all the same (their tombstones were lost with it)."""
    rng = np.random.default_rng(8)
    settings = make_settings(tmp_path, tasks=[ldp_task()])
    async with stack(settings) as s:
        used, _ = await used_and_open(s, rng)
        assert (await s.device.post("/v1/tasks/loc/feedback", json={
            "decision_id": used, "reward": 0.5})).status_code == 409
    lose_database(settings)
    async with stack(settings, init=True) as s:
        resp = await s.device.post("/v1/tasks/loc/feedback",
                                   json={"decision_id": used, "reward": 0.5})
        assert resp.status_code == 404, resp.text
        assert (await status(s.device))["feedbacks"] == 0
        fresh = (await decide(s.device, "loc", features(rng)))["decision_id"]
        assert (await s.device.post("/v1/tasks/loc/feedback", json={
            "decision_id": fresh, "reward": 0.5})).status_code == 202
