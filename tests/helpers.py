"""Helpers shared by the tests (fixtures live in the conftest files and use these).

Services: task and settings builders, report and count makers (real HPKE, real Paillier), clients
over ASGI transports with the apps' lifespans running, and small polling and assertion helpers.
End to end: the small e2e deployment config, the command line as the CLI runs it, and crash runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import secrets
import sqlite3
import time
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import tomli_w
from fastapi import FastAPI

from privbandit.demo import (
    DemoOptions,
    Driver,
    Snapshot,
    fetch_task,
    reconcile,
    run_demo_against,
    snapshot,
    wait_quiescent,
)
from privbandit.launcher import Cluster, local_cluster
from privbandit.services_cmd import add_demo_parser, add_up_parser
from privbandit.shared.core.policies import build_policy, randomizer_for
from privbandit.shared.crypto.hpke import pack_report, seal
from privbandit.shared.crypto.paillier import PaillierEncryptor, encode_ciphertexts
from privbandit.shared.crypto.slots import layout_for
from privbandit.shared.crypto.tags import ciphertext_digest, make_tag
from privbandit.shared.protocol.messages import (
    EncryptedReport,
    ErrorBody,
    HpkeConfig,
    PrivacyReport,
    ReportsAccepted,
    ShufflerStatus,
    TaskQueueStatus,
    b64decode,
    b64encode,
)
from privbandit.shared.protocol.paillier import EncryptedCounts, PaillierConfig, SumMember
from privbandit.shared.settings import DeviceTiming, Retry, Settings, TaskConfig
from tests.pg_server import PG_SERVER  # re-exported: the tests' server (trust authentication)

# Every wait and deadline in the tests is its nominal time times this factor, so that a slow or
# busy machine is given time rather than failing; a wait only bounds a hang, it asserts nothing
# about speed (the few product claims on time, e.g. a takeover < 10 s, are not scaled).
TIME_SCALE_ENV = "PRIVBANDIT_TEST_TIME_SCALE"


def time_scale() -> float:
    """The factor of ``PRIVBANDIT_TEST_TIME_SCALE`` (default 1; must be positive)."""
    scale = float(os.environ.get(TIME_SCALE_ENV, "1"))
    if not scale > 0:
        raise ValueError(f"{TIME_SCALE_ENV} must be positive, not {scale}")
    return scale


def patience(seconds: float) -> float:
    """A wait of nominally ``seconds``, scaled by ``time_scale()``."""
    return seconds * time_scale()


def deadline(seconds: float) -> float:
    """The ``time.monotonic()`` instant ``patience(seconds)`` from now."""
    return time.monotonic() + patience(seconds)


def patient_tries(tries: int) -> int:
    """A number of retried attempts (with capped backoff, e.g. the demo driver's) scaled by
    ``time_scale()``: beyond the first few, each waits the cap, so the time they span scales
    about as a deadline does."""
    return math.ceil(tries * time_scale())


TOKEN = "test-shuffler-token-0123456789abcdef"
L = 5  # shuffle batch size used throughout: small, so tests are fast
# Paillier key size for service tests (create_app(..., paillier_key_bits=...)): small and fast;
# production keys are 2048 bits or more.
PAILLIER_TEST_BITS = 1024


def shuffle_task(
    task_id: str = "shuf", l: int = L, aggregation: str = "reports",
    secure_sum: str = "paillier", **policy: Any,
) -> TaskConfig:
    """An SBLB-fixed shuffle task (d = 3, K = 4, batch size l); ``policy`` overrides fields.
    A ``secure-sum`` one runs the Paillier transport unless ``secure_sum`` says ``prio3`` (the
    tests of the Paillier transport predate the prio3 default; tests/services/prio3 has its
    own tasks). A ``ddp-linucb`` task on Paillier takes the device-share design unless told
    (the aggregators' noise needs prio3)."""
    if (policy.get("algo") == "ddp-linucb" and aggregation == "secure-sum"
            and secure_sum == "paillier"):
        policy.setdefault("noise", "devices")
    return TaskConfig.model_validate(
        {
            "id": task_id,
            "threat_model": "shuffle",
            "K": 4,
            "aggregation": aggregation,
            "secure_sum": secure_sum,
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


# Device timings for tests: the ASGI transport cannot stream, so the device polls: poll and retry
# fast; keep a small pool of precomputed Paillier randomness.
FAST_DEVICE = DeviceTiming(
    poll_interval=0.02, fetch_retry=Retry(initial=0.05, maximum=0.05), paillier_pool=16
)


# Stores ``make_settings`` gives the analyzer and the shuffler unless told: set per test by the
# ``store`` fixture of the store-parametrised test packages (``"sqlite"`` or a schema's URL).
STORES: dict[str, str] = {}


def schema_url(schema: str, server: str = PG_SERVER) -> str:
    """The URL of ``schema`` in the test database (its tables go there: search_path)."""
    sep = "&" if "?" in server else "?"
    return f"{server}{sep}options=-csearch_path%3D{schema}"


@contextmanager
def pg_schemas(*names: str) -> Iterator[dict[str, str]]:
    """Fresh, uniquely named schemas in the test database, one per name (name → URL), dropped
    afterwards: tests never see each other's rows, and parallel runs cannot collide."""
    import psycopg

    tag = f"t{secrets.token_hex(6)}"
    schemas = {name: f"{tag}_{name}" for name in names}
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        for schema in schemas.values():
            conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield {name: schema_url(schema) for name, schema in schemas.items()}
    finally:
        with psycopg.connect(PG_SERVER, autocommit=True) as conn:
            for schema in schemas.values():
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def make_settings(data_dir: Path, tasks: list[TaskConfig] | None = None, **kw: Any) -> Settings:
    """Settings built directly (tasks and data_dir given, so the default config file is moot);
    the analyzer's and the shuffler's stores are ``STORES``' (SQLite if unset)."""
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "shuffler_token": TOKEN,
        "tasks": tasks if tasks is not None else [shuffle_task(), ldp_task(), central_task()],
        "retry_initial": 0.01,
        "retry_max": 0.05,
        "device_timing": FAST_DEVICE,
    }
    for service in ("analyzer", "shuffler"):
        if service in STORES:
            values[service] = {"port": 8701 if service == "analyzer" else 8702,
                               "store": STORES[service]}
    values.update(kw)
    return Settings(**values)


@asynccontextmanager
async def running(app: FastAPI, base_url: str = "http://test") -> AsyncIterator[httpx.AsyncClient]:
    """Run the app's lifespan and yield a client talking to it in-process, once the app is
    ready (the analyzer computes its tasks' ledgers in a thread at start-up, answering 503
    meanwhile)."""
    async with app.router.lifespan_context(app):
        wait = getattr(getattr(app.state, "runtime", None), "wait_for_ledgers", None)
        if wait is not None:
            assert await asyncio.to_thread(wait, patience(120)), "the ledgers never finished"
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


def tag_for(
    hpke: HpkeConfig, task: str, ct: str, report_id: bytes | None = None
) -> EncryptedReport:
    """A secure-sum report's tag for ciphertext ``ct`` (base64), as a device seals it: a fresh
    report id (or ``report_id``) and the digest of the ciphertext bytes."""
    rid = report_id if report_id is not None else secrets.token_bytes(16)
    return make_tag(b64decode(hpke.public_key), hpke.key_id, task, rid, b64decode(ct))


def counts_maker(paillier: PaillierConfig, hpke: HpkeConfig, seed: int = 0) -> CountsMaker:
    """make(config, n) → (report rows, their ``EncryptedCounts``), as a secure-sum device builds
    them: randomize, ``counts`` per report, ``pack`` into slots, Paillier-encrypt, encode, tag
    (sealed to the analyzer's HPKE key ``hpke``)."""
    rng = np.random.default_rng(seed)
    encryptor = PaillierEncryptor.from_config(paillier)

    def make(config: TaskConfig, n: int) -> tuple[np.ndarray, list[EncryptedCounts]]:
        rows = make_rows(config, n, rng)
        rand = randomizer_for(config.policy)  # the 0/1 randomizer of sblb (counts in 0..m)
        counts = rand.counts(rows)  # type: ignore[attr-defined]
        return rows, encrypt_counts(config, paillier, hpke, counts, encryptor)

    return make


def encrypt_counts(
    config: TaskConfig, paillier: PaillierConfig, hpke: HpkeConfig, counts: np.ndarray,
    encryptor: PaillierEncryptor | None = None, task: str | None = None,
) -> list[EncryptedCounts]:
    """One ``EncryptedCounts`` per row of ``counts`` (each in 0..m; for ``ddp-linucb`` signed
    values in ±O), as a secure-sum device builds it: pack into the task's slots, Paillier-encrypt,
    encode, tag (sealed to ``hpke`` for ``task``, default the config's id)."""
    encryptor = encryptor or PaillierEncryptor.from_config(paillier)
    lay = layout_for(config, paillier.key_bits)
    out = []
    for c in counts:
        ct = encode_ciphertexts(encryptor.encrypt_report(c, lay), paillier.key_bits)
        out.append(EncryptedCounts(key_id=paillier.key_id, ct=ct,
                                   tag=tag_for(hpke, task or config.id, ct)))
    return out


def sum_members(reports: list[EncryptedCounts]) -> list[SumMember]:
    """The members of a batch sum of ``reports`` as an honest shuffler forwards them: each
    report's tag and the digest of its ciphertext bytes."""
    return [SumMember(tag=r.tag, digest=b64encode(ciphertext_digest(b64decode(r.ct))))
            for r in reports]


def fresh_members(hpke: HpkeConfig, task: str, n: int) -> list[SumMember]:
    """n valid members (fresh report ids, tags of random ciphertext bytes): for sums made up
    directly from plaintexts, whose tags must pass so that the sum itself is what is tested."""
    out = []
    for _ in range(n):
        ct = secrets.token_bytes(32)
        out.append(SumMember(tag=tag_for(hpke, task, b64encode(ct)),
                             digest=b64encode(ciphertext_digest(ct))))
    return out


class BatchRecorder:
    """Wraps a batched policy's ingest: per batch, its length and ``what(randomizer)`` of the
    randomizer its devices used (e.g. the length a Skellam share was sized for, or an ε0)."""

    def __init__(self, policy: Any, what: Callable[[Any], Any]) -> None:
        self.policy, self.what, self.batches = policy, what, []
        self._ingest = policy.ingest
        policy.ingest = self.ingest

    def ingest(self, rows: np.ndarray) -> int:
        self.batches.append((rows.shape[0], self.what(self.policy.randomizer)))
        return int(self._ingest(rows))


def run_recording_batches(
    config: Any, T: int, what: Callable[[Any], Any], K: int = 4, checkpoints: int = 5
) -> tuple[list[tuple[int, Any]], Any, Any]:
    """Run ``config``'s policy for T users of the linear environment (seeds 0–3) and record each
    batch (``BatchRecorder``): (batches, the run's result, the policy)."""
    from privbandit.shared.core.environments import make_environment
    from privbandit.shared.core.simulator import checkpoints_for, run_once

    policy = build_policy(config, np.random.default_rng(0))
    rec = BatchRecorder(policy, what)
    env = make_environment("linear", config.d, K, np.random.default_rng(1))
    result = run_once(policy, env, T, np.random.default_rng(2), np.random.default_rng(3),
                      checkpoints_for(T, checkpoints))
    return rec.batches, result, policy


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
    """Poll ``check()`` until it is true; fail after ``patience(timeout)`` seconds."""
    loop = asyncio.get_running_loop()
    until = loop.time() + patience(timeout)
    while not await check():
        if loop.time() > until:
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


async def paillier_ready(client: httpx.AsyncClient) -> bool:
    """Whether the shuffler has the analyzer's Paillier key (Paillier intake open)."""
    return (await client.get("/healthz")).json().get("paillier_ready") is True


# ---------------------------------------------------------------------------------------------
# End to end

# The packaged small deployment, with the e2e shuffler token.
E2E_TOKEN = "e2e-shuffler-token-0123456789abcdef"
# A device pool of 16 Paillier obfuscators per secure-sum task instead of 256: the config has
# one such task (small-ddp), and every device start (every cluster, every device restart of a
# crash test) otherwise spent ~2 s of CPU filling the pool with 2048-bit r^n mod n² that few of
# its tests use, on cores the other tests share. What an encryption does is unchanged (an empty
# pool only means r^n is computed on the request path: ``services.device.transports.paillier``);
# the pool and its worker processes at the default size are tested in ``tests/services/device``.
E2E_PAILLIER_POOL = 16
# The packaged small config as the e2e tests run it: that pool, and no shuffler token.
SMALL_CONFIG = (
    (resources.files("privbandit.shared") / "defaults" / "small.toml").read_text("utf-8")
    + f"\n[device_timing]\npaillier_pool = {E2E_PAILLIER_POOL}\n"
)
E2E_CONFIG = f'shuffler_token = "{E2E_TOKEN}"\n' + SMALL_CONFIG

TASKS = {"shuffle": "small-shuffle", "ldp": "small-ldp", "central": "small-central"}
# Their batch lengths l (shuffle batches; pass-through tasks are batches of one).
BATCH = {"shuffle": 20, "ldp": 1, "central": 1}
# The crash tests' growing batch schedule (issue 22): 20, 40, 80, then 160 for ever (cumulative
# 20, 60, 140, 300, 460, 620): a kill a fifth of the way into 600–700 users falls after batch 1
# and before the cap. sblb's ε0 follows it from a central target of (1, 1e-6).
CRASH_SCHEDULE = "geometric:20,2,160"
SBLB_SCHEDULED = {"eps0": None, "epsilon": 1.0, "batch_schedule": CRASH_SCHEDULE}


def with_policy(config: Path, task_id: str, out: Path, only: bool = False,
                **changes: Any) -> Path:
    """A copy of ``config`` where ``task_id``'s policy has ``changes`` (a None value removes
    the key; ``only``: the only task)."""
    data = tomllib.loads(config.read_text())
    for task in data["tasks"]:
        if task["id"] == task_id:
            task["policy"].update(changes)
            task["policy"] = {k: v for k, v in task["policy"].items() if v is not None}
    text = tomli_w.dumps(data)
    out.write_text(only_tasks(text, [task_id]) if only else text)
    return out


def only_tasks(config_text: str, task_ids: Iterable[str]) -> str:
    """``config_text`` with only the tasks ``task_ids`` (all of them must be there). A test that
    kills and restarts services serves only the tasks it drives: each start builds every task's
    policy and noise (with the whole small config, about a second of CPU more per device start
    and half a second per analyzer start: the other tasks' Gaussian calibrations, exact Skellam
    tables and compiled BCO loops)."""
    data = tomllib.loads(config_text)
    wanted = set(task_ids)
    missing = wanted - {t["id"] for t in data["tasks"]}
    if missing:
        raise ValueError(f"no task {sorted(missing)} in the config")
    data["tasks"] = [t for t in data["tasks"] if t["id"] in wanted]
    return tomli_w.dumps(data)


@contextmanager
def cluster_serving(
    tmp_path: Path, config: Path, config_text: str, task_ids: Iterable[str]
) -> Iterator[Cluster]:
    """A fresh deployment of its own (``data`` and ``logs`` under ``tmp_path``) serving only the
    tasks ``task_ids`` of ``config_text``, written to ``config`` (``only_tasks``)."""
    config.write_text(only_tasks(config_text, task_ids))
    with local_cluster(tmp_path / "data", config=config, log_dir=tmp_path / "logs",
                       timeout=patience(60)) as c:
        yield c


def write_config(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "e2e.toml"
    path.write_text(E2E_CONFIG)
    return path


def cli(argv: list[str]) -> int:
    """``privbandit up`` / ``privbandit demo`` as the CLI runs them."""
    parser = argparse.ArgumentParser(prog="privbandit")
    sub = parser.add_subparsers(dest="command", required=True)
    add_up_parser(sub)
    add_demo_parser(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


def run_with_device_crashes(
    cluster: Cluster, task_id: str, users: int, fractions: tuple[float, ...], **driver_kw: Any,
) -> tuple[Driver, dict[str, Any], Snapshot]:
    """Drive ``users`` users of ``task_id`` and kill -9 the device once each fraction of them is
    done, restarting it on the same data directory; then wait for quiet and reconcile. Checks
    that every crash happened and was felt, that every user's feedback was sent, and that the
    counts reconcile; returns the driver, the reconciliation and the last snapshot."""
    from privbandit.demo.driver import REQUEST_RETRIES

    urls = cluster.urls
    events: list[str] = []

    async def chaos(driver: Driver) -> None:
        for fraction in fractions:
            await wait_done(driver, int(users * fraction))
            await asyncio.to_thread(cluster.kill, "device")
            events.append(f"device killed at {driver.done}")
            await asyncio.to_thread(cluster.restart, "device", patience(60))

    async def run() -> tuple[Driver, dict[str, Any], Snapshot]:
        task = await fetch_task(urls["analyzer"], task_id)
        async with httpx.AsyncClient(timeout=patience(10)) as c:
            before = await snapshot(urls, task_id, c)
        # The device's restart is felt by the users: their tries must outlast it.
        driver = Driver(urls["device"], task, users,
                        request_retries=patient_tries(REQUEST_RETRIES), **driver_kw)
        result, _ = await asyncio.gather(driver.run(), chaos(driver))
        after = await wait_quiescent(urls, task_id, task.max_batch, timeout=patience(90))
        return driver, reconcile(result.feedbacks_sent, before, after), after

    driver, rec, after = asyncio.run(run())
    assert len(events) == len(fractions), events
    assert driver.errors > 0  # the crashes were felt by the users' requests
    assert driver.feedbacks_sent == users
    assert rec["consistent"], (rec, events)
    return driver, rec, after


async def wait_done(driver: Driver, n: int, timeout: float = 60.0) -> None:
    """Until the driver has finished ``n`` users (fail after ``patience(timeout)``)."""
    until = deadline(timeout)
    while driver.done < n:
        assert time.monotonic() < until, f"driver stuck at {driver.done} users"
        await asyncio.sleep(0.01)


def pass_through_demo(cluster: Cluster, task_id: str, users: int) -> dict[str, Any]:
    """Run the demo's users on a pass-through task of ``cluster`` (4 at a time, seed 3) and check
    its reconciliation: every feedback accepted and counted at once, each its own batch, none
    refused or pending. Returns the demo's JSON for the task's own assertions."""
    opts = DemoOptions("ldp", users=users, concurrency=4, seed=3, progress=False,
                       settle_timeout=patience(60))
    out = asyncio.run(run_demo_against(cluster.urls, task_id, opts))
    rec = out["reconciliation"]
    assert rec["consistent"], rec
    assert rec["feedbacks_sent"] == rec["reports_accepted"] == rec["reports_counted"] == users
    assert rec["reports_refused"] == rec["reports_pending"] == 0
    assert rec["batches"] == users
    return out


def assert_feedback_refused(
    device: httpx.Client, task: str, did: str, bad: list[tuple[str, str]],
    before: dict[str, Any], good: dict[str, Any],
) -> None:
    """Each of the ``bad`` feedback bodies for decision ``did`` (a ``%s`` for its id) is refused
    over HTTP with 422 and its error code; the device's feedback count is still ``before``'s
    (nothing stored); and the decision stayed open: ``good`` is then accepted (202)."""
    headers = {"content-type": "application/json"}
    for body, code in bad:
        resp = device.post(f"/v1/tasks/{task}/feedback", content=body % did, headers=headers)
        assert resp.status_code == 422, resp.text
        assert resp.json()["code"] == code, resp.text
    assert device.get("/v1/status").json()["feedbacks"] == before["feedbacks"]
    resp = device.post(f"/v1/tasks/{task}/feedback",
                       content=json.dumps({"decision_id": did, **good}), headers=headers)
    assert resp.status_code == 202, resp.text


class Gate:
    """The driver's gate (``Driver.gate``, awaited before each request): while it is closed, new
    requests wait. Crash tests hold users while a service restarts, so how long a restart takes
    on a loaded machine cannot let the run finish before its next phase. The open flag (an
    ``asyncio.Event``) may be shared by several drivers; ``cap`` also holds new requests while
    the driver ``paced`` has finished ``cap`` users or more, so that drivers of several tasks
    reach each phase of a crash together, however differently fast their policies are."""

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.open = gate if gate is not None else asyncio.Event()
        self.open.set()
        self.paced: Driver | None = None
        self.cap: int | None = None

    def _held(self) -> bool:
        return self.paced is not None and self.cap is not None and self.paced.done >= self.cap

    async def __call__(self) -> None:
        while self._held():
            await asyncio.sleep(0.005)
        await self.open.wait()


CrashRun = tuple[Driver, dict[str, Any]]


def run_with_backend_crash(
    cluster: Cluster, seeds: dict[str, int], users: int
) -> tuple[dict[str, CrashRun], list[str]]:
    """Drive ``users`` users through each task of ``seeds`` at once (one driver per task, with
    its seed) while the shuffler and the analyzer are killed with SIGKILL a fifth of the way in,
    users keep coming while both are down (decide is local, feedback goes to the device's
    durable outbox), the shuffler restarts first (and cannot deliver), then the analyzer, on
    their old stores, keys and ports. Every driver reaches each phase (a fifth in; a fifth more
    during the outage; a tenth more before the analyzer restarts) before the next event
    happens. Returns, per task, the driver and the reconciliation once the system is quiescent,
    and what happened when."""
    urls = cluster.urls
    events: list[str] = []
    gate = asyncio.Event()

    async def restart(name: str) -> None:
        gate.clear()  # users wait for the restart (see Gate)
        try:
            await asyncio.to_thread(cluster.restart, name, patience(60))
        finally:
            gate.set()

    async def phase(drivers: dict[str, Driver], gates: dict[str, Gate],
                    more: int) -> int:
        """Let every driver finish ``more`` users beyond where it is, hold it there; the total."""
        for task, driver in drivers.items():
            gates[task].cap = driver.done + more
        for task, driver in drivers.items():  # the drivers share the device: more time
            await wait_done(driver, min(gates[task].cap or users, users), 60.0 * len(drivers))
        return sum(d.done for d in drivers.values())

    async def chaos(drivers: dict[str, Driver], gates: dict[str, Gate]) -> None:
        await phase(drivers, gates, users // 5)
        await asyncio.to_thread(cluster.kill, "shuffler")
        await asyncio.to_thread(cluster.kill, "analyzer")
        events.append(f"killed at {sum(d.done for d in drivers.values())}")
        done = await phase(drivers, gates, users // 5)
        async with httpx.AsyncClient(timeout=patience(5)) as c:
            async def status() -> dict[str, Any]:
                return (await c.get(f"{urls['device']}/v1/status")).json()

            st = await status()
            if len(cluster.shufflers) == 1:
                # No shuffler answers: this phase's feedbacks wait in the durable outbox.
                assert st["outbox_pending"] > 0, st
            else:
                # A replica survives (PostgreSQL): the device fails over and delivers every
                # feedback to it while the killed one is down. How much was still pending at
                # the first look is timing (under load the outbox had drained already).
                async def drained() -> bool:
                    return (await status())["outbox_pending"] == 0

                await eventually(drained, 30.0, "the outbox to drain to the surviving replica")
        events.append(f"outbox {st['outbox_pending']} at {done}")
        for g in gates.values():
            g.cap = None
        await restart("shuffler")
        await phase(drivers, gates, users // 10)
        for g in gates.values():
            g.cap = None
        await restart("analyzer")
        events.append(f"restarted at {sum(d.done for d in drivers.values())}")

    async def run() -> dict[str, CrashRun]:
        tasks = {t: await fetch_task(urls["analyzer"], t) for t in seeds}
        async with httpx.AsyncClient(timeout=patience(10)) as c:
            before = {t: await snapshot(urls, t, c) for t in seeds}
        gates = {t: Gate(gate) for t in seeds}
        drivers = {t: Driver(urls["device"], tasks[t], users, concurrency=4, seed=seed,
                             gate=gates[t]) for t, seed in seeds.items()}
        for t, driver in drivers.items():
            gates[t].paced = driver
        *results, _ = await asyncio.gather(*(d.run() for d in drivers.values()),
                                           chaos(drivers, gates))
        out = {}
        for t, result in zip(seeds, results, strict=True):
            after = await wait_quiescent(urls, t, tasks[t].max_batch, timeout=patience(90))
            out[t] = (drivers[t], reconcile(result.feedbacks_sent, before[t], after))
        return out

    runs = asyncio.run(run())
    assert len(events) == 3, events
    return runs, events


def assert_pass_through_crash_safe(
    cluster: Cluster, runs: dict[str, CrashRun], events: list[str], users: int
) -> None:
    """The ``runs`` of pass-through tasks of ``run_with_backend_crash``: for each, every
    feedback accepted and counted exactly once in the analyzer's durable store, nothing
    rejected; then a restarted analyzer publishes exactly the models and ledgers it had."""
    for task_id, (driver, rec) in runs.items():
        assert driver.feedbacks_sent == users, task_id
        assert rec["consistent"], (task_id, rec, events)
        assert rec["reports_accepted"] == rec["reports_counted"] == users, (task_id, rec, events)
        totals = analyzer_totals(cluster.data_dir, task_id, store=cluster.store)
        assert (totals["report_ids"] == totals["distinct_report_ids"] == totals["counted"]
                == users), (task_id, totals)
        assert totals["rejected"] == 0, (task_id, totals)
    with httpx.Client(base_url=cluster.urls["analyzer"], timeout=patience(5)) as analyzer:
        published = {t: (analyzer.get(f"/v1/tasks/{t}/model").json(),
                         analyzer.get(f"/v1/tasks/{t}/privacy").json()) for t in runs}
        cluster.restart("analyzer", patience(60))
        for t, (model, ledger) in published.items():
            assert analyzer.get(f"/v1/tasks/{t}/model").json() == model, t
            assert analyzer.get(f"/v1/tasks/{t}/privacy").json() == ledger, t


def analyzer_totals(
    data_dir: Path, task_id: str, store: str | None = None
) -> dict[str, Any]:
    """What the analyzer's durable store says about a task (read-only): its SQLite file, or
    the PostgreSQL ``store`` (by default ``STORES``' analyzer store, if set)."""
    store = store or STORES.get("analyzer", "sqlite")
    if store != "sqlite":
        import psycopg

        conn: Any = psycopg.connect(store, autocommit=True)
        mark, prefix = "%s", "analyzer_"
    else:
        db = Path(data_dir) / "analyzer" / "analyzer.sqlite3"
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        mark, prefix = "?", ""
    with conn:
        ids, distinct = conn.execute(
            f"SELECT COUNT(*), COUNT(DISTINCT report_id) FROM {prefix}report_ids "
            f"WHERE task = {mark}",
            (task_id,),
        ).fetchone()
        counted, rejected, batches = conn.execute(
            f"SELECT reports_counted, rejected, batches FROM {prefix}tasks WHERE task = {mark}",
            (task_id,),
        ).fetchone()
        per_batch = [n for (n,) in conn.execute(
            f"SELECT counted FROM {prefix}batches WHERE task = {mark}", (task_id,)
        )]
    return {"report_ids": ids, "distinct_report_ids": distinct, "counted": counted,
            "rejected": rejected, "batches": batches, "per_batch": per_batch}
