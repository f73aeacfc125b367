"""What the analyzer's tests share: the three tasks of the ``settings`` fixture, a batch body,
the analyzer's HPKE config and model, reports re-sent under report ids already used, a
Server-Sent Events reader, and encrypted batch sums (honest or out of range) as a shuffler would
post them."""

from __future__ import annotations

import secrets
from collections.abc import Callable

import httpx
import numpy as np

from privbandit.shared.core.policies import randomizer_for
from privbandit.shared.crypto.hpke import seal
from privbandit.shared.crypto.paillier import PaillierEncryptor, encode_ciphertexts, homomorphic_sum
from privbandit.shared.crypto.slots import ciphertext_width
from privbandit.shared.protocol.messages import (
    BatchAck,
    BatchUpload,
    EncryptedReport,
    HpkeConfig,
    ModelMessage,
    b64decode,
)
from privbandit.shared.protocol.paillier import EncryptedBatchSum, EncryptedCounts, PaillierConfig
from privbandit.shared.settings import TaskConfig
from tests.helpers import (
    auth,
    central_task,
    fresh_members,
    ldp_task,
    privacy,
    shuffle_task,
    sum_members,
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


async def model_of(client: httpx.AsyncClient, task_id: str) -> ModelMessage:
    """The model the analyzer publishes for ``task_id``."""
    r = await client.get(f"/v1/tasks/{task_id}/model")
    return ModelMessage.model_validate_json(r.content)


def resealed(
    hpke: HpkeConfig, task: TaskConfig, report_ids: list[bytes], rows: np.ndarray
) -> list[EncryptedReport]:
    """A device re-encrypting reports under report ids it has already sent: ``rows`` of ``task``
    sealed to the analyzer's ``hpke`` key, each under its id of ``report_ids`` (fresh
    ciphertexts, the same ids)."""
    rand = randomizer_for(task.policy)
    pk = b64decode(hpke.public_key)
    return [seal(pk, hpke.key_id, task.id, rid + rand.to_bytes(row))
            for rid, row in zip(report_ids, rows, strict=True)]


async def assert_refused_alone(
    analyzer: httpx.AsyncClient, task_id: str, report: EncryptedReport, why: str
) -> None:
    """A batch of one forged ``report`` is answered 200 with the report rejected, the model is
    unchanged, and the ledger counts one refused report and nothing counted."""
    before = (await analyzer.get(f"/v1/tasks/{task_id}/model")).json()
    resp = await analyzer.post(f"/v1/tasks/{task_id}/batches",
                               json=batch([report], secrets.token_hex(16)), headers=auth())
    assert resp.status_code == 200, (why, resp.text)
    ack = BatchAck.model_validate_json(resp.content)
    assert (ack.counted, ack.rejected) == (0, 1), why
    assert (await analyzer.get(f"/v1/tasks/{task_id}/model")).json() == before, why
    report_ = await privacy(analyzer, task_id)
    assert (report_.reports_counted, report_.reports_refused) == (0, 1), why


async def assert_row_refused_alone(
    analyzer: httpx.AsyncClient, task: TaskConfig, row: list[float], why: str,
    sealed: Callable[[HpkeConfig, TaskConfig, list[float]], EncryptedReport],
) -> HpkeConfig:
    """``assert_refused_alone`` for a forged ``row`` of ``task``, sealed by ``sealed`` to the
    analyzer's HPKE config (which is returned, for a control report)."""
    hpke = await hpke_of(analyzer)
    await assert_refused_alone(analyzer, task.id, sealed(hpke, task, row), why)
    return hpke


async def next_event(lines: object) -> dict[str, str]:
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


def batch_sum(
    config: PaillierConfig, reports: list[EncryptedCounts], batch_id: str | None = None
) -> EncryptedBatchSum:
    """The homomorphic sum of encrypted reports, as the shuffler forms it."""
    assert config.layout is not None
    n, width = config.modulus(), ciphertext_width(config.key_bits)
    cts = []
    for rep in reports:
        raw = b64decode(rep.ct)
        cts.append([int.from_bytes(raw[j * width:(j + 1) * width], "big")
                    for j in range(config.layout.plaintexts)])
    return EncryptedBatchSum(
        batch_id=batch_id or secrets.token_hex(16), key_id=config.key_id, count=len(reports),
        ct=encode_ciphertexts(homomorphic_sum(cts, n * n), config.key_bits),
        members=sum_members(reports),
    )


def out_of_range_sum(
    config: PaillierConfig, hpke: HpkeConfig, task: str, batch_id: str | None = None
) -> EncryptedBatchSum:
    """A decryptable sum (with valid members) whose first slot exceeds l·m: never l honest
    reports."""
    assert config.layout is not None
    lay = config.layout
    enc = PaillierEncryptor.from_config(config)
    plaintexts = [lay.batch_size * lay.m + 1] + [0] * (lay.plaintexts - 1)
    return EncryptedBatchSum(
        batch_id=batch_id or secrets.token_hex(16), key_id=config.key_id, count=lay.batch_size,
        ct=encode_ciphertexts(enc.encrypt(plaintexts), config.key_bits),
        members=fresh_members(hpke, task, lay.batch_size),
    )
