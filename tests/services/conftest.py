"""Fixtures for in-process service tests: real SQLite files under tmp_path, real HPKE, the apps'
lifespans running, and httpx clients over ASGI transports."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from shared.crypto import pack_report, seal
from shared.policies import build_policy, randomizer_for
from shared.protocol import (
    EncryptedReport,
    ErrorBody,
    HpkeConfig,
    PrivacyReport,
    ReportsAccepted,
    ShufflerStatus,
    TaskQueueStatus,
    b64decode,
)
from shared.secure_sum import EncryptedCounts, PaillierConfig, PaillierEncryptor, encode_ciphertexts
from shared.settings import Settings, TaskConfig

TOKEN = "test-shuffler-token-0123456789"
L = 5  # shuffle batch size used throughout: small, so tests are fast
# Paillier key size for service tests (create_app(..., paillier_key_bits=...)): small and fast;
# production keys are 2048 bits or more.
PAILLIER_TEST_BITS = 1024


def shuffle_task(
    task_id: str = "shuf", l: int = L, aggregation: str = "reports", **policy: Any
) -> TaskConfig:
    """An SBLB-fixed shuffle task (d = 3, K = 4, batch size l); ``policy`` overrides fields."""
    return TaskConfig.model_validate(
        {
            "id": task_id,
            "threat_model": "shuffle",
            "K": 4,
            "aggregation": aggregation,
            "policy": {"algo": "sblb-fixed", "d": 3, "eps0": 4.0, "batch_size": l, **policy},
        }
    )


def ldp_task(task_id: str = "loc") -> TaskConfig:
    return TaskConfig.model_validate(
        {
            "id": task_id,
            "threat_model": "ldp",
            "K": 4,
            "policy": {"algo": "ldp-linucb", "d": 3, "update_every": 2, "regularizer": "clip"},
        }
    )


def central_task(task_id: str = "cen") -> TaskConfig:
    return TaskConfig.model_validate(
        {
            "id": task_id,
            "threat_model": "central",
            "K": 4,
            "policy": {"algo": "adar-oful", "d": 3, "switching": 0.1},
        }
    )


def make_settings(data_dir: Path, tasks: list[TaskConfig] | None = None, **kw: Any) -> Settings:
    """Settings built directly (tasks and data_dir given, so the default config file is moot)."""
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "shuffler_token": TOKEN,
        "tasks": tasks if tasks is not None else [shuffle_task(), ldp_task(), central_task()],
        "retry_initial": 0.01,
        "retry_max": 0.05,
    }
    values.update(kw)
    return Settings(**values)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path / "data")


@asynccontextmanager
async def running(app: FastAPI, base_url: str = "http://test") -> AsyncIterator[httpx.AsyncClient]:
    """Run the app's lifespan and yield a client talking to it in-process."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base_url) as client:
            yield client


def make_rows(config: TaskConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """n randomized report rows for a task, as a device would produce them."""
    d = config.policy.d
    x = rng.normal(size=(n, d))
    x /= np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True))
    r = rng.uniform(size=n)
    return randomizer_for(config.policy).randomize(x, r, rng)


def encrypt_rows(
    config: TaskConfig, hpke: HpkeConfig, rows: np.ndarray, task: str | None = None
) -> list[tuple[bytes, EncryptedReport]]:
    """(report id, ciphertext) per row, sealed to the analyzer's key for ``task``."""
    rand = randomizer_for(config.policy)
    out = []
    for row in rows:
        report_id, plaintext = pack_report(rand.to_bytes(row))
        out.append(
            (report_id, seal(b64decode(hpke.public_key), hpke.key_id, task or config.id, plaintext))
        )
    return out


ReportMaker = Callable[..., list[EncryptedReport]]


def report_maker(hpke: HpkeConfig, seed: int = 0) -> ReportMaker:
    rng = np.random.default_rng(seed)

    def make(config: TaskConfig, n: int) -> list[EncryptedReport]:
        return [rep for _, rep in encrypt_rows(config, hpke, make_rows(config, n, rng))]

    return make


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


def secure_sum_task(task_id: str = "sum", l: int = 10, **policy: Any) -> TaskConfig:
    """A secure-sum shuffle task: ``shuffle_task`` with aggregation = "secure-sum"."""
    return shuffle_task(task_id, l=l, aggregation="secure-sum", **policy)


CountsMaker = Callable[[TaskConfig, int], tuple[np.ndarray, list[EncryptedCounts]]]


