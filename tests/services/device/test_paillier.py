"""The device's secure-sum side: Paillier-encrypted counts of exactly the randomised report,
through the real shuffler and analyzer, identical bytes on every retry, waiting for the key,
re-fetching it on ``unknown_key``, checking the analyzer's parameters, and encryption without
precomputed randomness."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from privbandit.services.analyzer.app import create_app as create_analyzer
from privbandit.services.shuffler.app import create_app as create_shuffler
from privbandit.shared.core.policies import randomizer_for
from privbandit.shared.crypto.keystore import HPKE_KEY_FILE, HpkeKeyStore, PaillierKeyStore
from privbandit.shared.crypto.paillier import PaillierEncryptor, decode_ciphertexts, decrypt_sum
from privbandit.shared.crypto.slots import pack, unpack
from privbandit.shared.crypto.tags import ciphertext_digest, open_tag
from privbandit.shared.protocol.messages import b64decode
from privbandit.shared.protocol.paillier import PaillierConfig, PaillierUpload
from privbandit.shared.settings import Retry
from tests.helpers import (
    FAST_DEVICE,
    PAILLIER_TEST_BITS,
    assert_same_state,
    counted,
    error,
    eventually,
    paillier_ready,
    reference_state,
    running,
)

from .support import (
    SUM,
    FakeShuffler,
    Stack,
    decide,
    decrypt_report,
    device_app,
    expected_counts,
    features,
    give_feedbacks,
    ok,
    outbox_empty,
    secure_feedbacks,
    secure_settings,
    stack,
    status,
)


async def test_secure_sum_feedback_sends_exactly_the_packed_randomized_counts(
    tmp_path: Path,
) -> None:
    """Feedback for a secure-sum task: the shuffler receives ``EncryptedCounts`` at
    /encrypted-counts which, decrypted with the analyzer's Paillier key, are exactly the packed
    counts of the report the task's randomizer made from (x, r); the HPKE task beside it still
    sends HPKE reports."""
    settings = secure_settings(tmp_path)
    rng = np.random.default_rng(20)
    async with stack(settings) as s:
        config = PaillierConfig.model_validate_json(
            (await s.analyzer.get("/v1/tasks/sum/secure-sum")).content)
        s.app.state.runtime.rng = np.random.default_rng(99)  # reproducible for this check only
        chosen = await secure_feedbacks(s, 4, rng)
        await give_feedbacks(s, "shuf", 1, rng)
        await eventually(lambda: outbox_empty(s), what="delivery")
        sent = s.shuffler.encrypted("sum")
        assert len(sent) == 4 and s.shuffler.encrypted("shuf") == []
        assert [t for t, _ in s.shuffler.uploads] == ["shuf"]
        assert {path for path, _ in s.shuffler.bodies} == {
            "/v1/tasks/sum/encrypted-counts", "/v1/tasks/shuf/reports"}
        keys = PaillierKeyStore(Path(settings.data_dir) / "analyzer", PAILLIER_TEST_BITS,
                                allow_small=True)
        want = expected_counts(chosen, seed=99)
        assert want.shape == (4, 9) and want.min() >= 0 and want.max() <= 1
        for report, counts in zip(sent, want, strict=True):
            assert report.key_id == config.key_id == keys.key_id
            plain = decrypt_report(keys, report)
            assert plain == pack(counts, SUM.batch_size, 1, keys.key_bits)
            np.testing.assert_array_equal(
                unpack(plain, 9, SUM.batch_size, 1, keys.key_bits, n_reports=1), counts)
        # Fresh randomness per report: no two ciphertexts alike, even for equal counts.
        assert len({r.ct for r in sent}) == 4
        st = await status(s.device)
        assert (st["feedbacks"], st["uploaded"], st["outbox_pending"], st["dropped"]) == (
            5, 5, 0, 0)
        health = (await s.device.get("/healthz")).json()
        assert health["paillier_keys"] == {"sum": config.key_id}
        metrics = (await s.device.get("/metrics")).text
        assert f'privbandit_device_paillier_key_id{{task="sum"}} {float(config.key_id)}' in metrics
        assert 'privbandit_device_paillier_pool{task="sum"}' in metrics


async def test_secure_sum_through_the_real_shuffler_and_analyzer(tmp_path: Path) -> None:
    """Device → real shuffler → real analyzer: one batch of l = 10 secure-sum reports is counted
    once, and the analyzer's SBLB state equals SBLB fed the device's randomized rows."""
    settings = secure_settings(tmp_path)
    rng = np.random.default_rng(21)
    a_app = create_analyzer(settings, paillier_key_bits=PAILLIER_TEST_BITS)
    async with running(a_app) as analyzer:
        s_app = create_shuffler(settings, analyzer_transport=httpx.ASGITransport(a_app))
        async with running(s_app) as shuffler:
            await eventually(lambda: paillier_ready(shuffler), what="shuffler key")
            app = device_app(settings, httpx.ASGITransport(a_app), httpx.ASGITransport(s_app))
            async with running(app) as device:
                await eventually(lambda: ok(device.get("/healthz")), what="device ready")
                s = Stack(device, analyzer, settings, FakeShuffler(), app)
                app.state.runtime.rng = np.random.default_rng(7)
                chosen = await secure_feedbacks(s, 12, rng)
                await eventually(lambda: counted(analyzer, "sum", 10), what="batch counted")
                await eventually(lambda: outbox_empty(s), what="delivery")
                queue = (await shuffler.get("/v1/status")).json()["tasks"]
                q = next(t for t in queue if t["task"] == "sum")
                assert (q["accepted"], q["pending"], q["batches_acknowledged"]) == (12, 2, 1)
                # The shuffler batches the oldest l reports, and the device uploads in feedback
                # order, so the batch is the first 10 reports (permuted, which a sum ignores).
                rand = randomizer_for(SUM.policy)
                rows_rng = np.random.default_rng(7)
                rows = np.asarray([rand.randomize(x[None, :], np.array([r]), rows_rng)[0]
                                   for x, r in chosen])
                assert_same_state(a_app.state.runtime.tasks["sum"].policy.get_state(),
                                  reference_state(SUM, [rows[:10]]))


async def test_secure_sum_outage_and_restart_resend_identical_bytes(tmp_path: Path) -> None:
    """While the shuffler is down the encrypted counts wait in the outbox; every retry, also
    after a device restart, sends the very bytes encrypted at feedback time (a re-encryption
    would be a different ciphertext, which the shuffler would add to a sum a second time)."""
    settings = secure_settings(tmp_path)
    rng = np.random.default_rng(22)
    down = FakeShuffler(status=503)
    async with stack(settings, down) as s:
        await secure_feedbacks(s, 3, rng)
        await eventually(lambda: _full_attempts(down, 2), what="two failed attempts with all 3")
        st = await status(s.device)
        assert (st["feedbacks"], st["outbox_pending"], st["uploaded"]) == (3, 3, 0)
    tried = [PaillierUpload.model_validate_json(body).reports for _, body in down.bodies]
    # Every attempt sent stored ciphertexts: 3 distinct ones in all, each re-sent unchanged.
    assert len({r.ct for reports in tried for r in reports}) == 3
    full = [body for _, body in down.bodies if len(PaillierUpload.model_validate_json(body)
                                                   .reports) == 3]
    assert len(full) >= 2 and len(set(full)) == 1  # retries are byte-identical
    up = FakeShuffler()
    async with stack(settings, up) as s:
        await eventually(lambda: outbox_empty(s), what="delivery after restart")
        assert [body for _, body in up.bodies] == [full[0]]
        assert up.encrypted("sum") == PaillierUpload.model_validate_json(full[0]).reports
        st = await status(s.device)
        assert (st["feedbacks"], st["outbox_pending"], st["uploaded"]) == (3, 0, 3)


async def _full_attempts(shuffler: FakeShuffler, n: int) -> bool:
    sizes = [len(PaillierUpload.model_validate_json(b).reports) for _, b in shuffler.bodies]
    return sizes.count(3) >= n


async def test_secure_sum_feedback_waits_for_the_paillier_key(tmp_path: Path) -> None:
    """Without the analyzer's Paillier config the device cannot encrypt: feedback for a
    secure-sum task is refused with 503 and the decision stays open; decide still works."""
    settings = secure_settings(tmp_path)
    rng = np.random.default_rng(23)
    async with stack(settings, analyzer_up=False, wait_ready=False) as s:
        health = error(await s.device.get("/healthz"), 503, "starting")
        assert "paillier-config:sum" in health.message
        did = (await decide(s.device, "sum", features(rng)))["decision_id"]
        resp = await s.device.post("/v1/tasks/sum/feedback",
                                   json={"decision_id": did, "reward": 1.0})
        error(resp, 503, "no_paillier_key")
        st = await status(s.device)
        assert (st["feedbacks"], st["outbox_pending"]) == (0, 0)
        db = Path(settings.data_dir) / "device" / "device.sqlite3"
        with sqlite3.connect(db) as conn:  # not consumed: no tombstone
            assert conn.execute("SELECT COUNT(*) FROM used_decisions").fetchone() == (0,)


class Switch(httpx.AsyncBaseTransport):
    """A transport whose target can be changed: the device's analyzer being redeployed."""

    def __init__(self, target: httpx.AsyncBaseTransport) -> None:
        self.target = target

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.target.handle_async_request(request)


