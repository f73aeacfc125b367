"""Intake: health and status, every refused upload stores nothing, identical ciphertexts are
dropped (also after a restart)."""

from __future__ import annotations

import json
from pathlib import Path

from shared.crypto.keystore import HpkeKeyStore
from shared.protocol.messages import (
    MAX_REPORTS_PER_UPLOAD,
    EncryptedReport,
    ReportsAccepted,
    ShufflerStatus,
)
from tests.helpers import (
    error,
    eventually,
    make_settings,
    queue_status,
    report_maker,
    running,
    shuffle_task,
    upload,
)

from .support import LOC, SHUF, FakeAnalyzer, acked, settings_for, shuffler_app


async def test_health_status_and_unknown_task(tmp_path: Path, keys: HpkeKeyStore) -> None:
    fake = FakeAnalyzer(keys)
    app = shuffler_app(settings_for(tmp_path), fake)
    async with running(app) as client:
        r = await client.get("/healthz")
        assert r.status_code == 200 and r.json()["status"] == "ok"
        status = ShufflerStatus.model_validate_json((await client.get("/v1/status")).content)
        assert [(t.task, t.batch_size) for t in status.tasks] == [("shuf", 5), ("big", 20),
                                                                    ("loc", 1)]
        assert all(t.pending == t.accepted == t.batches_formed == 0 for t in status.tasks)
        make = report_maker(keys.hpke_config())
        body = {"reports": [r.model_dump() for r in make(SHUF, 1)]}
        error(await client.post("/v1/tasks/nope/reports", json=body), 404, "unknown_task")
        # A malformed body is refused before the task is looked up, as when both were
        # dependencies (the routes now read them inline).
        error(await client.post("/v1/tasks/nope/reports", json={"reports": "x"}), 422)
        error(await client.post("/v1/tasks/nope/encrypted-counts", json={}), 422)
        error(await client.get("/v1/tasks/shuf/reports"), 405, "method_not_allowed")
        r = await client.get("/metrics")
        assert r.status_code == 200 and "privbandit_shuffler_pending_reports" in r.text


async def test_upload_errors_store_nothing(tmp_path: Path, keys: HpkeKeyStore) -> None:
    fake = FakeAnalyzer(keys)
    cfg = shuffle_task("sum", aggregation="secure-sum")
    settings = make_settings(tmp_path / "data", tasks=[SHUF, LOC, cfg])
    app = shuffler_app(settings, fake)
    async with running(app) as client:
        make = report_maker(keys.hpke_config())
        rep = make(SHUF, 1)[0].model_dump()
        url = "/v1/tasks/shuf/reports"
        bad_bodies = [
            b"{oops",
            b"[]",
            json.dumps({}).encode(),
            json.dumps({"reports": []}).encode(),
            json.dumps({"reports": [rep], "device": "abc"}).encode(),
            json.dumps({"reports": [{**rep, "key_id": 300}]}).encode(),
            json.dumps({"reports": [{**rep, "ct": "***"}]}).encode(),
            json.dumps({"reports": [{**rep, "enc": None}]}).encode(),
            json.dumps({"reports": [rep] * (MAX_REPORTS_PER_UPLOAD + 1)}).encode(),
        ]
        for content in bad_bodies:
            r = await client.post(url, content=content,
                                  headers={"Content-Type": "application/json"})
            error(r, 422, "invalid_request")
        # A ciphertext of the wrong length for the task (an ldp report sent to a shuffle task),
        # mixed with good ones: the whole upload is refused.
        wrong = make(LOC, 1)[0].model_dump()
        r = await client.post(url, json={"reports": [rep, wrong]})
        assert "reports[1]" in error(r, 422, "bad_report_size").message
        r = await client.post(url, json={"reports": [{**rep, "enc": rep["ct"]}]})
        error(r, 422, "bad_report_size")
        huge = b'{"reports": ["' + b"A" * 5_000_000 + b'"]}'
        r = await client.post(url, content=huge, headers={"Content-Type": "application/json"})
        error(r, 413, "body_too_large")

        async def chunked():  # no Content-Length: the limit applies while streaming
            for _ in range(100):
                yield b"A" * 50_000

        r = await client.post(url, content=chunked(), headers={"Content-Type": "application/json"})
        error(r, 413, "body_too_large")
        r = await client.post("/v1/tasks/sum/reports", json={"reports": [rep]})
        error(r, 409, "aggregation_mismatch")
        for task in ("shuf", "sum"):
            s = await queue_status(client, task)
            assert (s.pending, s.accepted, s.batches_formed) == (0, 0, 0)
        # The good report alone is still new.
        assert (await upload(client, [EncryptedReport.model_validate(rep)])).accepted == 1


async def test_identical_ciphertexts_are_dropped(tmp_path: Path, keys: HpkeKeyStore) -> None:
    fake = FakeAnalyzer(keys)
    app = shuffler_app(settings_for(tmp_path), fake)
    async with running(app) as client:
        make = report_maker(keys.hpke_config())
        a, b, c = make(SHUF, 3)
        assert await upload(client, [a, b, a]) == ReportsAccepted(accepted=2, duplicates=1)
        assert await upload(client, [b, c]) == ReportsAccepted(accepted=1, duplicates=1)
        s = await queue_status(client, "shuf")
        assert (s.accepted, s.pending) == (3, 3)
    # Still recognised after a restart, also once the reports have been batched and deleted.
    async with running(shuffler_app(settings_for(tmp_path), fake)) as client:
        assert await upload(client, [a]) == ReportsAccepted(accepted=0, duplicates=1)
        await upload(client, make(SHUF, 2))
        await eventually(lambda: acked(client, "shuf", 1))
        assert await upload(client, [c]) == ReportsAccepted(accepted=0, duplicates=1)
        assert (await queue_status(client, "shuf")).pending == 0