def counts_maker(paillier: PaillierConfig, seed: int = 0) -> CountsMaker:
    """make(config, n) → (report rows, their ``EncryptedCounts``), as a secure-sum device builds
    them: randomize, ``counts`` per report, ``pack`` into slots, Paillier-encrypt, encode."""
    rng = np.random.default_rng(seed)
    encryptor = PaillierEncryptor.from_config(paillier)

    def make(config: TaskConfig, n: int) -> tuple[np.ndarray, list[EncryptedCounts]]:
        rows = make_rows(config, n, rng)
        rand = randomizer_for(config.policy)  # the 0/1 randomizer of sblb (counts in 0..m)
        counts = rand.counts(rows)  # type: ignore[attr-defined]
        l, m = config.batch_size, int(rand.m)  # type: ignore[attr-defined]
        out = [
            EncryptedCounts(
                key_id=paillier.key_id,
                ct=encode_ciphertexts(encryptor.encrypt_counts(c, l, m), paillier.key_bits),
            )
            for c in counts
        ]
        return rows, out

    return make


def reference_state(config: TaskConfig, batches: list[np.ndarray]) -> dict[str, Any]:
    """SBLB fed the plaintext rows of each batch (the reports path's arithmetic)."""
    policy = build_policy(config.policy, np.random.default_rng(0))
    for rows in batches:
        assert policy.ingest(rows) == rows.shape[0]
    return policy.get_state()


def assert_same_state(got: dict[str, Any], want: dict[str, Any]) -> None:
    # Both sides do the same float arithmetic on the same integer counts: equal to rounding.
    assert got.keys() == want.keys()
    for key in want:
        g, w = got[key], want[key]
        if isinstance(w, dict):
            assert_same_state(g, w)
        elif isinstance(w, (list, float)):
            np.testing.assert_allclose(np.asarray(g, float), np.asarray(w, float), rtol=1e-12)
        else:
            assert g == w, key


# ---------------------------------------------------------------------------------------------
# Assertions and polling shared by the service tests


def error(resp: httpx.Response, status: int, code: str | None = None) -> ErrorBody:
    """Assert an ``ErrorBody`` answer (exactly {code, message}, a message for humans) with this
    status and, if given, this code."""
    assert resp.status_code == status, resp.text
    body = ErrorBody.model_validate_json(resp.content)  # strict: no other fields
    assert body.message
    if code is not None:
        assert body.code == code, body
    return body


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 10.0, what: str = "condition"
) -> None:
    """Poll ``check()`` until it is true; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def upload(
    client: httpx.AsyncClient,
    reports: list[EncryptedReport] | list[EncryptedCounts],
    task: str | None = None,
) -> ReportsAccepted:
    """Post reports to the shuffler (HPKE reports or secure-sum counts, by their type) and
    assert 202; ``task`` defaults to ``shuffle_task()``'s or ``secure_sum_task()``'s id."""
    secure = isinstance(reports[0], EncryptedCounts)
    task = task if task is not None else ("sum" if secure else "shuf")
    endpoint = "encrypted-counts" if secure else "reports"
    body = {"reports": [r.model_dump() for r in reports]}
    r = await client.post(f"/v1/tasks/{task}/{endpoint}", json=body)
    assert r.status_code == 202, r.text
    return ReportsAccepted.model_validate_json(r.content)


async def queue_status(client: httpx.AsyncClient, task: str) -> TaskQueueStatus:
    """The shuffler's queue of one task."""
    status = ShufflerStatus.model_validate_json((await client.get("/v1/status")).content)
    return next(t for t in status.tasks if t.task == task)


async def privacy(client: httpx.AsyncClient, task: str) -> PrivacyReport:
    """The analyzer's privacy report of one task (with its counts)."""
    r = await client.get(f"/v1/tasks/{task}/privacy")
    assert r.status_code == 200, r.text
    return PrivacyReport.model_validate_json(r.content)


async def counted(client: httpx.AsyncClient, task: str, n: int) -> bool:
    """Whether the analyzer has counted at least ``n`` reports of ``task``."""
    return (await privacy(client, task)).reports_counted >= n


async def secure_sum_ready(client: httpx.AsyncClient) -> bool:
    """Whether the shuffler has the analyzer's Paillier key (secure-sum intake open)."""
    return (await client.get("/healthz")).json().get("secure_sum_ready") is True
