"""The analyzer's read-only endpoints: health, HPKE config, task info, model (ETag), privacy
ledgers and metrics."""

from __future__ import annotations

from pathlib import Path

from privbandit.services.analyzer.app import create_app
from privbandit.services.analyzer.runtime import AnalyzerRuntime
from privbandit.shared.protocol.messages import ModelMessage, TaskInfo, b64decode
from privbandit.shared.settings import Settings
from tests.helpers import auth, error, patience, privacy, report_maker, running
from tests.services.analyzer.support import CEN, LOC, SHUF, batch, hpke_of


async def test_health_config_and_task_info(settings: Settings) -> None:
    async with running(create_app(settings)) as client:
        r = await client.get("/healthz")
        assert r.status_code == 200 and r.json()["status"] == "ok"
        hpke = await hpke_of(client)
        assert len(b64decode(hpke.public_key)) == 32
        for cfg in (SHUF, LOC, CEN):
            r = await client.get(f"/v1/tasks/{cfg.id}")
            assert r.status_code == 200
            info = TaskInfo.model_validate_json(r.content)
            assert info.threat_model == cfg.threat_model
            assert info.batch_size == cfg.batch_size
            assert info.d == 3 and info.K == 4 and info.policy["algo"] == cfg.policy.algo
        for path in ("", "/model", "/privacy", "/model/stream"):
            error(await client.get(f"/v1/tasks/nope{path}"), 404, "unknown_task")
        error(await client.get("/v1/nothing-here"), 404, "not_found")
        error(await client.delete("/v1/hpke-config"), 405, "method_not_allowed")


async def test_model_etag_and_304(settings: Settings) -> None:
    async with running(create_app(settings)) as client:
        r = await client.get("/v1/tasks/shuf/model")
        assert r.status_code == 200 and r.headers["etag"] == '"0"'
        model = ModelMessage.model_validate_json(r.content)
        assert model.version == 0 and model.reports == 0 and model.theta == [0.0, 0.0, 0.0]
        assert model.V == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
        for tag in ('"0"', 'W/"0"', '"7", "0"', "*"):
            r = await client.get("/v1/tasks/shuf/model", headers={"If-None-Match": tag})
            assert r.status_code == 304 and r.content == b"" and r.headers["etag"] == '"0"'
        r = await client.get("/v1/tasks/shuf/model", headers={"If-None-Match": '"1"'})
        assert r.status_code == 200
        # After a batch, the old ETag no longer matches.
        make = report_maker(await hpke_of(client))
        r = await client.post("/v1/tasks/shuf/batches", json=batch(make(SHUF, 5)), headers=auth())
        assert r.status_code == 200
        r = await client.get("/v1/tasks/shuf/model", headers={"If-None-Match": '"0"'})
        assert r.status_code == 200 and r.headers["etag"] == '"1"'
        assert ModelMessage.model_validate_json(r.content).reports == 5


async def test_privacy_ledgers(settings: Settings) -> None:
    async with running(create_app(settings)) as client:
        p = await privacy(client, "shuf")
        assert p.ledger.threat_model == "shuffle" and p.ledger.ldp_epsilon == 4.0
        assert p.reports_counted == 0 and p.batches == 0 and p.model_version == 0
        assert (await privacy(client, "loc")).ledger.threat_model == "ldp"
        cen = (await privacy(client, "cen")).ledger
        assert cen.threat_model == "central" and cen.rdp_alpha == 2.0


