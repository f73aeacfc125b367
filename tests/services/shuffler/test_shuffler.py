"""The shuffler service in-process: durability, duplicate dropping, batch formation (exactly l,
CSPRNG order), delivery to a real or recording analyzer with retries, and restarts."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from privbandit.launcher import free_ports
from services.analyzer.app import create_app as create_analyzer
from services.shuffler.app import create_app as create_shuffler
from shared.crypto.keystore import HpkeKeyStore
from shared.protocol.messages import (
    MAX_REPORTS_PER_UPLOAD,
    BatchUpload,
    EncryptedReport,
    HpkeConfig,
    PrivacyReport,
    ReportsAccepted,
    ShufflerStatus,
)
from shared.settings import Settings
from tests.helpers import (
    TOKEN,
    error,
    eventually,
    ldp_task,
    make_settings,
    queue_status,
    report_maker,
    running,
    shuffle_task,
    upload,
)

SHUF = shuffle_task()  # l = 5
BIG = shuffle_task("big", l=20)
LOC = ldp_task()  # l = 1


@dataclass
class FakeAnalyzer:
    """Records every batch delivery exactly as received and acknowledges it (or fails)."""

    status: int = 200
    deliveries: list[tuple[str, dict[str, str], dict]] = field(default_factory=list)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/tasks/{task}/batches")
        async def batches(task: str, request: Request) -> JSONResponse:
            raw = json.loads(await request.body())
            self.deliveries.append((task, dict(request.headers), raw))
            if self.status != 200:
                return JSONResponse({"code": "nope", "message": "failing"}, self.status)
            upload = BatchUpload.model_validate(raw)
            ack = {
                "batch_id": upload.batch_id, "replayed": False, "counted": len(upload.reports),
                "rejected": 0, "duplicates": 0, "model_version": 0,
            }
            return JSONResponse(ack)

        return app

    def batches(self, task: str | None = None) -> list[BatchUpload]:
        return [BatchUpload.model_validate(raw) for t, _, raw in self.deliveries
                if task is None or t == task]


class FlakyTransport(httpx.AsyncBaseTransport):
    """Wraps a transport; fails the next ``fail_before`` requests before they reach the analyzer
    and the next ``fail_after`` after the analyzer processed them (a lost acknowledgement)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.fail_before = 0
        self.fail_after = 0
        self.attempts = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.attempts += 1
        if self.fail_before > 0:
            self.fail_before -= 1
            raise httpx.ConnectError("analyzer unreachable", request=request)
        response = await self.inner.handle_async_request(request)
        if self.fail_after > 0:
            self.fail_after -= 1
            await response.aread()
            raise httpx.ReadTimeout("acknowledgement lost", request=request)
        return response


def shuffler_app(settings: Settings, fake: FakeAnalyzer) -> FastAPI:
    """A shuffler delivering to the fake analyzer."""
    return create_shuffler(settings, analyzer_transport=httpx.ASGITransport(fake.app()))


def shuffler_settings(tmp_path: Path, **kw: object) -> Settings:
    return make_settings(tmp_path / "data", tasks=[SHUF, BIG, LOC], **kw)


@pytest.fixture
def keys(tmp_path: Path) -> HpkeKeyStore:
    """An analyzer key pair for tests whose analyzer is a fake."""
    return HpkeKeyStore(tmp_path / "fake-analyzer-keys")


# ---------------------------------------------------------------------------------------------


async def test_health_status_and_unknown_task(tmp_path: Path, keys: HpkeKeyStore) -> None:
    fake = FakeAnalyzer()
    app = shuffler_app(shuffler_settings(tmp_path), fake)
    async with running(app) as client:
        r = await client.get("/healthz")
        assert r.status_code == 200 and r.json()["status"] == "ok"
        status = ShufflerStatus.model_validate_json((await client.get("/v1/status")).content)
        assert [(t.task, t.batch_size) for t in status.tasks] == [("shuf", 5), ("big", 20),
                                                                    ("loc", 1)]
        assert all(t.pending == t.accepted == t.batches_formed == 0 for t in status.tasks)
        make = report_maker(keys.hpke_config())
        body = {"reports": [r.model_dump() for r in make(SHUF, 1)]}
        error(await client.post("/v1/tasks/nope/reports", json=body), 404, "unknown_task")
        error(await client.get("/v1/tasks/shuf/reports"), 405, "method_not_allowed")
        r = await client.get("/metrics")
        assert r.status_code == 200 and "privbandit_shuffler_pending_reports" in r.text


