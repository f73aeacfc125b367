"""The paillier transport (a secure-sum task with secure_sum = "paillier") through the real
services, in-process: devices' Paillier-encrypted counts → shuffler (checked, durable, batched) →
ONE encrypted batch sum with its members' tags → analyzer (tags checked, decrypted only as (Z, U),
range-checked, fed to SBLB, committed exactly once); a poisoned batch is quarantined and blocks
nothing, not even sixteen of them; a re-randomised copy of a report is never counted twice; restarts
keep keys and state and count every report once."""


import asyncio
import math
import secrets
from pathlib import Path
from typing import Any

import numpy as np

from privbandit.services.shuffler.forwarder import WINDOW
from privbandit.shared.crypto.paillier import encode_ciphertexts
from privbandit.shared.protocol.messages import (
    BatchAck,
    HpkeConfig,
    ModelMessage,
    ReportsAccepted,
    b64decode,
)
from privbandit.shared.protocol.paillier import EncryptedCounts, PaillierConfig
from tests.helpers import (
    PAILLIER_TEST_BITS,
    analyzer_totals,
    auth,
    counts_maker,
    error,
    eventually,
    report_maker,
    tag_for,
    upload,
)

from .support import (
    SHUF,
    SUM,
    Recorder,
    Stack,
    acked,
    failing,
    honest_sum,
    rerandomised,
    settings_for,
    stack,
)


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

        make = counts_maker(s.config, s.hpke, seed=1)
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
            assert set(body) == {"batch_id", "key_id", "count", "ct", "members"}
            assert body["count"] == 10 and body["key_id"] == s.config.key_id
            assert len(b64decode(body["ct"])) == lay.ciphertext_bytes
            # Per member: the device's tag, unopened, and a digest — no ciphertext.
            assert len(body["members"]) == 10
            assert all(set(m) == {"tag", "digest"} for m in body["members"])
        # The report ids of counted batches are recorded like HPKE report ids.
        assert analyzer_totals(tmp_path / "data", "sum")["distinct_report_ids"] == 20
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


async def test_a_random_ciphertext_quarantines_its_batch_and_the_task_goes_on(
    tmp_path: Path,
) -> None:
    """A device can encrypt an out-of-range plaintext (there are no range proofs); the shuffler
    cannot see it, so the batch's sum reaches the analyzer, which quarantines it: acknowledged
    (the shuffler moves on), nothing counted, its l reports refused. The other batches and the
    task go on, and the counts reconcile: accepted = counted + refused + pending."""
    settings = settings_for(tmp_path)
    async with stack(settings) as s:
        make = counts_maker(s.config, s.hpke, seed=6)
        _, honest = make(SUM, 9)
        await upload(s.shuffler, [*honest, _random_report(s)])
        await eventually(lambda: acked(s.shuffler, 1))
        q = await s.queue()
        p = await s.privacy()
        assert (q.batches_in_flight, q.last_error) == (0, None)
        assert (p.reports_counted, p.reports_refused, p.batches, p.model_version) == (0, 10, 1, 0)
        rows, good = make(SUM, 10)
        await upload(s.shuffler, good)
        await eventually(lambda: acked(s.shuffler, 2))
        q = await s.queue()
        p = await s.privacy()
        assert (q.accepted, q.pending, q.batches_formed, q.batches_in_flight) == (20, 0, 2, 0)
        assert (p.reports_counted, p.reports_refused, p.batches, p.model_version) == (10, 10, 2, 1)
        assert q.accepted == p.reports_counted + p.reports_refused + q.pending
        s.assert_sblb_of([rows])
        metrics = (await s.shuffler.get("/metrics")).text
        assert 'privbandit_shuffler_batches_quarantined_total{task="sum"} 1.0' in metrics


async def test_sixteen_random_ciphertexts_do_not_halt_the_task(tmp_path: Path) -> None:
    """More poisoned batches than the shuffler's delivery window (16) used to stop a task for
    good; now each is quarantined and acknowledged, and honest batches after them count."""
    settings = settings_for(tmp_path)
    async with stack(settings) as s:
        make = counts_maker(s.config, s.hpke, seed=8)
        poisoned = WINDOW + 2
        for _ in range(poisoned):
            _, honest = make(SUM, 9)
            await upload(s.shuffler, [_random_report(s), *honest])
        rows, good = make(SUM, 10)
        await upload(s.shuffler, good)
        await eventually(lambda: acked(s.shuffler, poisoned + 1), timeout=60)
        p = await s.privacy()
        assert (p.reports_counted, p.reports_refused, p.batches, p.model_version) == (
            10, 10 * poisoned, poisoned + 1, 1)
        q = await s.queue()
        assert q.accepted == p.reports_counted + p.reports_refused + q.pending
        assert q.last_error is None
        s.assert_sblb_of([rows])


def _random_report(s: Stack) -> EncryptedCounts:
    """A uniformly random unit mod n² (no device made it: its plaintext is out of range with
    overwhelming probability), with a valid tag: the shuffler cannot tell it from a report."""
    n = s.config.modulus()
    while True:
        c = secrets.randbelow(n * n)
        if math.gcd(c, n) == 1:
            break
    ct = encode_ciphertexts([c], s.config.key_bits)
    return EncryptedCounts(key_id=s.config.key_id, ct=ct, tag=tag_for(s.hpke, "sum", ct))


async def test_a_rerandomised_copy_of_a_report_is_not_counted_twice(tmp_path: Path) -> None:
    """Issue 13: "a re-randomised copy c·rⁿ of a secure-sum ciphertext is accepted as a new
    report and counted twice". The copy carries its victim's tag (a copier sealing a fresh tag
    instead makes a new report as far as anyone can tell; docs/services.md says what would close
    that):
    the shuffler holds that tag already and drops the copy as a duplicate; and if the copy
    reaches a batch all the same (say, through another shuffler), the analyzer finds that the
    tag's digest is not the copy's and quarantines that batch."""
    settings = settings_for(tmp_path)
    async with stack(settings) as s:
        make = counts_maker(s.config, s.hpke, seed=9)
        rows, reports = make(SUM, 10)
        victim = reports[0]
        copy = rerandomised(s.config, victim)
        assert copy.ct != victim.ct and copy.tag == victim.tag
        assert await upload(s.shuffler, reports) == ReportsAccepted(accepted=10, duplicates=0)
        await eventually(lambda: acked(s.shuffler, 1))
        # After the victim's batch was counted, and while a batch is still filling.
        assert await upload(s.shuffler, [copy]) == ReportsAccepted(accepted=0, duplicates=1)
        _, more = make(SUM, 5)
        await upload(s.shuffler, more)
        assert await upload(s.shuffler, [rerandomised(s.config, more[0])]) == ReportsAccepted(
            accepted=0, duplicates=1)
        q = await s.queue()
        assert (q.accepted, q.pending) == (15, 5)
        # The same copy in a batch another shuffler formed: quarantined, nothing counted twice.
        _, others = make(SUM, 9)
        body = honest_sum(s.config, [copy, *others])
        r = await s.analyzer.post("/v1/tasks/sum/batch-sums", json=body, headers=auth())
        assert BatchAck.model_validate_json(r.content).quarantined
        p = await s.privacy()
        assert (p.reports_counted, p.reports_refused) == (10, 10)
        s.assert_sblb_of([rows])


async def test_restarts_keep_keys_state_and_count_once(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    rec = Recorder()
    async with stack(settings, rec) as s:
        config = s.config
        hpke_before = (await s.analyzer.get("/v1/hpke-config")).json()
        make = counts_maker(config, s.hpke, seed=5)
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
