"""The analyzer's side of secure summation: batch sums the deployment disagrees on are refused
without a state change (their id left unprocessed); sums that cannot be counted — bad ciphertext,
out of range, a tag that does not open or does not match, a report id repeated or counted before —
are quarantined (acknowledged, id processed, nothing fed, reports refused); exactly-once counting
by batch id and report id; production key sizes."""


import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi import FastAPI

from privbandit.services.analyzer.app import create_app as create_analyzer
from privbandit.shared.crypto.keystore import PAILLIER_KEY_FILE
from privbandit.shared.crypto.paillier import (
    PaillierEncryptor,
    PaillierKeyError,
    encode_ciphertexts,
    homomorphic_sum,
)
from privbandit.shared.crypto.slots import ciphertext_width, pack
from privbandit.shared.crypto.tags import ciphertext_digest
from privbandit.shared.protocol.messages import BatchAck, HpkeConfig, b64decode, b64encode
from privbandit.shared.protocol.paillier import EncryptedBatchSum, PaillierConfig
from tests.helpers import (
    auth,
    counts_maker,
    error,
    fresh_members,
    make_settings,
    privacy,
    report_maker,
    running,
    tag_for,
)

from .support import (
    SHUF,
    SUM,
    analyzer_app,
    assert_sblb_of,
    honest_sum,
    rerandomised,
    settings_for,
    sum_body,
)

URL = "/v1/tasks/sum/batch-sums"


@asynccontextmanager
async def _sum_analyzer(
    tmp_path: Path,
) -> AsyncIterator[tuple[FastAPI, Any, PaillierConfig, HpkeConfig]]:
    """A running analyzer of ``settings_for(tmp_path)``: the app, a client, and the secure-sum
    task's Paillier and HPKE configurations it publishes."""
    app = analyzer_app(settings_for(tmp_path))
    async with running(app) as client:
        config = PaillierConfig.model_validate_json(
            (await client.get("/v1/tasks/sum/secure-sum")).content)
        hpke = HpkeConfig.model_validate_json((await client.get("/v1/hpke-config")).content)
        yield app, client, config, hpke


async def test_analyzer_refuses_sums_the_deployment_disagrees_on_without_a_state_change(
    tmp_path: Path,
) -> None:
    async with _sum_analyzer(tmp_path) as (app, client, config, hpke):
        _, reports = counts_maker(config, hpke, seed=2)(SUM, 10)
        good = honest_sum(config, reports)

        # Authentication first.
        error(await client.post(URL, json=good), 401, "unauthorized")
        r = await client.post(URL, json=good, headers={"Authorization": "Bearer wrong-token-000"})
        error(r, 401, "unauthorized")
        # The wrong task or transport.
        error(await client.post("/v1/tasks/nope/batch-sums", json=good, headers=auth()),
              404, "unknown_task")
        error(await client.post("/v1/tasks/shuf/batch-sums", json=good, headers=auth()),
              409, "aggregation_mismatch")
        # A secure-sum task never takes individual reports.
        batch = {"batch_id": secrets.token_hex(16),
                 "reports": [r.model_dump() for r in report_maker(hpke)(SUM, 10)]}
        error(await client.post("/v1/tasks/sum/batches", json=batch, headers=auth()),
              409, "aggregation_mismatch")
        # Another l, another Paillier key, a malformed message.
        short = {**good, "count": 9, "members": good["members"][:9]}
        error(await client.post(URL, json=short, headers=auth()), 422, "batch_size_mismatch")
        error(await client.post(URL, json={**good, "key_id": (config.key_id + 1) % 256},
                                headers=auth()), 422, "unknown_key")
        for body in ({**good, "count": 0}, {**good, "extra": 1}, {**good, "batch_id": "x"},
                     {**good, "count": 9}, {**good, "members": []},
                     {k: v for k, v in good.items() if k != "members"},
                     {**good, "members": [{**good["members"][0], "digest": "AAAA"}] * 10}):
            error(await client.post(URL, json=body, headers=auth()), 422, "invalid_request")
        p = await privacy(client, "sum")
        assert (p.reports_counted, p.reports_refused, p.batches, p.model_version) == (0, 0, 0, 0)
        assert app.state.runtime.store.processed_batches("sum", [good["batch_id"]]) == set()
        # The id was not claimed: the honest sum under it is counted.
        r = await client.post(URL, json=good, headers=auth())
        assert BatchAck.model_validate_json(r.content).counted == 10