async def test_unknown_key_refetches_the_config_and_drops_what_cannot_be_counted(
    tmp_path: Path,
) -> None:
    """The real shuffler knows analyzer B's Paillier key; the device starts on analyzer A's.

    1. The shuffler answers 422 unknown_key; the device re-fetches its config, still gets A's
       key (its items are under the current key), so it keeps them and retries later.
    2. The device's analyzer is redeployed as B: the next unknown_key re-fetch brings B's key;
       the reports under A's key can never be counted, so they are dropped and counted as such.
    3. New feedback is encrypted under B's key, accepted, batched and counted by B.
    """
    # Retry refused uploads soon.
    timing = FAST_DEVICE.model_copy(update={"upload_retry": Retry(initial=0.1, maximum=0.2)})
    dev_settings = secure_settings(tmp_path, "device", device_timing=timing)
    # Two analyzers with different Paillier keys (ids are 8 bits: make sure they differ), and
    # the same HPKE key (the tags of the reports are sealed to it; the shuffler checks its id).
    key_a = PaillierKeyStore(tmp_path / "a" / "analyzer", PAILLIER_TEST_BITS, allow_small=True)
    HpkeKeyStore(tmp_path / "a" / "analyzer")
    while True:
        key_b = PaillierKeyStore(tmp_path / "b" / "analyzer", PAILLIER_TEST_BITS,
                                 allow_small=True)
        if key_b.key_id != key_a.key_id:
            break
        key_b.path.unlink()
    shutil.copy(tmp_path / "a" / "analyzer" / HPKE_KEY_FILE, tmp_path / "b" / "analyzer")
    a_app = create_analyzer(secure_settings(tmp_path, "a"), paillier_key_bits=PAILLIER_TEST_BITS)
    b_app = create_analyzer(secure_settings(tmp_path, "b"), paillier_key_bits=PAILLIER_TEST_BITS)
    rng = np.random.default_rng(24)
    async with running(a_app) as a_client, running(b_app) as b_client:
        s_app = create_shuffler(dev_settings, analyzer_transport=httpx.ASGITransport(b_app))
        async with running(s_app) as shuffler:
            await eventually(lambda: paillier_ready(shuffler), what="shuffler key")
            analyzer = Switch(httpx.ASGITransport(a_app))
            app = device_app(dev_settings, analyzer, httpx.ASGITransport(s_app))
            async with running(app) as device:
                await eventually(lambda: ok(device.get("/healthz")), what="device ready")
                s = Stack(device, a_client, dev_settings, FakeShuffler(), app)
                keys = app.state.runtime.transports["paillier"].keys
                assert keys.get("sum").key_id == key_a.key_id
                await secure_feedbacks(s, 3, rng)
                fetched = keys.fetches
                # 1. refused, re-fetched, same key: kept.
                await eventually(lambda: _fetched_more(keys, fetched + 1), what="re-fetch")
                st = await status(device)
                assert (st["outbox_pending"], st["dropped"]) == (3, 0)
                health = (await device.get("/healthz")).json()
                assert "does not know the analyzer's current Paillier key" in (
                    health["last_upload_error"])
                # 2. the analyzer is redeployed with key B.
                analyzer.target = httpx.ASGITransport(b_app)
                await eventually(lambda: _dropped(device, 3), what="stale reports dropped")
                assert keys.get("sum").key_id == key_b.key_id
                st = await status(device)
                assert (st["feedbacks"], st["outbox_pending"], st["uploaded"]) == (3, 0, 0)
                metrics = (await device.get("/metrics")).text
                assert "privbandit_device_dropped_reports 3.0" in metrics
                assert 'privbandit_device_upload_events_total{event="dropped"} 3.0' in metrics
                # 3. new reports under B's key go through and are counted by B.
                await secure_feedbacks(s, 10, rng)
                await eventually(lambda: counted(b_client, "sum", 10), what="counted by B")
                # B can count a report before the device has committed the shuffler's 202 for
                # it (the shuffler batches what it accepted at once): wait for the device too.
                await eventually(lambda: _uploaded(device, 10), what="the device's uploads")
                st = await status(device)
                assert (st["feedbacks"], st["uploaded"], st["dropped"]) == (13, 10, 3)
        assert (await b_client.get("/v1/tasks/sum/privacy")).json()["reports_counted"] == 10
        assert (await a_client.get("/v1/tasks/sum/privacy")).json()["reports_counted"] == 0