async def test_metrics(settings: Settings, store: str) -> None:
    async with running(create_app(settings)) as client:
        make = report_maker(await hpke_of(client))
        body = batch(make(SHUF, 5))
        await client.post("/v1/tasks/shuf/batches", json=body, headers=auth())
        await client.post("/v1/tasks/shuf/batches", json=body, headers=auth())
        r = await client.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        text = r.text
        assert 'privbandit_analyzer_batches_total{outcome="processed",task="shuf"} 1.0' in text
        assert 'privbandit_analyzer_batches_total{outcome="replayed",task="shuf"} 1.0' in text
        assert 'privbandit_analyzer_reports_counted_total{task="shuf"} 5.0' in text
        assert 'privbandit_analyzer_batch_ingest_seconds_count{task="shuf"} 1.0' in text
        assert 'privbandit_analyzer_model_version{task="shuf"} 1.0' in text
        # The PostgreSQL store's transactions, by name and outcome (SQLite has none to count).
        committed = ('privbandit_analyzer_db_transactions_total{name="commit_batches",'
                     'outcome="ok"} 1.0')
        assert (committed in text) == (store == "postgresql")


async def test_healthz_is_503_until_ingest_runs(settings: Settings) -> None:
    # Keys and tasks are loaded by the runtime's constructor; ingest runs from ``start``.
    runtime = AnalyzerRuntime(settings)
    try:
        assert runtime.wait_for_ledgers(patience(120))
        assert runtime.readiness.missing() == {"batch ingest": ["shuf", "loc", "cen"]}
        runtime.start()
        assert runtime.readiness.ready
        await runtime.stop()
        assert not runtime.readiness.ready
    finally:
        runtime.close()

    app = create_app(settings)
    async with running(app) as client:
        r = await client.get("/healthz")
        assert r.status_code == 200
        assert r.json() == {"status": "ok", "service": "analyzer", "tasks": ["cen", "loc", "shuf"]}
        make = report_maker(await hpke_of(client))
        await app.state.runtime.stop()  # what the lifespan does first on shutdown
        starting = error(await client.get("/healthz"), 503, "starting")
        assert starting.message == "waiting for batch ingest: shuf, loc, cen"
        r = await client.post("/v1/tasks/shuf/batches", json=batch(make(SHUF, 5)), headers=auth())
        error(r, 503, "unavailable")


async def test_privacy_states_per_person_beside_per_report(tmp_path: Path) -> None:
    """Issue 24: a task with ``contributions`` states its guarantee per person (k reports
    composed, ``accounting.persons``) beside the per-report ledger; one without states none."""
    from privbandit.shared.core.accounting import ledgers, persons
    from privbandit.shared.settings import TaskConfig
    from tests.helpers import make_settings

    def bounded(cfg: TaskConfig, k: int) -> TaskConfig:
        return TaskConfig.model_validate(
            {**cfg.model_dump(), "contributions": {"k": k, "period_seconds": 86400}})

    tasks = [bounded(SHUF, 3), bounded(LOC, 5), CEN]
    async with running(create_app(make_settings(tmp_path, tasks=tasks))) as client:
        shuf = await privacy(client, "shuf")
        person = shuf.per_person
        assert person is not None and person["k"] == 3 and person["period"] == "86400 s"
        assert shuf.ledger.ldp_epsilon == 4.0  # per report, unchanged
        assert person["ldp_epsilon"] == 12.0  # 3 pure 4-LDP reports: (3·4, 0)
        assert person["ldp_delta"] == 0.0
        local = persons.approx_composed_epsilon(4.0, 0.0, 3, person["central_delta"])
        assert person["central_epsilon"] <= local  # never above the local composition
        loc = await privacy(client, "loc")
        expected = persons.person_figures(
            ledgers.ldp_gaussian_ledger(loc.ledger.ldp_epsilon, loc.ledger.ldp_delta), 5,
            loc.ledger.ldp_delta, "86400 s")
        assert loc.per_person is not None
        assert loc.per_person["ldp_epsilon"] == expected["ldp_epsilon"]
        assert loc.per_person["ldp_delta"] == loc.ledger.ldp_delta  # Gaussians: exact, same δ
        cen = await privacy(client, "cen")
        assert cen.per_person is not None and cen.per_person["k"] is None
        assert cen.per_person["central_epsilon"] is None