async def test_upload_errors_store_nothing(tmp_path: Path, keys: HpkeKeyStore) -> None:
    fake = FakeAnalyzer()
    cfg = shuffle_task("sum", aggregation="secure-sum")
    settings = make_settings(tmp_path / "data", tasks=[SHUF, LOC, cfg])
    app = shuffler_app(settings, fake)
    async with running(app) as client:
        make = report_maker(keys.hpke_config())
        rep = make(SHUF, 1)[0].model_dump()
        url = "/v1/tasks/shuf/reports"
        bad_bodies = [
            b"{oops",
            b"[]",
            json.dumps({}).encode(),
            json.dumps({"reports": []}).encode(),
            json.dumps({"reports": [rep], "device": "abc"}).encode(),
            json.dumps({"reports": [{**rep, "key_id": 300}]}).encode(),
            json.dumps({"reports": [{**rep, "ct": "***"}]}).encode(),
            json.dumps({"reports": [{**rep, "enc": None}]}).encode(),
            json.dumps({"reports": [rep] * (MAX_REPORTS_PER_UPLOAD + 1)}).encode(),
        ]
        for content in bad_bodies:
            r = await client.post(url, content=content,
                                  headers={"Content-Type": "application/json"})
            error(r, 422, "invalid_request")
        # A ciphertext of the wrong length for the task (an ldp report sent to a shuffle task),
        # mixed with good ones: the whole upload is refused.
        wrong = make(LOC, 1)[0].model_dump()
        r = await client.post(url, json={"reports": [rep, wrong]})
        assert "reports[1]" in error(r, 422, "bad_report_size").message
        r = await client.post(url, json={"reports": [{**rep, "enc": rep["ct"]}]})
        error(r, 422, "bad_report_size")
        huge = b'{"reports": ["' + b"A" * 5_000_000 + b'"]}'
        r = await client.post(url, content=huge, headers={"Content-Type": "application/json"})
        error(r, 413, "body_too_large")

        async def chunked():  # no Content-Length: the limit applies while streaming
            for _ in range(100):
                yield b"A" * 50_000

        r = await client.post(url, content=chunked(), headers={"Content-Type": "application/json"})
        error(r, 413, "body_too_large")
        r = await client.post("/v1/tasks/sum/reports", json={"reports": [rep]})
        error(r, 409, "aggregation_mismatch")
        for task in ("shuf", "sum"):
            s = await queue_status(client, task)
            assert (s.pending, s.accepted, s.batches_formed) == (0, 0, 0)
        # The good report alone is still new.
        assert (await upload(client, [EncryptedReport.model_validate(rep)])).accepted == 1


async def test_identical_ciphertexts_are_dropped(tmp_path: Path, keys: HpkeKeyStore) -> None:
    fake = FakeAnalyzer()
    app = shuffler_app(shuffler_settings(tmp_path), fake)
    async with running(app) as client:
        make = report_maker(keys.hpke_config())
        a, b, c = make(SHUF, 3)
        assert await upload(client, [a, b, a]) == ReportsAccepted(accepted=2, duplicates=1)
        assert await upload(client, [b, c]) == ReportsAccepted(accepted=1, duplicates=1)
        s = await queue_status(client, "shuf")
        assert (s.accepted, s.pending) == (3, 3)
    # Still recognised after a restart, also once the reports have been batched and deleted.
    async with running(shuffler_app(shuffler_settings(tmp_path), fake)) as client:
        assert await upload(client, [a]) == ReportsAccepted(accepted=0, duplicates=1)
        await upload(client, make(SHUF, 2))
        await eventually(lambda: _acked(client, "shuf", 1))
        assert await upload(client, [c]) == ReportsAccepted(accepted=0, duplicates=1)
        assert (await queue_status(client, "shuf")).pending == 0


async def _acked(client: httpx.AsyncClient, task: str, n: int) -> bool:
    return (await queue_status(client, task)).batches_acknowledged >= n