def _member_with(body: dict[str, Any], i: int, **update: Any) -> dict[str, Any]:
    members = [dict(m) for m in body["members"]]
    members[i].update(update)
    return {**body, "batch_id": secrets.token_hex(16), "members": members}


async def test_sums_that_cannot_be_counted_are_quarantined_and_acknowledged(
    tmp_path: Path,
) -> None:
    async with _sum_analyzer(tmp_path) as (app, client, config, hpke):
        lay = config.layout
        assert lay is not None
        make = counts_maker(config, hpke, seed=2)
        rows, reports = make(SUM, 11)
        good = honest_sum(config, reports[:10])
        width = ciphertext_width(config.key_bits)
        n = config.modulus()
        s = lay.slot_bits

        def with_ct(ct: str) -> dict[str, Any]:
            return {**good, "batch_id": secrets.token_hex(16), "ct": ct}

        bad_ciphertexts = [
            with_ct("***"),  # not base64
            with_ct(b64encode(b64decode(good["ct"])[:-1])),  # one byte short
            with_ct(b64encode(b64decode(good["ct"]) * 2)),  # two where the layout has one
            with_ct(b64encode(bytes(width))),  # 0
            with_ct(b64encode(n.to_bytes(width, "big"))),  # shares the factors of n
            with_ct(b64encode((n * n).to_bytes(width, "big"))),  # ≥ n²
        ]
        # Decryptable sums that are not l reports with counts in 0..m (valid members).
        out_of_range = [
            sum_body(config, hpke, [lay.batch_size * lay.m + 1], 10),  # slot 0 > l·m
            sum_body(config, hpke, [1 << (lay.c * s)], 10),  # a bit above the last slot
            sum_body(config, hpke, [n - 1], 10),  # a "negative" (wrapped) plaintext
        ]
        # Overflow: 11 reports multiplied into a batch claiming l = 10 (every slot 11 > 10).
        ones = np.ones(lay.c, dtype=np.int64)
        enc = PaillierEncryptor.from_config(config)
        eleven = [enc.encrypt(pack(ones, 10, 1, config.key_bits)) for _ in range(11)]
        out_of_range.append(EncryptedBatchSum(
            batch_id=secrets.token_hex(16), key_id=config.key_id, count=10,
            ct=encode_ciphertexts(homomorphic_sum(eleven, n * n), config.key_bits),
            members=fresh_members(hpke, "sum", 10),
        ).model_dump())
        # An honest sum whose members do not check out.
        tag0 = good["members"][0]["tag"]
        flipped = bytearray(b64decode(tag0["ct"]))
        flipped[0] ^= 1
        other = reports[10]
        shared_id = secrets.token_bytes(16)
        bad_tags = [
            _member_with(good, 0, tag={**tag0, "ct": b64encode(bytes(flipped))}),  # tampered
            _member_with(good, 0, tag=tag_for(hpke, "shuf", reports[0].ct).model_dump()),
            _member_with(good, 0, digest=b64encode(ciphertext_digest(b"another ciphertext"))),
            _member_with(good, 3, tag=other.tag.model_dump()),  # another report's tag
            # Two members carrying the same report id (tags over their own ciphertexts).
            _member_with(_member_with(good, 1, tag=tag_for(hpke, "sum", reports[1].ct,
                                                             shared_id).model_dump()),
                         2, tag=tag_for(hpke, "sum", reports[2].ct, shared_id).model_dump()),
        ]
        quarantined = [*bad_ciphertexts, *out_of_range, *bad_tags]
        for body in quarantined:
            r = await client.post(URL, json=body, headers=auth())
            assert r.status_code == 200, r.text
            ack = BatchAck.model_validate_json(r.content)
            assert (ack.batch_id, ack.replayed, ack.counted, ack.rejected, ack.quarantined) == (
                body["batch_id"], False, 0, 10, True)
            assert ack.model_version == 0
            # Processed: a re-delivery is a replay and counts nothing.
            again = BatchAck.model_validate_json(
                (await client.post(URL, json=body, headers=auth())).content)
            assert again.replayed and again.counted == 0
        k = len(quarantined)
        p = await privacy(client, "sum")
        assert (p.reports_counted, p.reports_refused, p.batches, p.model_version) == (
            0, 10 * k, k, 0)
        rt = app.state.runtime.tasks["sum"]
        assert rt.policy.reports == 0 and rt.quarantined == 10 * k
        metrics = (await client.get("/metrics")).text
        assert f'privbandit_analyzer_batches_total{{outcome="quarantined",task="sum"}} {k}.0' \
            in metrics
        assert f'privbandit_analyzer_reports_quarantined_total{{task="sum"}} {10 * k}.0' \
            in metrics

        # The honest sum is counted once, its report ids recorded ...
        r = await client.post(URL, json=good, headers=auth())
        ack = BatchAck.model_validate_json(r.content)
        assert (ack.replayed, ack.counted, ack.rejected, ack.duplicates, ack.model_version,
                ack.quarantined) == (False, 10, 0, 0, 1, False)
        # ... exactly once: a replay (even with another body) changes nothing ...
        for body in (good, honest_sum(config, reports[1:11], good["batch_id"])):
            r = await client.post(URL, json=body, headers=auth())
            ack = BatchAck.model_validate_json(r.content)
            assert (ack.replayed, ack.counted, ack.model_version) == (True, 0, 1)
        # ... and a report counted before, in a new batch (a shuffler replica, or a shuffler
        # that took a re-randomised copy under its tag), quarantines that batch.
        fresh = make(SUM, 9)[1]
        copy = rerandomised(config, reports[0])
        for member in ([reports[0]], [copy]):
            body = honest_sum(config, [*member, *fresh])
            ack = BatchAck.model_validate_json(
                (await client.post(URL, json=body, headers=auth())).content)
            assert (ack.counted, ack.rejected, ack.quarantined) == (0, 10, True)
        p = await privacy(client, "sum")
        assert (p.reports_counted, p.reports_refused, p.batches, p.model_version) == (
            10, 10 * (k + 2), k + 3, 1)
        assert_sblb_of(app, [rows[:10]])
        # The nine fresh reports were not counted: a batch of them with one new report is.
        body = honest_sum(config, [*fresh, make(SUM, 1)[1][0]])
        assert BatchAck.model_validate_json(
            (await client.post(URL, json=body, headers=auth())).content).counted == 10