async def _fetched_more(keys: Any, n: int) -> bool:
    return keys.fetches >= n


async def _dropped(client: httpx.AsyncClient, n: int) -> bool:
    return (await status(client))["dropped"] >= n


async def _uploaded(client: httpx.AsyncClient, n: int) -> bool:
    return (await status(client))["uploaded"] >= n


def test_the_device_checks_the_analyzers_secure_sum_parameters() -> None:
    """A config whose layout differs from what the device derives (c, m, l), a task the
    analyzer does not run as secure-sum, or a key below the minimum is refused."""
    from privbandit.services.device.transports.paillier import ConfigMismatch, check_config
    from privbandit.shared.crypto.paillier import generate_keypair
    from privbandit.shared.crypto.slots import layout
    from privbandit.shared.protocol.messages import TaskInfo
    from privbandit.shared.protocol.paillier import paillier_config

    public, _ = generate_keypair(512, allow_small=True)
    info = TaskInfo(id="sum", threat_model="shuffle", algo="sblb-fixed", d=3, K=4,
                    batch_size=10, aggregation="secure-sum", policy=SUM.policy.model_dump())
    good = paillier_config(public.n, layout(9, 10, 1, 512))
    assert check_config(SUM, info, good, 512) == good.layout
    bad = [
        (info, paillier_config(public.n, layout(9, 10, 2, 512)), 512),  # m = 2
        (info, paillier_config(public.n, layout(9, 20, 1, 512)), 512),  # l = 20
        (info, paillier_config(public.n, layout(14, 10, 1, 512)), 512),  # d = 4
        (info, paillier_config(public.n), 512),  # no layout
        (info, good, 2048),  # key too small
        (info.model_copy(update={"aggregation": "reports"}), good, 512),
        (info.model_copy(update={"batch_size": 20}),
         paillier_config(public.n, layout(9, 20, 1, 512)), 512),  # analyzer and device disagree
    ]
    for task_info, config, min_bits in bad:
        with pytest.raises(ConfigMismatch):
            check_config(SUM, task_info, config, min_bits)