async def test_batches_are_exactly_l_in_random_order(tmp_path: Path, keys: HpkeKeyStore) -> None:
    fake = FakeAnalyzer()
    app = shuffler_app(shuffler_settings(tmp_path), fake)
    async with running(app) as client:
        make = report_maker(keys.hpke_config())
        arrivals = make(BIG, 47)
        for rep in arrivals:  # one upload each: arrival order is the list order
            await upload(client, [rep], task="big")
        await eventually(lambda: _acked(client, "big", 2))
        s = await queue_status(client, "big")
        assert (s.batches_formed, s.batches_acknowledged, s.pending, s.accepted) == (2, 2, 7, 47)
        assert s.batches_in_flight == 0 and s.last_error is None
        batches = fake.batches("big")
        assert len(batches) == 2 and len({b.batch_id for b in batches}) == 2
        for k, got in enumerate(batches):
            members = arrivals[20 * k : 20 * (k + 1)]
            # The l oldest pending reports, permuted: same multiset, not arrival order
            # (the identity has probability 1/20!).
            assert sorted(r.ct for r in got.reports) == sorted(r.ct for r in members)
            assert [r.ct for r in got.reports] != [r.ct for r in members]
        # Only the batch id and the ciphertexts travel; the bearer token authenticates.
        for _task, headers, raw in fake.deliveries:
            assert set(raw) == {"batch_id", "reports"}
            assert all(set(r) == {"key_id", "enc", "ct"} for r in raw["reports"])
            assert headers["authorization"] == f"Bearer {TOKEN}"
        # Nothing is stored of an acknowledged batch but its id.
        store = app.state.runtime.store
        assert all(store.batch_members(b.batch_id) == 0 for b in batches)


async def test_never_a_batch_below_l(tmp_path: Path, keys: HpkeKeyStore) -> None:
    fake = FakeAnalyzer()
    settings = shuffler_settings(tmp_path)
    make = report_maker(keys.hpke_config())
    async with running(shuffler_app(settings, fake)) as client:
        await upload(client, make(SHUF, 4))
        await asyncio.sleep(0.1)
        s = await queue_status(client, "shuf")
        assert (s.pending, s.batches_formed) == (4, 0) and fake.deliveries == []
    async with running(shuffler_app(settings, fake)) as client:
        assert (await queue_status(client, "shuf")).pending == 4  # durable across a restart
        await upload(client, make(SHUF, 1))
        await eventually(lambda: _acked(client, "shuf", 1))
        assert len(fake.batches("shuf")) == 1 and len(fake.batches("shuf")[0].reports) == 5


async def test_pass_through_task_forwards_batches_of_one(
    tmp_path: Path, keys: HpkeKeyStore
) -> None:
    fake = FakeAnalyzer()
    app = shuffler_app(shuffler_settings(tmp_path), fake)
    async with running(app) as client:
        make = report_maker(keys.hpke_config())
        await upload(client, make(LOC, 3), task="loc")
        await eventually(lambda: _acked(client, "loc", 3))
        assert [len(b.reports) for b in fake.batches("loc")] == [1, 1, 1]
        assert (await queue_status(client, "loc")).pending == 0


async def test_end_to_end_with_the_real_analyzer(tmp_path: Path) -> None:
    """Concurrent uploads → group commits → exactly floor(n / l) batches → analyzer counts them."""
    settings = shuffler_settings(tmp_path)
    analyzer = create_analyzer(settings)
    async with running(analyzer) as a_client:
        shuffler = create_shuffler(settings, analyzer_transport=httpx.ASGITransport(analyzer))
        async with running(shuffler) as s_client:
            hpke = (await a_client.get("/v1/hpke-config")).json()
            make = report_maker(HpkeConfig.model_validate(hpke))
            reports = make(SHUF, 23)
            results = await asyncio.gather(*(upload(s_client, [r]) for r in reports))
            assert sum(r.accepted for r in results) == 23
            await eventually(lambda: _acked(s_client, "shuf", 4))
            s = await queue_status(s_client, "shuf")
            assert (s.accepted, s.batches_formed, s.batches_acknowledged, s.pending) == (
                23, 4, 4, 3)
            p = PrivacyReport.model_validate_json(
                (await a_client.get("/v1/tasks/shuf/privacy")).content
            )
            assert (p.reports_counted, p.batches, p.model_version) == (20, 4, 4)
            metrics = (await s_client.get("/metrics")).text
            assert 'privbandit_shuffler_batches_acknowledged_total{task="shuf"} 4.0' in metrics
            assert "privbandit_shuffler_commit_group_uploads_count" in metrics


