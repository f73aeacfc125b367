"""What an operator looks at on the analyzer: the per-task gauges on ``/metrics`` and the
read-only status page ``/status`` (``services.analyzer.status``), in-process; the page in a real
browser is ``tests/e2e/test_status_page.py``."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from privbandit.services.analyzer.app import create_app
from privbandit.services.analyzer.status import Peer, Peers, TaskStatus, peers, render
from privbandit.shared.core.accounting.ledger import PrivacyLedger
from privbandit.shared.settings import Settings
from tests.helpers import auth, make_settings, privacy, report_maker, running
from tests.services.analyzer.support import SHUF, batch, hpke_of


def gauges(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


async def test_task_gauges_match_the_privacy_report(settings: Settings) -> None:
    async with running(create_app(settings)) as client:
        make = report_maker(await hpke_of(client))
        reports = make(SHUF, 5)
        for body in (batch(reports), batch(reports)):  # the second: 5 duplicate report ids
            r = await client.post("/v1/tasks/shuf/batches", json=body, headers=auth())
            assert r.status_code == 200
        text = (await client.get("/metrics")).text
        got = gauges(text)
        for task in ("shuf", "loc", "cen"):
            report = await privacy(client, task)
            t = (("task", task),)
            assert got[("privbandit_analyzer_task_batches", t)] == report.batches
            assert got[("privbandit_analyzer_task_reports_counted", t)] == report.reports_counted
            refused = sum(got[("privbandit_analyzer_task_reports_refused",
                               (("reason", reason), ("task", task)))]
                          for reason in ("rejected", "duplicate", "quarantined"))
            assert refused == report.reports_refused
            assert got[("privbandit_analyzer_task_batches_queued", t)] == 0
            for observer in ("central", "ldp"):
                key = (("observer", observer), ("task", task))
                eps = getattr(report.ledger, f"{observer}_epsilon")
                assert got.get(("privbandit_analyzer_privacy_epsilon", key)) == eps
                delta = getattr(report.ledger, f"{observer}_delta")
                assert got.get(("privbandit_analyzer_privacy_delta", key)) == delta
    shuf = (("task", "shuf"),)
    assert got[("privbandit_analyzer_task_batches", shuf)] == 2
    assert got[("privbandit_analyzer_task_reports_counted", shuf)] == 5
    assert got[("privbandit_analyzer_task_reports_refused",
                (("reason", "duplicate"), ("task", "shuf")))] == 5


async def test_status_page_is_self_contained_html(settings: Settings) -> None:
    async with running(create_app(settings)) as client:
        r = await client.get("/status")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        csp = r.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src" not in csp
        page = r.text
    assert '<span class="ok" id="state">ready</span>' in page
    for task in ("shuf", "loc", "cen"):
        assert f'<tr id="task-{task}">' in page
    # Nothing is fetched: no scripts, no links, no sources, no CSS imports or URLs.
    assert not re.search(r"<script|<link|\ssrc=|\shref=|@import|url\(", page, re.I)


def test_status_page_escapes_what_it_shows() -> None:
    evil = '<script>alert("x")</script>'
    ledger = PrivacyLedger(threat_model="shuffle", central_epsilon=1.5, central_delta=1e-6,
                           accounting=evil)
    task = TaskStatus(id="t1", algo=evil, threat_model="shuffle", aggregation="reports",
                      batch_size=5, model_version=3, batches=2, reports_counted=10,
                      rejected=1, duplicates=0, quarantined=0, queued_batches=0, ledger=ledger)
    page = render([task], {"batch ingest": [evil]})
    assert "<script" not in page
    assert page.count("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;") == 3
    assert 'class="wait"' in page


async def test_per_user_epsilon_of_a_heldp_task(tmp_path: Path) -> None:
    """A task whose users choose their own ε_t: no single ε, but the mean and the fractions
    used and declined, on ``/metrics`` and on the page, as its privacy report states them."""
    heldp = next(t for t in Settings().tasks if t.id == "demo-heldp")
    async with running(create_app(make_settings(tmp_path / "data", tasks=[heldp]))) as client:
        report = await privacy(client, heldp.id)
        got = gauges((await client.get("/metrics")).text)
        page = (await client.get("/status")).text
    users = (report.ledger.model_extra or {})["per_user_epsilon"]
    t = (("task", heldp.id),)
    assert got[("privbandit_analyzer_privacy_per_user_epsilon_mean", t)] == users["mean"]
    for kind in ("used", "declined"):
        key = ("privbandit_analyzer_privacy_per_user_fraction", (("kind", kind), *t))
        assert got[key] == users[f"fraction_{kind}"]
    assert report.ledger.ldp_epsilon is None
    assert ("privbandit_analyzer_privacy_epsilon", (("observer", "ldp"), *t)) not in got
    assert f"mean {users['mean']}" in page and users["distribution"] in page


def _task(task_id: str, accounting: str, last_batch_at: float | None = None) -> TaskStatus:
    ledger = PrivacyLedger(threat_model="shuffle", central_epsilon=1.5, central_delta=1e-6,
                           ldp_epsilon=4.0, accounting=accounting)
    return TaskStatus(id=task_id, algo="sblb", threat_model="shuffle", aggregation="reports",
                      batch_size=5, model_version=3, batches=2, reports_counted=10, rejected=0,
                      duplicates=0, quarantined=0, queued_batches=0, ledger=ledger,
                      last_batch_at=last_batch_at)


def test_the_page_is_compact_reloads_itself_and_shows_the_other_services() -> None:
    """Accounting prose once per distinct text (a note the ledger rows cite), a reload every
    ``refresh`` seconds (none at 0), the other services' health, each task's reports pending at
    the shuffler and the time of its last batch."""
    prose = "amplification by shuffling, " * 20
    tasks = [_task("a", prose, last_batch_at=1000.0), _task("b", prose), _task("c", "other")]
    others = Peers([Peer("shuffler", "http://s:1", "ok"),
                    Peer("device", "http://d:2", "unreachable", "ConnectError")],
                   pending={"a": 7, "c": 0})
    page = render(tasks, {}, now=1042.0, others=others, refresh=15)
    assert page.count(prose) == 1 and page.count("other") == 1
    assert page.count('data-field="note">[1]</td>') == 4  # a and b, central and ldp
    assert page.count('data-field="note">[2]</td>') == 2
    assert '<meta http-equiv="refresh" content="15">' in page
    assert '<tr id="peer-shuffler-http://s:1">' in page
    assert '<td data-field="state" class="ok">ok</td>' in page
    assert '<td data-field="state" class="bad">unreachable</td>' in page
    assert '<td class="n" data-field="pending_at_shuffler">7</td>' in page
    assert '<td class="n" data-field="pending_at_shuffler">—</td>' in page  # b: not known
    assert '<td data-field="last_batch">00:16:40 UTC (42 s ago)</td>' in page
    assert '<td data-field="last_batch">— (none yet)</td>' in page
    assert "http-equiv" not in render(tasks, {}, others=others, refresh=0)


async def test_peers_are_asked_for_health_and_pending_reports(tmp_path: Path) -> None:
    """Each shuffler replica's and the device's ``/healthz`` and the first answering replica's
    pending reports; a service that does not answer is ``unreachable``, one starting says what
    it waits for."""
    settings = make_settings(tmp_path, shuffler={"port": 8702,
                                                 "urls": ["http://s1:1", "http://s2:2"]})

    def answer(request: httpx.Request) -> httpx.Response:
        host, path = request.url.host, request.url.path
        if host == "s1":
            raise httpx.ConnectError("refused", request=request)
        if host == "s2" and path == "/healthz":
            return httpx.Response(200, json={"status": "ok"})
        if host == "s2" and path == "/v1/status":
            return httpx.Response(200, json={"tasks": [{
                "task": "shuf", "batch_size": 5, "pending": 3, "accepted": 8,
                "batches_formed": 1, "batches_acknowledged": 1, "batches_in_flight": 0}]})
        return httpx.Response(503, json={"code": "starting", "message": "waiting for models"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        got = await peers(settings, client)
    assert [(p.service, p.url, p.state, p.detail) for p in got.services] == [
        ("shuffler", "http://s1:1", "unreachable", "ConnectError"),
        ("shuffler", "http://s2:2", "ok", ""),
        ("device", settings.device.url, "starting", "waiting for models")]
    assert got.pending == {"shuf": 3}
