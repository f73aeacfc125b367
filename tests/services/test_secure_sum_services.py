"""The secure-sum transport through the real services, in-process: devices' Paillier-encrypted
counts → shuffler (checked, durable, batched) → ONE encrypted batch sum → analyzer (decrypted only
as (Z, U), range-checked, fed to SBLB, committed exactly once).

Keys are 1024 bits (``PAILLIER_TEST_BITS``) except in the test of the production default."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from services.analyzer.app import create_app as create_analyzer
from services.shuffler.app import create_app as create_shuffler
from shared.crypto.keystore import PAILLIER_KEY_FILE
from shared.crypto.paillier import (
    PaillierEncryptor,
    PaillierKeyError,
    encode_ciphertexts,
    homomorphic_sum,
)
from shared.crypto.slots import ciphertext_width, pack
from shared.protocol.messages import (
    BatchAck,
    HpkeConfig,
    ModelMessage,
    ReportsAccepted,
    b64decode,
    b64encode,
)
from shared.protocol.secure_sum import EncryptedBatchSum, EncryptedCounts, PaillierConfig
from shared.settings import Settings
from tests.helpers import (
    PAILLIER_TEST_BITS,
    assert_same_state,
    auth,
    counted,
    counts_maker,
    error,
    eventually,
    make_settings,
    privacy,
    queue_status,
    reference_state,
    report_maker,
    running,
    secure_sum_ready,
    secure_sum_task,
    shuffle_task,
    upload,
)

SUM = secure_sum_task("sum", l=10)  # sblb-fixed, d = 3 (c = 9 counts), m = 1, l = 10
SHUF = shuffle_task()  # an HPKE-report task beside it (l = 5)


def settings_for(tmp_path: Path, **kw: Any) -> Settings:
    return make_settings(tmp_path / "data", tasks=[SUM, SHUF], **kw)


def analyzer_app(settings: Settings) -> FastAPI:
    return create_analyzer(settings, paillier_key_bits=PAILLIER_TEST_BITS)


class Recorder(httpx.AsyncBaseTransport):
    """Wraps the shuffler → analyzer transport: records every request (method, path, JSON body)
    and can refuse POSTs (``block_posts``) or lose the answer to the next ``lose_acks`` POSTs
    after the analyzer processed them."""

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.inner = inner
        self.requests: list[tuple[str, str, Any]] = []
        self.block_posts = False
        self.block_gets = False
        self.lose_acks = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.requests.append((request.method, request.url.path, body))
        if (request.method == "POST" and self.block_posts) or (
            request.method == "GET" and self.block_gets
        ):
            raise httpx.ConnectError("analyzer unreachable", request=request)
        assert self.inner is not None
        response = await self.inner.handle_async_request(request)
        if request.method == "POST" and self.lose_acks > 0:
            self.lose_acks -= 1
            await response.aread()
            raise httpx.ReadTimeout("acknowledgement lost", request=request)
        return response

    def posts(self) -> list[tuple[str, Any]]:
        return [(path, body) for method, path, body in self.requests if method == "POST"]


@dataclass
class Stack:
    analyzer: httpx.AsyncClient
    shuffler: httpx.AsyncClient
    analyzer_app: FastAPI
    shuffler_app: FastAPI
    recorder: Recorder
    config: PaillierConfig  # the secure-sum task's config (with layout)
    made: list[np.ndarray] = field(default_factory=list)


@asynccontextmanager
async def stack(
    settings: Settings, recorder: Recorder | None = None, wait_ready: bool = True
) -> AsyncIterator[Stack]:
    """Real analyzer and shuffler apps, the shuffler posting to the analyzer in-process."""
    a_app = analyzer_app(settings)
    async with running(a_app) as a_client:
        rec = recorder if recorder is not None else Recorder()
        rec.inner = httpx.ASGITransport(a_app)
        s_app = create_shuffler(settings, analyzer_transport=rec)
        async with running(s_app) as s_client:
            r = await a_client.get("/v1/tasks/sum/secure-sum")
            assert r.status_code == 200, r.text
            config = PaillierConfig.model_validate_json(r.content)
            if wait_ready:
                await eventually(lambda: secure_sum_ready(s_client))
            yield Stack(a_client, s_client, a_app, s_app, rec, config)


async def acked(client: httpx.AsyncClient, n: int) -> bool:
    return (await queue_status(client, "sum")).batches_acknowledged >= n


def analyzer_state(app: FastAPI, task: str = "sum") -> dict[str, Any]:
    return app.state.runtime.tasks[task].policy.get_state()


def sum_body(
    config: PaillierConfig, plaintexts: list[int], count: int, batch_id: str | None = None
) -> dict[str, Any]:
    """An EncryptedBatchSum of freshly encrypted plaintexts (what a shuffler would post)."""
    enc = PaillierEncryptor.from_config(config)
    return EncryptedBatchSum(
        batch_id=batch_id or secrets.token_hex(16),
        key_id=config.key_id,
        count=count,
        ct=encode_ciphertexts(enc.encrypt(plaintexts), config.key_bits),
    ).model_dump()


def honest_sum(
    config: PaillierConfig, reports: list[EncryptedCounts], batch_id: str | None = None
) -> dict[str, Any]:
    """The homomorphic sum of encrypted reports, as the shuffler forms it."""
    assert config.layout is not None
    n = config.modulus()
    width = ciphertext_width(config.key_bits)
    cts = []
    for rep in reports:
        raw = b64decode(rep.ct)
        cts.append([int.from_bytes(raw[j * width:(j + 1) * width], "big")
                    for j in range(config.layout.plaintexts)])
    total = homomorphic_sum(cts, n * n)
    return EncryptedBatchSum(
        batch_id=batch_id or secrets.token_hex(16), key_id=config.key_id, count=len(reports),
        ct=encode_ciphertexts(total, config.key_bits),
    ).model_dump()


# ---------------------------------------------------------------------------------------------


async def test_devices_to_shuffler_to_analyzer_equals_plaintext_sblb(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    async with stack(settings) as s:
        # The public configuration a device needs.
        plain = PaillierConfig.model_validate_json(
            (await s.analyzer.get("/v1/paillier-config")).content
        )
        assert plain.layout is None and plain.key_bits == PAILLIER_TEST_BITS
        assert (s.config.key_id, s.config.n) == (plain.key_id, plain.n)
        lay = s.config.layout
        assert lay is not None
        assert (lay.c, lay.m, lay.batch_size, lay.plaintexts) == (9, 1, 10, 1)
        error(await s.analyzer.get("/v1/tasks/shuf/secure-sum"), 404, "not_secure_sum")

        make = counts_maker(s.config, seed=1)
        batches: list[np.ndarray] = []
        # Two batches, one after the other (SBLB's published model depends on the order).
        for k in (1, 2):
            rows, reports = make(SUM, 10)
            half = await asyncio.gather(upload(s.shuffler, reports[:5]),
                                        *(upload(s.shuffler, [r]) for r in reports[5:]))
            assert sum(h.accepted for h in half) == 10
            batches.append(rows)
            await eventually(lambda k=k: acked(s.shuffler, k))
        _, extra = make(SUM, 3)
        assert await upload(s.shuffler, extra) == ReportsAccepted(accepted=3, duplicates=0)
        # Identical ciphertexts are dropped, also once their batch is gone.
        assert await upload(s.shuffler, [extra[0], extra[1]]) == ReportsAccepted(
            accepted=0, duplicates=2)

        # The analyzer's SBLB state equals SBLB fed the plaintext rows of the same batches.
        assert_same_state(analyzer_state(s.analyzer_app), reference_state(SUM, batches))
        model = ModelMessage.model_validate_json(
            (await s.analyzer.get("/v1/tasks/sum/model")).content)
        assert (model.version, model.reports) == (2, 20)
        # ... and was published to model-stream subscribers.
        assert s.analyzer_app.state.runtime.tasks["sum"].feed.current == model

        # Reconciliation: accepted = counted + pending.
        q = await queue_status(s.shuffler, "sum")
        p = await privacy(s.analyzer, "sum")
        assert (q.accepted, q.pending, q.batches_formed, q.batches_acknowledged) == (23, 3, 2, 2)
        assert (p.reports_counted, p.batches, p.model_version) == (20, 2, 2)
        assert q.accepted == p.reports_counted + q.pending and q.last_error is None
        assert p.ledger.aggregation == "secure-sum"
        assert "batch sums" in p.ledger.accounting

        # Only encrypted sums travelled: one ciphertext per plaintext, count = l, no report.
        posts = s.recorder.posts()
        assert [path for path, _ in posts] == ["/v1/tasks/sum/batch-sums"] * 2
        for _, body in posts:
            assert set(body) == {"batch_id", "key_id", "count", "ct"}
            assert body["count"] == 10 and body["key_id"] == s.config.key_id
            assert len(b64decode(body["ct"])) == lay.ciphertext_bytes
        # Nothing is kept of an acknowledged batch but its id.
        store = s.shuffler_app.state.runtime.store
        for _, body in posts:
            assert store.batch_members(body["batch_id"]) == 0
            assert not store.has_sum(body["batch_id"])
        metrics = (await s.shuffler.get("/metrics")).text
        assert "privbandit_shuffler_batch_sum_seconds_count 2.0" in metrics

        # The HPKE task beside it still works the reports way.
        hpke = HpkeConfig.model_validate((await s.analyzer.get("/v1/hpke-config")).json())
        body = {"reports": [r.model_dump() for r in report_maker(hpke)(SHUF, 5)]}
        assert (await s.shuffler.post("/v1/tasks/shuf/reports", json=body)).status_code == 202
        await eventually(lambda: counted(s.analyzer, "shuf", 5))
        assert [p for p, _ in s.recorder.posts()][-1] == "/v1/tasks/shuf/batches"
        assert (await privacy(s.analyzer, "shuf")).ledger.aggregation == "reports"


async def test_analyzer_refuses_bad_batch_sums_without_a_state_change(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    app = analyzer_app(settings)
    async with running(app) as client:
        config = PaillierConfig.model_validate_json(
            (await client.get("/v1/tasks/sum/secure-sum")).content)
        lay = config.layout
        assert lay is not None
        url = "/v1/tasks/sum/batch-sums"
        make = counts_maker(config, seed=2)
        rows, reports = make(SUM, 11)
        good = honest_sum(config, reports[:10])

        async def unchanged() -> None:
            p = await privacy(client, "sum")
            assert (p.reports_counted, p.batches, p.model_version) == (0, 0, 0)

        # Authentication first.
        error(await client.post(url, json=good), 401, "unauthorized")
        r = await client.post(url, json=good, headers={"Authorization": "Bearer wrong-token-000"})
        error(r, 401, "unauthorized")
        # The wrong task or transport.
        error(await client.post("/v1/tasks/nope/batch-sums", json=good, headers=auth()),
              404, "unknown_task")
        error(await client.post("/v1/tasks/shuf/batch-sums", json=good, headers=auth()),
              409, "aggregation_mismatch")
        # A secure-sum task never takes individual reports.
        hpke = HpkeConfig.model_validate((await client.get("/v1/hpke-config")).json())
        batch = {"batch_id": secrets.token_hex(16),
                 "reports": [r.model_dump() for r in report_maker(hpke)(SUM, 10)]}
        error(await client.post("/v1/tasks/sum/batches", json=batch, headers=auth()),
              409, "aggregation_mismatch")

        # Wire-level refusals.
        error(await client.post(url, json={**good, "count": 9}, headers=auth()),
              422, "batch_size_mismatch")
        error(await client.post(url, json={**good, "key_id": (config.key_id + 1) % 256},
                                headers=auth()), 422, "unknown_key")
        width = ciphertext_width(config.key_bits)
        n = config.modulus()
        bad_cts = [
            "***",  # not base64
            b64encode(b64decode(good["ct"])[:-1]),  # one byte short
            b64encode(b64decode(good["ct"]) * 2),  # two ciphertexts where the layout has one
            b64encode(bytes(width)),  # 0
            b64encode(n.to_bytes(width, "big")),  # shares the factors of n
            b64encode((n * n).to_bytes(width, "big")),  # ≥ n²
        ]
        for ct in bad_cts:
            error(await client.post(url, json={**good, "ct": ct}, headers=auth()),
                  422, "bad_ciphertext")
        for body in ({**good, "count": 0}, {**good, "extra": 1}, {**good, "batch_id": "x"}):
            error(await client.post(url, json=body, headers=auth()), 422, "invalid_request")
        await unchanged()

        # Decryptable sums that are not l reports with counts in 0..m: refused after decryption,
        # nothing fed, the batch id NOT recorded.
        s = lay.slot_bits
        refused_id = secrets.token_hex(16)
        out_of_range = [
            sum_body(config, [lay.batch_size * lay.m + 1], 10, refused_id),  # slot 0 > l·m
            sum_body(config, [1 << (lay.c * s)], 10, refused_id),  # a bit above the last slot
            sum_body(config, [n - 1], 10, refused_id),  # a "negative" (wrapped) plaintext
        ]
        # Overflow: 11 reports multiplied into a batch claiming l = 10 (every slot 11 > 10).
        ones = np.ones(lay.c, dtype=np.int64)
        enc = PaillierEncryptor.from_config(config)
        eleven = [enc.encrypt(pack(ones, 10, 1, config.key_bits)) for _ in range(11)]
        overflow = EncryptedBatchSum(
            batch_id=refused_id, key_id=config.key_id, count=10,
            ct=encode_ciphertexts(homomorphic_sum(eleven, n * n), config.key_bits),
        ).model_dump()
        for body in [*out_of_range, overflow]:
            r = await client.post(url, json=body, headers=auth())
            error(r, 422, "slot_out_of_range")
        await unchanged()
        assert app.state.runtime.store.processed_batches("sum", [refused_id]) == set()
        metrics = (await client.get("/metrics")).text
        assert 'privbandit_analyzer_batches_total{outcome="refused",task="sum"} 4.0' in metrics

        # The refused id is still free: an honest sum under it is counted ...
        r = await client.post(url, json={**good, "batch_id": refused_id}, headers=auth())
        assert r.status_code == 200, r.text
        ack = BatchAck.model_validate_json(r.content)
        assert (ack.replayed, ack.counted, ack.rejected, ack.duplicates, ack.model_version) == (
            False, 10, 0, 0, 1)
        # ... exactly once: a replay (even with another body) changes nothing.
        for body in ({**good, "batch_id": refused_id},
                     honest_sum(config, reports[1:11], refused_id)):
            r = await client.post(url, json=body, headers=auth())
            ack = BatchAck.model_validate_json(r.content)
            assert (ack.replayed, ack.counted, ack.model_version) == (True, 0, 1)
        p = await privacy(client, "sum")
        assert (p.reports_counted, p.batches, p.model_version) == (10, 1, 1)
        assert_same_state(analyzer_state(app), reference_state(SUM, [rows[:10]]))


async def test_shuffler_intake_validation_stores_nothing(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    async with stack(settings) as s:
        make = counts_maker(s.config, seed=3)
        _, (good, other) = make(SUM, 2)
        url = "/v1/tasks/sum/encrypted-counts"
        width = ciphertext_width(s.config.key_bits)
        n = s.config.modulus()
        raw = b64decode(good.ct)

        def with_ct(ct: str) -> dict[str, Any]:
            return {"reports": [good.model_dump(), {"key_id": good.key_id, "ct": ct}]}

        for ct in ["***", b64encode(raw[:-1]), b64encode(raw + raw), b64encode(bytes(width)),
                   b64encode(n.to_bytes(width, "big")),
                   b64encode((n * n + 1).to_bytes(width, "big"))]:
            r = await s.shuffler.post(url, json=with_ct(ct))
            assert "reports[1]" in error(r, 422, "bad_ciphertext").message
        r = await s.shuffler.post(url, json={"reports": [
            {**good.model_dump(), "key_id": (s.config.key_id + 1) % 256}]})
        error(r, 422, "unknown_key")
        for body in [{}, {"reports": []}, {"reports": [good.model_dump()] * 1001},
                     {"reports": [{**good.model_dump(), "enc": "AAAA"}]},
                     {"reports": [good.model_dump()], "device": "d1"}]:
            error(await s.shuffler.post(url, json=body), 422, "invalid_request")
        # The wrong transport for the task, or no such task.
        error(await s.shuffler.post("/v1/tasks/shuf/encrypted-counts",
                                    json={"reports": [good.model_dump()]}),
              409, "aggregation_mismatch")
        error(await s.shuffler.post("/v1/tasks/nope/encrypted-counts",
                                    json={"reports": [good.model_dump()]}), 404, "unknown_task")
        hpke = HpkeConfig.model_validate((await s.analyzer.get("/v1/hpke-config")).json())
        body = {"reports": [r.model_dump() for r in report_maker(hpke)(SUM, 1)]}
        error(await s.shuffler.post("/v1/tasks/sum/reports", json=body),
              409, "aggregation_mismatch")

        q = await queue_status(s.shuffler, "sum")
        assert (q.accepted, q.pending, q.batches_formed) == (0, 0, 0)
        # The good reports of a refused upload were not stored: they are still new.
        assert await upload(s.shuffler, [good, other]) == ReportsAccepted(accepted=2,
                                                                            duplicates=0)


async def test_intake_waits_for_the_analyzer_key(tmp_path: Path) -> None:
    """Until the shuffler has fetched the Paillier config, secure-sum uploads get 503 not_ready
    (HPKE tasks are unaffected) and /healthz 503 starting; it keeps retrying and opens intake
    once it gets it."""
    settings = settings_for(tmp_path)
    a_app = analyzer_app(settings)
    async with running(a_app) as a_client:
        config = PaillierConfig.model_validate_json(
            (await a_client.get("/v1/tasks/sum/secure-sum")).content)
        rec = Recorder(httpx.ASGITransport(a_app))
        rec.block_gets = True
        async with running(create_shuffler(settings, analyzer_transport=rec)) as client:
            _, reports = counts_maker(config, seed=4)(SUM, 10)
            body = {"reports": [r.model_dump() for r in reports]}
            await eventually(lambda: _attempts(rec, 3))
            r = await client.post("/v1/tasks/sum/encrypted-counts", json=body)
            error(r, 503, "not_ready")
            assert r.headers["retry-after"] == "1"
            # Not ready: /healthz says what it waits for (so the device is not started yet).
            health = error(await client.get("/healthz"), 503, "starting")
            assert health.message == "waiting for the analyzer: paillier-config"
            assert (await queue_status(client, "sum")).accepted == 0
            rec.block_gets = False
            await eventually(lambda: secure_sum_ready(client))
            assert (await upload(client, reports)).accepted == 10
            await eventually(lambda: acked(client, 1))
            assert (await privacy(a_client, "sum")).reports_counted == 10


async def _attempts(rec: Recorder, n: int) -> bool:
    return sum(path == "/v1/paillier-config" for _, path, _ in rec.requests) >= n


async def test_a_poisoned_batch_is_refused_and_does_not_block_the_others(
    tmp_path: Path,
) -> None:
    """A device can encrypt an out-of-range plaintext (there are no range proofs); the shuffler
    cannot see it, so the batch's sum reaches the analyzer, which refuses it (422) without
    counting anything. The shuffler keeps that batch unacknowledged (retrying, with the error in
    its status) and delivers later batches normally."""
    settings = settings_for(tmp_path)
    async with stack(settings) as s:
        make = counts_maker(s.config, seed=6)
        _, honest = make(SUM, 9)
        evil = PaillierEncryptor.from_config(s.config).encrypt([5])  # slot 0 = 5 > m = 1
        bad = EncryptedCounts(key_id=s.config.key_id,
                              ct=encode_ciphertexts(evil, s.config.key_bits))
        await upload(s.shuffler, [*honest, bad])
        await eventually(lambda: _failing(s.shuffler))
        q = await queue_status(s.shuffler, "sum")
        assert q.last_error is not None and "slot_out_of_range" in q.last_error
        assert (await privacy(s.analyzer, "sum")).reports_counted == 0
        rows, good = make(SUM, 10)
        await upload(s.shuffler, good)
        await eventually(lambda: counted(s.analyzer, "sum", 10))
        q = await queue_status(s.shuffler, "sum")
        p = await privacy(s.analyzer, "sum")
        assert (q.accepted, q.pending, q.batches_formed, q.batches_in_flight) == (20, 0, 2, 1)
        assert (p.reports_counted, p.batches) == (10, 1)
        assert q.accepted == p.reports_counted + q.pending + q.batches_in_flight * SUM.batch_size
        assert_same_state(analyzer_state(s.analyzer_app), reference_state(SUM, [rows]))


async def test_restarts_keep_keys_state_and_count_once(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    rec = Recorder()
    async with stack(settings, rec) as s:
        config = s.config
        hpke_before = (await s.analyzer.get("/v1/hpke-config")).json()
        make = counts_maker(config, seed=5)
        rows1, first = make(SUM, 15)
        await upload(s.shuffler, first)
        await eventually(lambda: acked(s.shuffler, 1))
        # The next batch forms while the analyzer is unreachable: its sum is computed and
        # stored durably in place of its members, and delivery keeps failing.
        rec.block_posts = True
        rows2, second = make(SUM, 5)
        await upload(s.shuffler, second)
        store = s.shuffler_app.state.runtime.store
        pending_ids = store.unacked("sum", 10)
        assert len(pending_ids) == 1
        batch_id = pending_ids[0]
        await eventually(lambda: _has_sum(store, batch_id))
        assert store.batch_members(batch_id) == 0
        await eventually(lambda: _failing(s.shuffler))
        assert (await privacy(s.analyzer, "sum")).reports_counted == 10

    # Both restart on the same data directories; the first delivery's ack is lost.
    rec = Recorder()
    rec.lose_acks = 1
    async with stack(settings, rec) as s:
        assert s.config == config  # same Paillier key (and layout)
        assert (await s.analyzer.get("/v1/hpke-config")).json() == hpke_before
        await eventually(lambda: acked(s.shuffler, 2))
        posts = [body for path, body in rec.posts() if path == "/v1/tasks/sum/batch-sums"]
        assert [b["batch_id"] for b in posts] == [batch_id, batch_id]  # lost ack → re-sent
        assert posts[0] == posts[1]  # the stored sum, unchanged
        q = await queue_status(s.shuffler, "sum")
        p = await privacy(s.analyzer, "sum")
        assert (q.accepted, q.pending, q.batches_acknowledged) == (20, 0, 2)
        assert (p.reports_counted, p.batches, p.model_version) == (20, 2, 2)
        batches = [rows1[:10], np.concatenate([rows1[10:], rows2])]
        assert_same_state(analyzer_state(s.analyzer_app), reference_state(SUM, batches))
        assert not any(path.endswith("/batches") for path, _ in rec.posts())


async def _has_sum(store: Any, batch_id: str) -> bool:
    return bool(store.has_sum(batch_id))


async def _failing(client: httpx.AsyncClient) -> bool:
    return (await queue_status(client, "sum")).last_error is not None


async def test_production_keys_are_2048_bits_and_small_keys_are_refused(tmp_path: Path) -> None:
    # Without a secure-sum task the key is created on first request; the default is 2048 bits.
    plain = make_settings(tmp_path / "plain", tasks=[SHUF])
    async with running(create_analyzer(plain)) as client:
        key_file = tmp_path / "plain" / "analyzer" / PAILLIER_KEY_FILE
        assert not key_file.exists()
        config = PaillierConfig.model_validate_json(
            (await client.get("/v1/paillier-config")).content)
        assert config.key_bits == 2048 and key_file.exists()
        again = PaillierConfig.model_validate_json(
            (await client.get("/v1/paillier-config")).content)
        assert again == config
    # A 1024-bit key left in a data directory is refused by a production analyzer.
    settings = settings_for(tmp_path)
    async with running(analyzer_app(settings)):
        pass
    with pytest.raises(PaillierKeyError):
        async with running(create_analyzer(settings)):
            pass