async def test_retries_until_acknowledged_and_lost_acks_count_once(tmp_path: Path) -> None:
    settings = shuffler_settings(tmp_path)
    analyzer = create_analyzer(settings)
    async with running(analyzer) as a_client:
        hpke = HpkeConfig.model_validate((await a_client.get("/v1/hpke-config")).json())
        make = report_maker(hpke)
        flaky = FlakyTransport(httpx.ASGITransport(analyzer))
        flaky.fail_before = 3  # analyzer unreachable
        flaky.fail_after = 2  # then: processed, but the acknowledgement is lost, twice
        async with running(create_shuffler(settings, analyzer_transport=flaky)) as s_client:
            await upload(s_client, make(SHUF, 5))
            await eventually(lambda: _has_error(s_client))
            assert "ConnectError" in ((await queue_status(s_client, "shuf")).last_error or "")
            await eventually(lambda: _acked(s_client, "shuf", 1))
            s = await queue_status(s_client, "shuf")
            assert s.batches_in_flight == 0 and s.last_error is None
            assert flaky.attempts == 6
        p = PrivacyReport.model_validate_json(
            (await a_client.get("/v1/tasks/shuf/privacy")).content
        )
        assert (p.reports_counted, p.batches) == (5, 1)  # three deliveries, one count


async def _has_error(client: httpx.AsyncClient, task: str = "shuf") -> bool:
    return (await queue_status(client, task)).last_error is not None


async def test_rejections_are_surfaced_and_retried(tmp_path: Path, keys: HpkeKeyStore) -> None:
    fake = FakeAnalyzer(status=401)
    app = shuffler_app(shuffler_settings(tmp_path), fake)
    async with running(app) as client:
        make = report_maker(keys.hpke_config())
        await upload(client, make(SHUF, 5))
        await eventually(lambda: _deliveries(fake, 3))
        s = await queue_status(client, "shuf")
        assert "HTTP 401" in (s.last_error or "") and s.batches_in_flight == 1
        ids = {raw["batch_id"] for _, _, raw in fake.deliveries}
        assert len(ids) == 1  # the same batch each time
        fake.status = 422
        await eventually(lambda: _error_has(client, "HTTP 422"))
        fake.status = 200
        await eventually(lambda: _acked(client, "shuf", 1))
        assert (await queue_status(client, "shuf")).last_error is None
        orders = {tuple(r["ct"] for r in raw["reports"]) for _, _, raw in fake.deliveries}
        assert len(orders) == 1  # and in the same order


async def _deliveries(fake: FakeAnalyzer, n: int) -> bool:
    return len(fake.deliveries) >= n


async def _error_has(client: httpx.AsyncClient, text: str) -> bool:
    return text in ((await queue_status(client, "shuf")).last_error or "")


async def test_unacknowledged_batches_resent_after_restart(
    tmp_path: Path, keys: HpkeKeyStore
) -> None:
    settings = shuffler_settings(tmp_path)
    make = report_maker(keys.hpke_config())
    down = FlakyTransport(httpx.ASGITransport(FakeAnalyzer().app()))
    down.fail_before = 10**9
    app = create_shuffler(settings, analyzer_transport=down)
    async with running(app) as client:
        await upload(client, make(SHUF, 12))
        await eventually(lambda: _has_error(client))
        s = await queue_status(client, "shuf")
        assert (s.batches_formed, s.batches_in_flight, s.pending) == (2, 2, 2)
        store = app.state.runtime.store
        first = store.next_unacked("shuf")
        assert first is not None
    fake = FakeAnalyzer()
    async with running(shuffler_app(settings, fake)) as client:
        await eventually(lambda: _acked(client, "shuf", 2))
        got = fake.batches("shuf")
        assert len(got) == 2
        # Up to WINDOW batches are delivered concurrently, so they may arrive in either order;
        # what matters is that the stored batch is re-sent unchanged (same id, same order).
        (resent,) = [b for b in got if b.batch_id == first.batch_id]
        assert resent.reports == first.reports
        s = await queue_status(client, "shuf")
        assert (s.accepted, s.batches_formed, s.batches_acknowledged, s.pending) == (12, 2, 2, 2)


def test_shuffler_holds_no_decryption_capability() -> None:
    """The shuffler's code never touches the HPKE private key or the decryption function."""
    source = "\n".join(
        p.read_text() for p in (Path(__file__).parents[3] / "services" / "shuffler").glob("*.py")
    )
    for name in ("HpkeKeyStore", "open_report", "private_key", "X25519PrivateKey"):
        assert name not in source


# ---------------------------------------------------------------------------------------------
# Crashes of either service (real processes, SIGKILL)


