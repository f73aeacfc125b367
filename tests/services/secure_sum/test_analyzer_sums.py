"""The analyzer's side of secure summation: batch sums refused without a state change (and their
id left unprocessed), exactly-once counting, and production key sizes."""


import secrets
from pathlib import Path

import numpy as np
import pytest

from services.analyzer.app import create_app as create_analyzer
from shared.crypto.keystore import PAILLIER_KEY_FILE
from shared.crypto.paillier import (
    PaillierEncryptor,
    PaillierKeyError,
    encode_ciphertexts,
    homomorphic_sum,
)
from shared.crypto.slots import ciphertext_width, pack
from shared.protocol.messages import BatchAck, HpkeConfig, b64decode, b64encode
from shared.protocol.secure_sum import EncryptedBatchSum, PaillierConfig
from tests.helpers import auth, counts_maker, error, make_settings, privacy, report_maker, running

from .support import SHUF, SUM, analyzer_app, assert_sblb_of, honest_sum, settings_for, sum_body


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
        assert_sblb_of(app, [rows[:10]])


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
