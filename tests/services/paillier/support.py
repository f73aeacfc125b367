"""What the secure-sum service tests share: the tasks, a recording shuffler → analyzer transport
that can fail on demand, a ``stack`` of the real analyzer and shuffler in-process, and batch sums
made as an honest (or dishonest) shuffler would.

Keys are 1024 bits (``PAILLIER_TEST_BITS``) except in the test of the production default."""


import json
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from fastapi import FastAPI

from privbandit.services.analyzer.app import create_app as create_analyzer
from privbandit.services.shuffler.app import create_app as create_shuffler
from privbandit.shared.crypto.paillier import PaillierEncryptor, encode_ciphertexts, homomorphic_sum
from privbandit.shared.crypto.slots import ciphertext_width
from privbandit.shared.protocol.messages import (
    HpkeConfig,
    PrivacyReport,
    TaskQueueStatus,
    b64decode,
)
from privbandit.shared.protocol.paillier import EncryptedBatchSum, EncryptedCounts, PaillierConfig
from privbandit.shared.settings import Settings
from tests.helpers import (
    PAILLIER_TEST_BITS,
    assert_same_state,
    counted,
    eventually,
    fresh_members,
    make_settings,
    paillier_ready,
    privacy,
    queue_status,
    reference_state,
    running,
    secure_sum_task,
    shuffle_task,
    sum_members,
)

SUM = secure_sum_task("sum", l=10)  # sblb-fixed, d = 3 (c = 9 counts), m = 1, l = 10
SHUF = shuffle_task()  # an HPKE-report task beside it (l = 5)


def settings_for(tmp_path: Path, **kw: Any) -> Settings:
    return make_settings(tmp_path / "data", tasks=[SUM, SHUF], **kw)


def analyzer_app(settings: Settings, init: bool = False) -> FastAPI:
    return create_analyzer(settings, paillier_key_bits=PAILLIER_TEST_BITS, init=init)


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
class ServiceStack:
    """The real analyzer and shuffler apps and their clients, the shuffler posting to the
    analyzer through ``recorder`` (what this package's and the prio3 package's stacks share)."""

    analyzer: httpx.AsyncClient
    shuffler: httpx.AsyncClient
    analyzer_app: FastAPI
    shuffler_app: FastAPI
    recorder: Recorder

    async def queue(self, task: str = "sum") -> TaskQueueStatus:
        """The shuffler's queue of a task."""
        return await queue_status(self.shuffler, task)

    async def privacy(self, task: str = "sum") -> PrivacyReport:
        """The analyzer's privacy report of a task (with its counts)."""
        return await privacy(self.analyzer, task)


@dataclass
class Stack(ServiceStack):
    config: PaillierConfig  # the secure-sum task's config (with layout)
    hpke: HpkeConfig  # the analyzer's HPKE config (secure-sum reports' tags are sealed to it)
    made: list[np.ndarray] = field(default_factory=list)

    async def counted(self, n: int, task: str = "sum") -> bool:
        """Whether the analyzer has counted at least ``n`` reports of the task."""
        return await counted(self.analyzer, task, n)

    def assert_sblb_of(self, batches: list[np.ndarray]) -> None:
        assert_sblb_of(self.analyzer_app, batches)


@asynccontextmanager
async def stack(
    settings: Settings, recorder: Recorder | None = None, wait_ready: bool = True,
    init: bool = False,
) -> AsyncIterator[Stack]:
    """Real analyzer and shuffler apps, the shuffler posting to the analyzer in-process
    (``init``: the analyzer started with ``--init``)."""
    a_app = analyzer_app(settings, init)
    async with running(a_app) as a_client:
        rec = recorder if recorder is not None else Recorder()
        rec.inner = httpx.ASGITransport(a_app)
        s_app = create_shuffler(settings, analyzer_transport=rec)
        async with running(s_app) as s_client:
            r = await a_client.get("/v1/tasks/sum/secure-sum")
            assert r.status_code == 200, r.text
            config = PaillierConfig.model_validate_json(r.content)
            hpke = HpkeConfig.model_validate_json((await a_client.get("/v1/hpke-config")).content)
            if wait_ready:
                await eventually(lambda: paillier_ready(s_client))
            yield Stack(a_client, s_client, a_app, s_app, rec, config, hpke)


async def acked(client: httpx.AsyncClient, n: int) -> bool:
    return (await queue_status(client, "sum")).batches_acknowledged >= n


def analyzer_state(app: FastAPI, task: str = "sum") -> dict[str, Any]:
    return app.state.runtime.tasks[task].policy.get_state()


def assert_sblb_of(app: FastAPI, batches: list[np.ndarray]) -> None:
    """The analyzer's SBLB state of the secure-sum task equals SBLB fed these plaintext rows."""
    assert_same_state(analyzer_state(app), reference_state(SUM, batches))


def sum_body(
    config: PaillierConfig, hpke: HpkeConfig, plaintexts: list[int], count: int,
    batch_id: str | None = None,
) -> dict[str, Any]:
    """An EncryptedBatchSum of freshly encrypted plaintexts with ``count`` valid members (what a
    shuffler would post)."""
    enc = PaillierEncryptor.from_config(config)
    return EncryptedBatchSum(
        batch_id=batch_id or secrets.token_hex(16),
        key_id=config.key_id,
        count=count,
        ct=encode_ciphertexts(enc.encrypt(plaintexts), config.key_bits),
        members=fresh_members(hpke, SUM.id, count),
    ).model_dump()


def rerandomised(config: PaillierConfig, report: EncryptedCounts) -> EncryptedCounts:
    """A copy c·rⁿ mod n² of a report's ciphertexts (the same counts under fresh randomness),
    keeping its tag: what anyone who sees c can make without any key."""
    n = config.modulus()
    width = ciphertext_width(config.key_bits)
    raw = b64decode(report.ct)
    cts = []
    for j in range(len(raw) // width):
        c = int.from_bytes(raw[j * width:(j + 1) * width], "big")
        r = secrets.randbelow(n - 2) + 2
        cts.append(c * pow(r, n, n * n) % (n * n))
    return report.model_copy(update={"ct": encode_ciphertexts(cts, config.key_bits)})


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
        ct=encode_ciphertexts(total, config.key_bits), members=sum_members(reports),
    ).model_dump()


async def failing(client: httpx.AsyncClient) -> bool:
    return (await queue_status(client, "sum")).last_error is not None
