"""Backpressure at intake (issue 13): past ``limits.shuffler_reports`` stored, unacknowledged
reports of a task, uploads are refused with 429 ``queue_full`` and a Retry-After before anything
of them is stored; once the analyzer acknowledges batches, uploads are accepted again, and
nothing answered 202 is lost."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic import ValidationError

from privbandit.shared.crypto.keystore import HpkeKeyStore
from privbandit.shared.settings import Limits
from tests.helpers import error, eventually, queue_status, report_maker, running, upload

from .support import BIG, SHUF, FakeAnalyzer, acked, settings_for, shuffler_app


async def test_a_full_queue_refuses_uploads_with_429_before_storing_and_recovers(
    tmp_path: Path, keys: HpkeKeyStore
) -> None:
    # Room for 10 stored reports per task: two batches of l = 5 waiting for the analyzer.
    settings = settings_for(tmp_path, limits=Limits(shuffler_reports=20, retry_after=3))
    # The analyzer is down: formed batches stay unacknowledged.
    fake = FakeAnalyzer(keys, status=503)
    make = report_maker(keys.hpke_config())
    async with running(shuffler_app(settings, fake)) as client:
        first = make(SHUF, 20)
        assert (await upload(client, first[:12])).accepted == 12
        assert (await upload(client, first[12:])).accepted == 8  # straddles: accepted whole
        q = await queue_status(client, "shuf")
        assert (q.accepted, q.pending, q.batches_formed) == (20, 0, 4)

        refused = make(SHUF, 3)
        body = {"reports": [r.model_dump() for r in refused]}
        resp = await client.post("/v1/tasks/shuf/reports", json=body)
        error(resp, 429, "queue_full")
        assert resp.headers["Retry-After"] == "3"
        assert (await queue_status(client, "shuf")).accepted == 20  # nothing of it stored
        # Another task has its own room.
        assert (await upload(client, make(BIG, 2), task="big")).accepted == 2
        metrics = (await client.get("/metrics")).text
        assert 'privbandit_shuffler_uploads_refused_total{reason="queue_full",task="shuf"} 1.0' \
            in metrics
        assert 'privbandit_shuffler_stored_reports{task="shuf"} 20.0' in metrics

        # The analyzer comes back: batches are acknowledged, room is made, the same reports
        # are accepted as new (the refused upload left no trace, not even as a duplicate).
        fake.status = 200
        await eventually(lambda: acked(client, "shuf", 4), what="batches acknowledged")
        retried = await upload(client, refused)
        assert (retried.accepted, retried.duplicates) == (3, 0)
        # Every report answered 202 reached the analyzer or is pending: nothing lost.
        q = await queue_status(client, "shuf")
        assert (q.accepted, q.pending) == (23, 3)
        assert len({b.batch_id for b in fake.batches("shuf")}) == 4


async def test_concurrent_uploads_cannot_overshoot_the_limit_by_more_than_one_upload(
    tmp_path: Path, keys: HpkeKeyStore
) -> None:
    """Uploads being committed count against the limit: of many concurrent uploads into an
    almost full queue, the ones the limit leaves no room for are refused."""
    settings = settings_for(tmp_path, limits=Limits(shuffler_reports=20))
    fake = FakeAnalyzer(keys, status=503)
    make = report_maker(keys.hpke_config())
    async with running(shuffler_app(settings, fake)) as client:
        assert (await upload(client, make(SHUF, 18))).accepted == 18
        bodies = [{"reports": [r.model_dump() for r in make(SHUF, 2)]} for _ in range(10)]
        answers = await asyncio.gather(
            *(client.post("/v1/tasks/shuf/reports", json=b) for b in bodies)
        )
        codes = sorted(a.status_code for a in answers)
        assert codes.count(202) == 1 and codes.count(429) == 9
        assert (await queue_status(client, "shuf")).accepted == 20


async def test_the_limit_counts_what_a_restarted_shuffler_still_holds(
    tmp_path: Path, keys: HpkeKeyStore
) -> None:
    settings = settings_for(tmp_path, limits=Limits(shuffler_reports=20))
    fake = FakeAnalyzer(keys, status=503)
    make = report_maker(keys.hpke_config())
    async with running(shuffler_app(settings, fake)) as client:
        assert (await upload(client, make(SHUF, 22))).accepted == 22  # 4 batches + 2 pending
    async with running(shuffler_app(settings, fake)) as client:
        resp = await client.post("/v1/tasks/shuf/reports",
                                 json={"reports": [make(SHUF, 1)[0].model_dump()]})
        error(resp, 429, "queue_full")


def test_the_limit_must_leave_room_for_a_batch(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="could never fill"):
        settings_for(tmp_path, limits=Limits(shuffler_reports=19))  # BIG has l = 20
