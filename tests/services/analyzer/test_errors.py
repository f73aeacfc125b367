"""Refused requests and failed commits change nothing: authentication, unknown tasks, batch
size, malformed and oversized bodies, the wrong transport, and a commit that fails on disk."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from privbandit.services.analyzer.app import create_app
from privbandit.shared.protocol.messages import BatchAck
from privbandit.shared.settings import Settings
from tests.helpers import (
    TOKEN,
    auth,
    error,
    make_settings,
    privacy,
    report_maker,
    running,
    shuffle_task,
)
from tests.services.analyzer.support import SHUF, batch, hpke_of


async def test_batch_errors(settings: Settings, tmp_path: Path) -> None:
    async with running(create_app(settings)) as client:
        make = report_maker(await hpke_of(client))
        good = batch(make(SHUF, 5))
        url = "/v1/tasks/shuf/batches"

        error(await client.post(url, json=good), 401, "unauthorized")
        r = await client.post(url, json=good, headers={"Authorization": "Bearer wrong-token"})
        error(r, 401, "unauthorized")
        assert r.headers["www-authenticate"] == "Bearer"
        r = await client.post(url, json=good, headers={"Authorization": f"Basic {TOKEN}"})
        error(r, 401, "unauthorized")
        # Authentication is checked before the body is validated.
        error(await client.post(url, content=b"{not json"), 401, "unauthorized")
        error(await client.post("/v1/tasks/nope/batches", json=good, headers=auth()), 404,
              "unknown_task")

        for n in (4, 6, 1):
            body = batch(make(SHUF, n))
            r = await client.post(url, json=body, headers=auth())
            assert "l = 5" in error(r, 422, "batch_size_mismatch").message

        rep = good["reports"][0]
        malformed = [
            b"{not json",
            b"[]",
            json.dumps({"batch_id": good["batch_id"]}).encode(),
            json.dumps({**good, "extra": 1}).encode(),
            json.dumps({**good, "batch_id": "XYZ"}).encode(),
            json.dumps({**good, "batch_id": good["batch_id"].upper()}).encode(),
            json.dumps({**good, "reports": []}).encode(),
            json.dumps({**good, "reports": [{**rep, "key_id": 256}] * 5}).encode(),
            json.dumps({**good, "reports": [{**rep, "key_id": -1}] * 5}).encode(),
            json.dumps({**good, "reports": [{**rep, "key_id": "1"}] * 5}).encode(),
            json.dumps({**good, "reports": [{**rep, "ct": "!!not base64!!"}] * 5}).encode(),
            json.dumps({**good, "reports": [{**rep, "ct": ""}] * 5}).encode(),
            json.dumps({**good, "reports": [{**rep, "enc": "A" * 200}] * 5}).encode(),
            json.dumps({**good, "reports": [{**rep, "nonce": "AA"}] * 5}).encode(),
        ]
        for content in malformed:
            r = await client.post(
                url, content=content, headers={**auth(), "Content-Type": "application/json"}
            )
            error(r, 422, "invalid_request")

        huge = b'{"batch_id": "' + b"a" * 10_000_000 + b'"}'
        r = await client.post(
            url, content=huge, headers={**auth(), "Content-Type": "application/json"}
        )
        error(r, 413, "body_too_large")

        p = await privacy(client, "shuf")
        assert (p.reports_counted, p.batches, p.model_version) == (0, 0, 0)
        # ... and the good batch is still accepted afterwards.
        r = await client.post(url, json=good, headers=auth())
        assert BatchAck.model_validate_json(r.content).counted == 5


async def test_secure_sum_tasks_take_no_report_batches(tmp_path: Path) -> None:
    cfg = shuffle_task("sum", aggregation="secure-sum")
    settings = make_settings(tmp_path / "data", tasks=[cfg])
    async with running(create_app(settings)) as client:
        make = report_maker(await hpke_of(client))
        r = await client.post("/v1/tasks/sum/batches", json=batch(make(cfg, 5)), headers=auth())
        error(r, 409, "aggregation_mismatch")
        assert (await privacy(client, "sum")).batches == 0


async def test_failed_commit_rolls_back_and_the_retry_counts_once(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(settings)
    async with running(app) as client:
        make = report_maker(await hpke_of(client))
        body = batch(make(SHUF, 5))
        store = app.state.runtime.store
        real_commit = store.commit_batches

        def disk_full(*args: object, **kwargs: object) -> None:
            raise OSError("disk full")

        monkeypatch.setattr(store, "commit_batches", disk_full)
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as raw:
            r = await raw.post("/v1/tasks/shuf/batches", json=body, headers=auth())
        error(r, 500, "internal_error")
        monkeypatch.setattr(store, "commit_batches", real_commit)
        p = await privacy(client, "shuf")
        assert (p.reports_counted, p.batches, p.model_version) == (0, 0, 0)
        assert app.state.runtime.tasks["shuf"].policy.reports == 0  # memory rolled back too
        r = await client.post("/v1/tasks/shuf/batches", json=body, headers=auth())
        ack = BatchAck.model_validate_json(r.content)
        assert not ack.replayed and ack.counted == 5
        assert (await privacy(client, "shuf")).reports_counted == 5
