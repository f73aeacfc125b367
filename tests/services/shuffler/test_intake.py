"""Intake: health and status, every refused upload stores nothing, identical ciphertexts are
dropped (also after a restart)."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from privbandit.shared.crypto.keystore import HpkeKeyStore
from privbandit.shared.protocol.messages import (
    MAX_REPORTS_PER_UPLOAD,
    EncryptedReport,
    ReportsAccepted,
    ShufflerStatus,
)
from tests.helpers import (
    error,
    eventually,
    make_settings,
    queue_status,
    report_maker,
    running,
    shuffle_task,
    upload,
)

from .support import BIG, LOC, SHUF, FakeAnalyzer, acked, settings_for, shuffler_app


async def test_health_status_and_unknown_task(
    tmp_path: Path, keys: HpkeKeyStore, store: str
) -> None:
    fake = FakeAnalyzer(keys)
    app = shuffler_app(settings_for(tmp_path), fake)
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
        # A malformed body is refused before the task is looked up, as when both were
        # dependencies (the routes now read them inline).
        error(await client.post("/v1/tasks/nope/reports", json={"reports": "x"}), 422)
        error(await client.post("/v1/tasks/nope/encrypted-counts", json={}), 422)
        error(await client.get("/v1/tasks/shuf/reports"), 405, "method_not_allowed")
        r = await client.get("/metrics")
        assert r.status_code == 200 and "privbandit_shuffler_pending_reports" in r.text
        # The PostgreSQL store's transactions (the status read the counts), none on SQLite.
        counted = 'privbandit_shuffler_db_transactions_total{name="counts",outcome="ok"}'
        assert (counted in r.text) == (store == "postgresql")


async def test_upload_errors_store_nothing(tmp_path: Path, keys: HpkeKeyStore) -> None:
    fake = FakeAnalyzer(keys)
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
    fake = FakeAnalyzer(keys)
    app = shuffler_app(settings_for(tmp_path), fake)
    async with running(app) as client:
        make = report_maker(keys.hpke_config())
        a, b, c = make(SHUF, 3)
        assert await upload(client, [a, b, a]) == ReportsAccepted(accepted=2, duplicates=1)
        assert await upload(client, [b, c]) == ReportsAccepted(accepted=1, duplicates=1)
        s = await queue_status(client, "shuf")
        assert (s.accepted, s.pending) == (3, 3)
    # Still recognised after a restart, also once the reports have been batched and deleted.
    async with running(shuffler_app(settings_for(tmp_path), fake)) as client:
        assert await upload(client, [a]) == ReportsAccepted(accepted=0, duplicates=1)
        await upload(client, make(SHUF, 2))
        await eventually(lambda: acked(client, "shuf", 1))
        assert await upload(client, [c]) == ReportsAccepted(accepted=0, duplicates=1)
        assert (await queue_status(client, "shuf")).pending == 0


async def test_sqlite_intake_commits_on_the_loop_and_checkpoints_in_a_worker(
    tmp_path: Path, keys: HpkeKeyStore, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the SQLite store a group commit runs on the event loop's thread (no thread hand-off
    per group); SQLite's automatic checkpoint (inside a COMMIT, on the loop) is off, and a worker
    thread checkpoints every ``CHECKPOINT_EVERY`` groups, so the reports reach the database file
    itself (read without the WAL: ``immutable=1``). A PostgreSQL commit stays in a worker."""
    from privbandit.services.shuffler import intake as intake_mod
    from privbandit.services.shuffler.store import ShufflerStore
    from privbandit.services.shuffler.store.postgres import PgShufflerStore

    assert ShufflerStore.accept_in_loop and not PgShufflerStore.accept_in_loop
    threads: dict[str, set[int]] = {"accept": set(), "checkpoint": set()}
    checkpoints_done: list[int] = []  # appended once a checkpoint has returned
    real_checkpoint = ShufflerStore.checkpoint

    def spy(real: Callable[..., tuple]) -> Callable[..., tuple]:
        def accept(self: object, uploads: list) -> tuple:
            threads["accept"].add(threading.get_ident())
            return real(self, uploads)
        return accept

    def checkpoint(self: ShufflerStore) -> None:
        threads["checkpoint"].add(threading.get_ident())
        real_checkpoint(self)
        checkpoints_done.append(threading.get_ident())

    monkeypatch.setattr(ShufflerStore, "accept", spy(ShufflerStore.accept))
    monkeypatch.setattr(PgShufflerStore, "accept", spy(PgShufflerStore.accept))
    monkeypatch.setattr(ShufflerStore, "checkpoint", checkpoint)
    settings = settings_for(tmp_path)
    db = Path(settings.data_dir) / "shuffler" / "shuffler.sqlite3"

    def in_main_file() -> int:
        main = sqlite3.connect(f"file:{db}?immutable=1", uri=True)
        try:
            return main.execute("SELECT accepted FROM counters WHERE task = 'big'").fetchone()[0]
        except (sqlite3.OperationalError, TypeError):  # no schema or row in the file yet
            return 0
        finally:
            main.close()

    app = shuffler_app(settings, FakeAnalyzer(keys))
    make = report_maker(keys.hpke_config())
    async with running(app) as client:
        store = app.state.runtime.store  # type: ignore[attr-defined]
        if isinstance(store, PgShufflerStore):  # round trips to the server: in a worker
            assert (await upload(client, make(BIG, 1), "big")).accepted == 1
            assert threads["accept"] and threading.get_ident() not in threads["accept"]
            return
        assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        # One upload at a time: one group each (batches of "big" hold 20, so none forms).
        reports = make(BIG, intake_mod.CHECKPOINT_EVERY)
        for report in reports[:-1]:
            assert (await upload(client, [report], "big")).accepted == 1
        assert in_main_file() == 0 and threads["checkpoint"] == set()
        assert (await upload(client, reports[-1:], "big")).accepted == 1
        # Read the file only once the checkpoint has returned: an ``immutable=1`` reader may
        # see a page half-written while a checkpoint runs ("database disk image is malformed").
        await eventually(lambda: _true(bool(checkpoints_done)), what="the checkpoint")
        assert in_main_file() == intake_mod.CHECKPOINT_EVERY
        assert threads["accept"] == {threading.get_ident()}  # the loop's (this test's) thread
        assert threads["checkpoint"] and threading.get_ident() not in threads["checkpoint"]


async def _true(value: bool) -> bool:
    return value
