"""The analyzer service in-process: every endpoint, every error path, exactly-once ingestion and
restart on the same data directory (real SQLite, real HPKE)."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from privbandit.launcher import free_ports
from services.analyzer.__main__ import build_server
from services.analyzer.app import create_app
from services.analyzer.ingest import IngestPipeline
from shared.core.policies import randomizer_for
from shared.crypto.hpke import pack_report, seal
from shared.protocol.messages import (
    BatchAck,
    BatchUpload,
    EncryptedReport,
    HpkeConfig,
    ModelMessage,
    TaskInfo,
    b64decode,
    b64encode,
)
from shared.settings import Settings
from tests.helpers import (
    TOKEN,
    auth,
    central_task,
    encrypt_rows,
    error,
    ldp_task,
    make_rows,
    make_settings,
    privacy,
    report_maker,
    running,
    shuffle_task,
)

SHUF = shuffle_task()
LOC = ldp_task()
CEN = central_task()


def batch(reports: list[EncryptedReport], batch_id: str | None = None) -> dict:
    upload = BatchUpload(batch_id=batch_id or secrets.token_hex(16), reports=reports)
    return upload.model_dump(mode="json")


async def hpke_of(client: httpx.AsyncClient) -> HpkeConfig:
    r = await client.get("/v1/hpke-config")
    assert r.status_code == 200
    return HpkeConfig.model_validate_json(r.content)


# ---------------------------------------------------------------------------------------------
# Read-only endpoints


async def test_health_config_and_task_info(settings: Settings) -> None:
    async with running(create_app(settings)) as client:
        r = await client.get("/healthz")
        assert r.status_code == 200 and r.json()["status"] == "ok"
        hpke = await hpke_of(client)
        assert len(b64decode(hpke.public_key)) == 32
        for cfg in (SHUF, LOC, CEN):
            r = await client.get(f"/v1/tasks/{cfg.id}")
            assert r.status_code == 200
            info = TaskInfo.model_validate_json(r.content)
            assert info.threat_model == cfg.threat_model
            assert info.batch_size == cfg.batch_size
            assert info.d == 3 and info.K == 4 and info.policy["algo"] == cfg.policy.algo
        for path in ("", "/model", "/privacy", "/model/stream"):
            error(await client.get(f"/v1/tasks/nope{path}"), 404, "unknown_task")
        error(await client.get("/v1/nothing-here"), 404, "not_found")
        error(await client.delete("/v1/hpke-config"), 405, "method_not_allowed")


async def test_model_etag_and_304(settings: Settings) -> None:
    async with running(create_app(settings)) as client:
        r = await client.get("/v1/tasks/shuf/model")
        assert r.status_code == 200 and r.headers["etag"] == '"0"'
        model = ModelMessage.model_validate_json(r.content)
        assert model.version == 0 and model.reports == 0 and model.theta == [0.0, 0.0, 0.0]
        assert model.V == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
        for tag in ('"0"', 'W/"0"', '"7", "0"', "*"):
            r = await client.get("/v1/tasks/shuf/model", headers={"If-None-Match": tag})
            assert r.status_code == 304 and r.content == b"" and r.headers["etag"] == '"0"'
        r = await client.get("/v1/tasks/shuf/model", headers={"If-None-Match": '"1"'})
        assert r.status_code == 200
        # After a batch, the old ETag no longer matches.
        make = report_maker(await hpke_of(client))
        r = await client.post("/v1/tasks/shuf/batches", json=batch(make(SHUF, 5)), headers=auth())
        assert r.status_code == 200
        r = await client.get("/v1/tasks/shuf/model", headers={"If-None-Match": '"0"'})
        assert r.status_code == 200 and r.headers["etag"] == '"1"'
        assert ModelMessage.model_validate_json(r.content).reports == 5


async def test_privacy_ledgers(settings: Settings) -> None:
    async with running(create_app(settings)) as client:
        p = await privacy(client, "shuf")
        assert p.ledger.threat_model == "shuffle" and p.ledger.ldp_epsilon == 4.0
        assert p.reports_counted == 0 and p.batches == 0 and p.model_version == 0
        assert (await privacy(client, "loc")).ledger.threat_model == "ldp"
        cen = (await privacy(client, "cen")).ledger
        assert cen.threat_model == "central" and cen.rdp_alpha == 2.0


# ---------------------------------------------------------------------------------------------
# Batch ingestion


async def test_batch_counts_and_publishes(settings: Settings) -> None:
    async with running(create_app(settings)) as client:
        make = report_maker(await hpke_of(client))
        body = batch(make(SHUF, 5))
        r = await client.post("/v1/tasks/shuf/batches", json=body, headers=auth())
        assert r.status_code == 200, r.text
        ack = BatchAck.model_validate_json(r.content)
        assert (ack.replayed, ack.counted, ack.rejected, ack.duplicates) == (False, 5, 0, 0)
        assert ack.batch_id == body["batch_id"] and ack.model_version == 1
        p = await privacy(client, "shuf")
        assert (p.reports_counted, p.batches, p.model_version) == (5, 1, 1)
        model = ModelMessage.model_validate_json((await client.get("/v1/tasks/shuf/model")).content)
        assert model.version == 1 and model.reports == 5 and any(v != 0 for v in model.theta)


async def test_replayed_batch_is_not_counted_twice(settings: Settings) -> None:
    async with running(create_app(settings)) as client:
        make = report_maker(await hpke_of(client))
        body = batch(make(SHUF, 5))
        first = await client.post("/v1/tasks/shuf/batches", json=body, headers=auth())
        model_after_first = (await client.get("/v1/tasks/shuf/model")).json()
        again = await client.post("/v1/tasks/shuf/batches", json=body, headers=auth())
        assert first.status_code == again.status_code == 200
        ack = BatchAck.model_validate_json(again.content)
        assert ack.replayed and ack.counted == 0 and ack.model_version == 1
        # Same id with other content is still a replay: the id is the idempotency key.
        other = batch(make(SHUF, 5), batch_id=body["batch_id"])
        ack = BatchAck.model_validate_json(
            (await client.post("/v1/tasks/shuf/batches", json=other, headers=auth())).content
        )
        assert ack.replayed
        p = await privacy(client, "shuf")
        assert (p.reports_counted, p.batches, p.model_version) == (5, 1, 1)
        assert (await client.get("/v1/tasks/shuf/model")).json() == model_after_first


async def test_duplicate_report_ids_across_and_within_batches(settings: Settings) -> None:
    async with running(create_app(settings)) as client:
        hpke = await hpke_of(client)
        rng = np.random.default_rng(3)
        rows = make_rows(SHUF, 5, rng)
        first = encrypt_rows(SHUF, hpke, rows)
        r = await client.post(
            "/v1/tasks/shuf/batches", json=batch([rep for _, rep in first]), headers=auth()
        )
        assert BatchAck.model_validate_json(r.content).counted == 5
        # A device re-encrypting two of those reports (fresh ciphertexts, same report ids),
        # plus one report repeated inside the batch.
        rand = randomizer_for(SHUF.policy)
        pk = b64decode(hpke.public_key)
        resent = [
            seal(pk, hpke.key_id, "shuf", rid + rand.to_bytes(row))
            for (rid, _), row in zip(first[:2], rows[:2], strict=True)
        ]
        new = encrypt_rows(SHUF, hpke, make_rows(SHUF, 2, rng))
        reports = resent + [new[0][1], new[0][1], new[1][1]]
        r = await client.post("/v1/tasks/shuf/batches", json=batch(reports), headers=auth())
        ack = BatchAck.model_validate_json(r.content)
        assert (ack.counted, ack.duplicates, ack.rejected) == (2, 3, 0)
        assert (await privacy(client, "shuf")).reports_counted == 7
        model = ModelMessage.model_validate_json((await client.get("/v1/tasks/shuf/model")).content)
        assert model.reports == 7


async def test_bad_reports_are_rejected_and_the_rest_counted(settings: Settings) -> None:
    async with running(create_app(settings)) as client:
        hpke = await hpke_of(client)
        make = report_maker(hpke)
        good = make(SHUF, 1)
        pk = b64decode(hpke.public_key)
        rand = randomizer_for(SHUF.policy)
        row = rand.to_bytes(make_rows(SHUF, 1, np.random.default_rng(1))[0])

        tampered = make(SHUF, 1)[0]
        ct = bytearray(b64decode(tampered.ct))
        ct[3] ^= 0x01
        tampered = tampered.model_copy(update={"ct": b64encode(bytes(ct))})
        other_task = seal(pk, hpke.key_id, "loc", pack_report(row)[1])  # info binds the task
        other_key = seal(pk, (hpke.key_id + 1) % 256, "shuf", pack_report(row)[1])
        short = seal(pk, hpke.key_id, "shuf", pack_report(row[:-1])[1])  # wrong plaintext size
        # Bits beyond the randomizer's width must be zero (BinaryRandomizer.from_bytes).
        bad_bits = bytearray(row)
        bad_bits[-1] |= 0x01
        assert rand.width % 8 != 0
        padding = seal(pk, hpke.key_id, "shuf", pack_report(bytes(bad_bits))[1])

        reports = [tampered, other_task, other_key, short, good[0]]
        r = await client.post("/v1/tasks/shuf/batches", json=batch(reports), headers=auth())
        ack = BatchAck.model_validate_json(r.content)
        assert (ack.counted, ack.rejected, ack.duplicates) == (1, 4, 0)
        reports = [padding, *make(SHUF, 4)]
        r = await client.post("/v1/tasks/shuf/batches", json=batch(reports), headers=auth())
        ack = BatchAck.model_validate_json(r.content)
        assert (ack.counted, ack.rejected) == (4, 1)
        p = await privacy(client, "shuf")
        assert p.reports_counted == 5 and p.batches == 2
        metrics = (await client.get("/metrics")).text
        assert 'privbandit_analyzer_reports_rejected_total{task="shuf"} 5.0' in metrics


async def test_pass_through_tasks_ldp_and_central(settings: Settings) -> None:
    async with running(create_app(settings)) as client:
        make = report_maker(await hpke_of(client))
        versions = []
        for _ in range(4):
            r = await client.post("/v1/tasks/loc/batches", json=batch(make(LOC, 1)), headers=auth())
            versions.append(BatchAck.model_validate_json(r.content).model_version)
        assert versions == [0, 1, 1, 2]  # update_every = 2
        for _ in range(30):
            r = await client.post("/v1/tasks/cen/batches", json=batch(make(CEN, 1)), headers=auth())
            assert BatchAck.model_validate_json(r.content).counted == 1
        p = await privacy(client, "cen")
        assert p.reports_counted == 30 and p.batches == 30 and p.model_version >= 1
        model = ModelMessage.model_validate_json((await client.get("/v1/tasks/cen/model")).content)
        assert model.version == p.model_version and 0 < model.reports <= 30
        # Central reports carry raw (x, r); an out-of-range reward fails validation.
        hpke = await hpke_of(client)
        raw = np.array([0.1, 0.2, 0.3, 1.5]).astype("<f8").tobytes()
        bad = seal(b64decode(hpke.public_key), hpke.key_id, "cen", pack_report(raw)[1])
        r = await client.post("/v1/tasks/cen/batches", json=batch([bad]), headers=auth())
        assert BatchAck.model_validate_json(r.content).rejected == 1
        assert (await privacy(client, "cen")).reports_counted == 30


# ---------------------------------------------------------------------------------------------
# Errors change nothing


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


# ---------------------------------------------------------------------------------------------
# Restart, metrics


async def test_state_survives_restart(settings: Settings) -> None:
    async with running(create_app(settings)) as client:
        hpke = await hpke_of(client)
        rng = np.random.default_rng(5)
        first = encrypt_rows(SHUF, hpke, make_rows(SHUF, 5, rng))
        body = batch([rep for _, rep in first])
        await client.post("/v1/tasks/shuf/batches", json=body, headers=auth())
        make = report_maker(hpke, seed=9)
        await client.post("/v1/tasks/shuf/batches", json=batch(make(SHUF, 5)), headers=auth())
        for _ in range(3):
            await client.post("/v1/tasks/cen/batches", json=batch(make(CEN, 1)), headers=auth())
        model_before = (await client.get("/v1/tasks/shuf/model")).json()
        cen_before = (await client.get("/v1/tasks/cen/model")).json()

    async with running(create_app(settings)) as client:
        assert await hpke_of(client) == hpke  # same key, same key id
        assert (await client.get("/v1/tasks/shuf/model")).json() == model_before
        assert (await client.get("/v1/tasks/cen/model")).json() == cen_before
        p = await privacy(client, "shuf")
        assert (p.reports_counted, p.batches, p.model_version) == (10, 2, 2)
        assert (await privacy(client, "cen")).reports_counted == 3
        # Replayed batch id and already-counted report ids are still recognised.
        ack = BatchAck.model_validate_json(
            (await client.post("/v1/tasks/shuf/batches", json=body, headers=auth())).content
        )
        assert ack.replayed
        rand = randomizer_for(SHUF.policy)
        pk = b64decode(hpke.public_key)
        rows = make_rows(SHUF, 5, rng)
        resent = [
            seal(pk, hpke.key_id, "shuf", rid + rand.to_bytes(row))
            for (rid, _), row in zip(first, rows, strict=True)
        ]
        r = await client.post("/v1/tasks/shuf/batches", json=batch(resent), headers=auth())
        ack = BatchAck.model_validate_json(r.content)
        assert (ack.counted, ack.duplicates, ack.replayed) == (0, 5, False)
        assert (await privacy(client, "shuf")).reports_counted == 10


async def test_changed_task_config_refuses_to_start(settings: Settings) -> None:
    async with running(create_app(settings)):
        pass
    changed = make_settings(
        settings.data_dir, tasks=[shuffle_task(eps0=2.0), ldp_task(), central_task()]
    )
    app = create_app(changed)
    with pytest.raises(RuntimeError, match="configuration changed"):
        async with app.router.lifespan_context(app):
            pass
    # A new task next to the old ones is fine.
    grown = make_settings(settings.data_dir, tasks=[*settings.tasks, shuffle_task("shuf2")])
    async with running(create_app(grown)) as client:
        assert (await client.get("/v1/tasks/shuf2")).status_code == 200


async def test_metrics(settings: Settings) -> None:
    async with running(create_app(settings)) as client:
        make = report_maker(await hpke_of(client))
        body = batch(make(SHUF, 5))
        await client.post("/v1/tasks/shuf/batches", json=body, headers=auth())
        await client.post("/v1/tasks/shuf/batches", json=body, headers=auth())
        r = await client.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        text = r.text
        assert 'privbandit_analyzer_batches_total{outcome="processed",task="shuf"} 1.0' in text
        assert 'privbandit_analyzer_batches_total{outcome="replayed",task="shuf"} 1.0' in text
        assert 'privbandit_analyzer_reports_counted_total{task="shuf"} 5.0' in text
        assert 'privbandit_analyzer_batch_ingest_seconds_count{task="shuf"} 1.0' in text
        assert 'privbandit_analyzer_model_version{task="shuf"} 1.0' in text


# ---------------------------------------------------------------------------------------------
# Server-Sent Events, over a real uvicorn server (httpx's ASGI transport buffers whole bodies)


async def _next_event(lines: object) -> dict[str, str]:
    """The next SSE event (fields by name); comments are returned as {"comment": ...}."""
    event: dict[str, str] = {}
    async for line in lines:  # type: ignore[attr-defined]
        if line == "":
            if event:
                return event
            continue
        if line.startswith(":"):
            return {"comment": line[1:].strip()}
        name, _, value = line.partition(":")
        event[name] = value.removeprefix(" ")
    raise EOFError("stream ended")


async def test_model_stream_delivers_current_and_new_models(settings: Settings) -> None:
    app = create_app(settings, sse_keepalive=0.2)
    server = build_server(app, "127.0.0.1", 0, log_level="warning")
    serving = asyncio.create_task(server.serve())
    async with asyncio.timeout(20):
        while not server.started:
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            make = report_maker(await hpke_of(client))
            async with client.stream("GET", "/v1/tasks/shuf/model/stream") as resp:
                assert resp.status_code == 200
                assert resp.headers["content-type"].startswith("text/event-stream")
                lines = resp.aiter_lines()
                assert (await _next_event(lines)) == {"retry": "2000"}
                ev = await _next_event(lines)
                assert ev["event"] == "model" and ev["id"] == "0"
                assert ModelMessage.model_validate_json(ev["data"]).version == 0
                # Idle: keep-alive comments.
                assert await _next_event(lines) == {"comment": "keep-alive"}
                r = await client.post(
                    "/v1/tasks/shuf/batches", json=batch(make(SHUF, 5)), headers=auth()
                )
                assert r.status_code == 200
                ev = await _next_event(lines)
                while "comment" in ev:
                    ev = await _next_event(lines)
                assert ev["event"] == "model" and ev["id"] == "1"
                msg = ModelMessage.model_validate_json(ev["data"])
                assert msg.version == 1 and msg.reports == 5
                # A stop request ends the stream cleanly and the server finishes.
                server.stop()
                with pytest.raises(EOFError):
                    while True:
                        await _next_event(lines)
        await serving


async def test_main_serves_and_sigterm_ends_streams(tmp_path: Path) -> None:
    """``python -m services.analyzer``: a stop signal ends open model streams and the process
    exits cleanly (uvicorn would otherwise wait for the never-ending stream)."""
    port = free_ports(1)[0]
    config = tmp_path / "privbandit.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\nshuffler_token = "{TOKEN}"\nlog_level = "warning"\n'
        '[[tasks]]\nid = "shuf"\nthreat_model = "shuffle"\nK = 4\n'
        '[tasks.policy]\nalgo = "sblb"\nd = 3\neps0 = 4.0\nbatch_size = 5\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVBANDIT_")}
    env.update(PRIVBANDIT_CONFIG=str(config), PYTHONPATH=str(Path(__file__).parents[3]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.analyzer", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
    )
    try:
        async with asyncio.timeout(30), httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", timeout=10
        ) as client:
            while True:
                try:
                    if (await client.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            async with client.stream("GET", "/v1/tasks/shuf/model/stream") as resp:
                lines = resp.aiter_lines()
                await _next_event(lines)
                assert (await _next_event(lines))["id"] == "0"
                proc.send_signal(signal.SIGTERM)
                with pytest.raises(EOFError):
                    while True:
                        await _next_event(lines)
            while proc.poll() is None:
                await asyncio.sleep(0.05)
        # uvicorn re-raises the captured signal after its graceful shutdown has completed.
        assert proc.returncode in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_concurrent_batches_commit_exactly_once(settings: Settings) -> None:
    """Batches arriving together are group-committed; replays and shared report ids inside one
    group are still counted once."""
    app = create_app(settings)
    async with running(app) as client:
        hpke = await hpke_of(client)
        make = report_maker(hpke)
        bodies = [batch(make(LOC, 1)) for _ in range(40)]
        bodies += [bodies[3], bodies[7]]  # the same batch ids again, concurrently
        results = await asyncio.gather(
            *(client.post("/v1/tasks/loc/batches", json=b, headers=auth()) for b in bodies)
        )
        acks = [BatchAck.model_validate_json(r.content) for r in results]
        assert sum(a.counted for a in acks) == 40
        assert sum(a.replayed for a in acks) == 2
        p = await privacy(client, "loc")
        assert (p.reports_counted, p.batches) == (40, 40)

        # One group holding a replay and a report id shared by two batches (direct call).
        rt = app.state.runtime.tasks["shuf"]
        rows = make_rows(SHUF, 6, np.random.default_rng(11))
        sealed = encrypt_rows(SHUF, hpke, rows)
        rand = randomizer_for(SHUF.policy)
        copy = seal(b64decode(hpke.public_key), hpke.key_id, "shuf",
                    sealed[0][0] + rand.to_bytes(rows[0]))
        u1 = BatchUpload.model_validate(batch([rep for _, rep in sealed[:5]]))
        u2 = BatchUpload.model_validate(batch([copy, *[rep for _, rep in sealed[1:5]]]))
        runtime = app.state.runtime
        pipeline = IngestPipeline(rt, runtime.store, runtime.metrics)
        acks = await asyncio.to_thread(pipeline, [u1, u1, u2])
        assert [(a.replayed, a.counted, a.duplicates) for a in acks] == [
            (False, 5, 0), (True, 0, 0), (False, 0, 5)]
        assert (await privacy(client, "shuf")).reports_counted == 5
