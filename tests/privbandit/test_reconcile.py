"""privbandit/demo/reconcile.py: the spec §6 identity accepted = counted + refused + pending,
from the three services' status endpoints (here served by a mock transport)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from privbandit.demo.reconcile import Snapshot, reconcile, snapshot

URLS = {"device": "http://dev", "shuffler": "http://shf", "analyzer": "http://ana"}


def bodies(accepted: int, pending: int, counted: int, refused: int) -> dict[str, Any]:
    return {
        "dev": {"outbox_pending": 0, "feedbacks": accepted},
        "shf": {"tasks": [{"task": "t", "accepted": accepted, "pending": pending,
                           "batches_formed": 3, "batches_acknowledged": 3,
                           "batches_in_flight": 0}]},
        "ana": {"reports_counted": counted, "reports_refused": refused, "batches": 3,
                "model_version": 2, "ledger": {}},
    }


def take(accepted: int, pending: int, counted: int, refused: int) -> Snapshot:
    answers = bodies(accepted, pending, counted, refused)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answers[request.url.host])

    async def run() -> Snapshot:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await snapshot(URLS, "t", client)

    return asyncio.run(run())


def test_refused_reports_reconcile_and_a_missing_report_does_not() -> None:
    before = take(0, 0, 0, 0)
    after = take(100, 4, 90, 6)
    assert after.refused == 6
    rec = reconcile(100, before, after)
    assert (rec["reports_counted"], rec["reports_refused"], rec["reports_pending"]) == (90, 6, 4)
    assert rec["consistent"] and rec["problems"] == []
    lost = reconcile(100, before, take(100, 4, 90, 5))
    assert not lost["consistent"]
    assert "reports_refused (5)" in lost["problems"][0]


def test_refused_reports_of_earlier_runs_are_not_this_runs() -> None:
    """Counts are changes during the run; reports pending before it may fill its batches."""
    before = take(50, 2, 40, 8)
    after = take(80, 4, 65, 11)
    rec = reconcile(30, before, after)
    assert (rec["reports_accepted"], rec["reports_counted"], rec["reports_refused"]) == (30, 25, 3)
    assert rec["reports_pending_before"] == 2
    assert rec["consistent"], rec
