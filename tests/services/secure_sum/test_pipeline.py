"""The secure-sum transport through the real services, in-process: devices' Paillier-encrypted
counts → shuffler (checked, durable, batched) → ONE encrypted batch sum → analyzer (decrypted only
as (Z, U), range-checked, fed to SBLB, committed exactly once); a poisoned batch blocks no other;
restarts keep keys and state and count every report once."""


import asyncio
from pathlib import Path
from typing import Any

import numpy as np

from shared.crypto.paillier import PaillierEncryptor, encode_ciphertexts
from shared.protocol.messages import HpkeConfig, ModelMessage, ReportsAccepted, b64decode
from shared.protocol.secure_sum import EncryptedCounts, PaillierConfig
from tests.helpers import PAILLIER_TEST_BITS, counts_maker, error, eventually, report_maker, upload

from .support import SHUF, SUM, Recorder, acked, failing, settings_for, stack


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
        s.assert_sblb_of(batches)
        model = ModelMessage.model_validate_json(
            (await s.analyzer.get("/v1/tasks/sum/model")).content)
        assert (model.version, model.reports) == (2, 20)
        # ... and was published to model-stream subscribers.
        assert s.analyzer_app.state.runtime.tasks["sum"].feed.current == model

        # Reconciliation: accepted = counted + pending.
        q = await s.queue()
        p = await s.privacy()
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
        await eventually(lambda: s.counted(5, "shuf"))
        assert [p for p, _ in s.recorder.posts()][-1] == "/v1/tasks/shuf/batches"
        assert (await s.privacy("shuf")).ledger.aggregation == "reports"


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
        await eventually(lambda: failing(s.shuffler))
        q = await s.queue()
        assert q.last_error is not None and "slot_out_of_range" in q.last_error
        assert (await s.privacy()).reports_counted == 0
        rows, good = make(SUM, 10)
        await upload(s.shuffler, good)
        await eventually(lambda: s.counted(10))
        # The shuffler marks the batch acknowledged once the analyzer's answer is back.
        await eventually(lambda: acked(s.shuffler, 1))
        q = await s.queue()
        p = await s.privacy()
        assert (q.accepted, q.pending, q.batches_formed, q.batches_in_flight) == (20, 0, 2, 1)
        assert (p.reports_counted, p.batches) == (10, 1)
        assert q.accepted == p.reports_counted + q.pending + q.batches_in_flight * SUM.batch_size
        s.assert_sblb_of([rows])


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
        await eventually(lambda: failing(s.shuffler))
        assert (await s.privacy()).reports_counted == 10

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
        q = await s.queue()
        p = await s.privacy()
        assert (q.accepted, q.pending, q.batches_acknowledged) == (20, 0, 2)
        assert (p.reports_counted, p.batches, p.model_version) == (20, 2, 2)
        batches = [rows1[:10], np.concatenate([rows1[10:], rows2])]
        s.assert_sblb_of(batches)
        assert not any(path.endswith("/batches") for path, _ in rec.posts())


async def _has_sum(store: Any, batch_id: str) -> bool:
    return bool(store.has_sum(batch_id))