class Service:
    """``python -m services.<name>`` as a child process on loopback."""

    def __init__(self, name: str, port: int, config: Path) -> None:
        self.name, self.port, self.config = name, port, config
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVBANDIT_")}
        env.update(PRIVBANDIT_CONFIG=str(self.config), PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", f"services.{self.name}", "--port", str(self.port)], env=env
        )

    async def ready(self) -> None:
        async with asyncio.timeout(30), httpx.AsyncClient() as client:
            while True:
                try:
                    r = await client.get(f"http://127.0.0.1:{self.port}/healthz")
                    if r.status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


ROOT = Path(__file__).parents[3]


async def test_exactly_once_across_crashes_of_both_services(tmp_path: Path) -> None:
    """Every report the shuffler accepted is counted by the analyzer exactly once, although both
    processes are killed (SIGKILL) while uploads and deliveries are in progress."""
    a_port, s_port = free_ports(2)
    config = tmp_path / "privbandit.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\nshuffler_token = "{TOKEN}"\nlog_level = "warning"\n'
        "retry_initial = 0.05\nretry_max = 0.2\n"
        f'[analyzer]\nport = {a_port}\n[shuffler]\nport = {s_port}\n'
        '[[tasks]]\nid = "shuf"\nthreat_model = "shuffle"\nK = 4\n'
        '[tasks.policy]\nalgo = "sblb-fixed"\nd = 3\neps0 = 4.0\nbatch_size = 5\n'
        '[[tasks]]\nid = "loc"\nthreat_model = "ldp"\nK = 4\n'
        '[tasks.policy]\nalgo = "ldp-linucb"\nd = 3\nupdate_every = 2\n'
    )
    analyzer = Service("analyzer", a_port, config)
    shuffler = Service("shuffler", s_port, config)
    try:
        analyzer.start()
        shuffler.start()
        await analyzer.ready()
        await shuffler.ready()
        async with httpx.AsyncClient(timeout=10) as client:
            a_url, s_url = f"http://127.0.0.1:{a_port}", f"http://127.0.0.1:{s_port}"
            hpke = HpkeConfig.model_validate((await client.get(f"{a_url}/v1/hpke-config")).json())
            make = report_maker(hpke)
            sent = {"shuf": make(SHUF, 203), "loc": make(LOC, 61)}
            # Uploads of 1–3 reports; those whose answer was lost are re-sent later.
            chunks = [(task, reps[i : i + 3]) for task, reps in sent.items()
                      for i in range(0, len(reps), 3)]
            unanswered: list[tuple[str, list[EncryptedReport]]] = []

            async def send(task: str, reps: list[EncryptedReport]) -> None:
                try:
                    r = await client.post(f"{s_url}/v1/tasks/{task}/reports",
                                          json={"reports": [x.model_dump() for x in reps]})
                    if r.status_code != 202:
                        unanswered.append((task, reps))
                except httpx.TransportError:
                    unanswered.append((task, reps))

            async def crash_both() -> None:
                await asyncio.sleep(0.15)
                shuffler.kill()
                await asyncio.sleep(0.05)
                analyzer.kill()

            sem = asyncio.Semaphore(8)

            async def limited(task: str, reps: list[EncryptedReport]) -> None:
                async with sem:
                    await send(task, reps)

            await asyncio.gather(crash_both(), *(limited(t, r) for t, r in chunks))
            assert unanswered, "the crash should have interrupted some uploads"

            analyzer.start()
            shuffler.start()
            await analyzer.ready()
            await shuffler.ready()
            for task, reps in unanswered:  # a device retries what it has no 202 for
                r = await client.post(f"{s_url}/v1/tasks/{task}/reports",
                                      json={"reports": [x.model_dump() for x in reps]})
                assert r.status_code == 202

            async def drained() -> bool:
                st = ShufflerStatus.model_validate_json(
                    (await client.get(f"{s_url}/v1/status")).content)
                return all(t.batches_in_flight == 0 for t in st.tasks)

            await eventually(drained, timeout=30)
            status = ShufflerStatus.model_validate_json(
                (await client.get(f"{s_url}/v1/status")).content)
            for t in status.tasks:
                p = PrivacyReport.model_validate_json(
                    (await client.get(f"{a_url}/v1/tasks/{t.task}/privacy")).content)
                n = len(sent[t.task])
                # Identical ciphertexts were dropped, so the shuffler holds each report once...
                assert t.accepted == n
                assert t.pending == n % t.batch_size
                # ... and the analyzer counted each delivered report exactly once.
                assert p.reports_counted == n - t.pending
                assert p.batches == t.batches_acknowledged == n // t.batch_size
    finally:
        shuffler.kill()
        analyzer.kill()
