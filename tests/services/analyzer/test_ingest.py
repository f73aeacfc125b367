"""Report-batch ingestion through the real app (real SQLite, real HPKE): counting, replays,
duplicate report ids, rejected reports, pass-through tasks and group commits, exactly once."""

from __future__ import annotations

import asyncio

import numpy as np

from privbandit.services.analyzer.app import create_app
from privbandit.services.analyzer.ingest import IngestPipeline
from privbandit.shared.core.policies import randomizer_for
from privbandit.shared.crypto.hpke import pack_report, seal
from privbandit.shared.protocol.messages import BatchAck, BatchUpload, b64decode, b64encode
from privbandit.shared.settings import Settings
from tests.helpers import auth, encrypt_rows, make_rows, privacy, report_maker, running
from tests.services.analyzer.support import CEN, LOC, SHUF, batch, hpke_of, model_of, resealed


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
        model = await model_of(client, "shuf")
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
        resent = resealed(hpke, SHUF, [rid for rid, _ in first[:2]], rows[:2])
        new = encrypt_rows(SHUF, hpke, make_rows(SHUF, 2, rng))
        reports = resent + [new[0][1], new[0][1], new[1][1]]
        r = await client.post("/v1/tasks/shuf/batches", json=batch(reports), headers=auth())
        ack = BatchAck.model_validate_json(r.content)
        assert (ack.counted, ack.duplicates, ack.rejected) == (2, 3, 0)
        assert (await privacy(client, "shuf")).reports_counted == 7
        model = await model_of(client, "shuf")
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
        model = await model_of(client, "cen")
        assert model.version == p.model_version and 0 < model.reports <= 30
        # Central reports carry raw (x, r); an out-of-range reward fails validation.
        hpke = await hpke_of(client)
        raw = np.array([0.1, 0.2, 0.3, 1.5]).astype("<f8").tobytes()
        bad = seal(b64decode(hpke.public_key), hpke.key_id, "cen", pack_report(raw)[1])
        r = await client.post("/v1/tasks/cen/batches", json=batch([bad]), headers=auth())
        assert BatchAck.model_validate_json(r.content).rejected == 1
        assert (await privacy(client, "cen")).reports_counted == 30


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
        (copy,) = resealed(hpke, SHUF, [sealed[0][0]], rows[:1])
        u1 = BatchUpload.model_validate(batch([rep for _, rep in sealed[:5]]))
        u2 = BatchUpload.model_validate(batch([copy, *[rep for _, rep in sealed[1:5]]]))
        runtime = app.state.runtime
        pipeline = IngestPipeline(rt, runtime.store, runtime.metrics)
        acks = await asyncio.to_thread(pipeline, [u1, u1, u2])
        assert [(a.replayed, a.counted, a.duplicates) for a in acks] == [
            (False, 5, 0), (True, 0, 0), (False, 0, 5)]
        assert (await privacy(client, "shuf")).reports_counted == 5