async def test_encryption_without_precomputed_randomness_runs_off_the_event_loop(
    tmp_path: Path,
) -> None:
    """With the pool empty, a report is still encrypted correctly (r^n computed on the spot, in
    a worker thread that releases the GIL) and counted as a fallback; its tag binds a fresh
    report id to its ciphertext bytes."""
    from privbandit.services.device.transports.paillier import TaskKey
    from privbandit.services.device.transports.refiller import PoolRefiller
    from privbandit.shared.crypto.paillier import generate_keypair
    from privbandit.shared.crypto.slots import layout
    from privbandit.shared.protocol.paillier import paillier_config

    public, private = generate_keypair(512, allow_small=True)
    config = paillier_config(public.n, layout(9, 10, 1, 512))
    assert config.layout is not None
    enc = PaillierEncryptor.from_config(config)
    key = TaskKey(config, config.layout, enc, PoolRefiller(enc, 1))  # refiller never started
    assert not key.encrypt_inline_ok()
    counts = np.array([1, 0, 1, 1, 0, 0, 1, 0, 1])
    hpke = HpkeKeyStore(tmp_path / "hpke")
    report = await asyncio.to_thread(
        key.encrypt_in_thread, counts, "sum", hpke.public_key_bytes, hpke.key_id)
    assert enc.fallbacks == 1
    (plain,) = decrypt_sum(private, decode_ciphertexts(report.ct, int(public.n), 1))
    np.testing.assert_array_equal(unpack([plain], 9, 10, 1, 512, n_reports=1), counts)
    report_id, digest = open_tag(hpke.private_key, hpke.key_id, "sum", report.tag)
    assert digest == ciphertext_digest(b64decode(report.ct)) and len(report_id) == 16
    again = key.encrypt(counts, "sum", hpke.public_key_bytes, hpke.key_id)
    assert open_tag(hpke.private_key, hpke.key_id, "sum", again.tag)[0] != report_id