async def test_production_keys_are_2048_bits_and_small_keys_are_refused(tmp_path: Path) -> None:
    # Without a Paillier task no request creates a key (an unauthenticated GET must not write
    # a private key: issue 45 item 9); with one, the key is made at start-up, 2048 bits.
    plain = make_settings(tmp_path / "plain", tasks=[SHUF])
    async with running(create_analyzer(plain)) as client:
        key_file = tmp_path / "plain" / "analyzer" / PAILLIER_KEY_FILE
        error(await client.get("/v1/paillier-config"), 404, "no_paillier_key")
        error(await client.get("/v1/tasks/shuf/secure-sum"), 404, "not_secure_sum")
        assert not key_file.exists()
    production = make_settings(tmp_path / "production", tasks=[SUM])
    async with running(create_analyzer(production)) as client:
        key_file = tmp_path / "production" / "analyzer" / PAILLIER_KEY_FILE
        assert key_file.exists()
        config = PaillierConfig.model_validate_json(
            (await client.get("/v1/paillier-config")).content)
        assert config.key_bits == 2048
        again = PaillierConfig.model_validate_json(
            (await client.get("/v1/tasks/sum/secure-sum")).content)
        assert (again.key_id, again.n) == (config.key_id, config.n) and again.layout is not None
    # A 1024-bit key left in a data directory is refused by a production analyzer.
    settings = settings_for(tmp_path)
    async with running(analyzer_app(settings)):
        pass
    with pytest.raises(PaillierKeyError):
        async with running(create_analyzer(settings)):
            pass
