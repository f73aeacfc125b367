"""The analyzer's status page (``GET /status``) in a real browser: headless Chromium (Debian's
``chromium`` package) renders the page of a real ``python -m services.analyzer`` process, and
what it shows is what ``/v1/tasks/{task}/privacy`` says. Skipped, with the reason, where no
Chromium is installed (``.ci/run`` installs it when it can)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
import tomli_w

from privbandit.launcher import ServiceProcess, free_ports
from privbandit.shared.protocol.messages import (
    BatchUpload,
    HpkeConfig,
    PrivacyReport,
    ReportUpload,
    UploadedReport,
)
from tests.helpers import TOKEN, auth, patience, report_maker, shuffle_task

CHROMIUM = next((p for p in (os.environ.get("CHROMIUM"), shutil.which("chromium"),
                             shutil.which("chromium-browser")) if p), None)

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium not found (install Debian's chromium package, or set CHROMIUM)",
)

TASK = shuffle_task(l=5)
# No network of its own, no first-run or background work, a throw-away profile.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


@dataclass
class Services:
    analyzer: str
    shuffler: str
    device: str  # not started: the page shows it unreachable


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    """A real analyzer process and a real shuffler process with one shuffle task; no device."""
    ports = dict(zip(("analyzer", "shuffler", "device"), free_ports(3), strict=True))
    config = tmp_path / "privbandit.toml"
    config.write_text(tomli_w.dumps({
        "data_dir": str(tmp_path / "data"), "shuffler_token": TOKEN, "log_level": "warning",
        **{name: {"host": "127.0.0.1", "port": port} for name, port in ports.items()},
        "tasks": [TASK.model_dump(mode="json", exclude_none=True)],
    }))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVBANDIT_")}
    env.update(PRIVBANDIT_CONFIG=str(config), PYTHONPATH=str(Path(__file__).parents[2]))
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    # Both at once (the shuffler retries the analyzer until it answers), started and awaited by
    # the launcher's own ServiceProcess: its health wait names the service that must answer.
    started = [ServiceProcess(name, ports[name], log_path=tmp_path / f"{name}.log")
               for name in ("analyzer", "shuffler")]
    try:
        for svc in started:
            svc.start(env)
        for svc in started:
            svc.wait_healthy(patience(60))
        yield Services(**urls)
    finally:
        for svc in reversed(started):
            svc.stop(patience(10))


class Cells(HTMLParser):
    """The text of every ``<td data-field=...>`` in each ``<tr id=...>``: {row: {field: text}}."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}
        self.ids: set[str] = set()
        self._row: str | None = None
        self._field: str | None = None
        self.tags: set[str] = set()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.add(tag)
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]
        if a.get("id"):
            self.ids.add(str(a["id"]))
        if tag == "tr" and a.get("id"):
            self._row = a["id"]
            self.rows[str(self._row)] = {}
        if tag == "td" and a.get("data-field"):
            self._field = a["data-field"]

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._field = None

    def handle_data(self, data: str) -> None:
        if self._row is not None and self._field is not None:
            self.rows[self._row][self._field] = data.strip()


def dump_dom(url: str) -> str:
    """The DOM Chromium built for ``url`` (a fresh profile, removed afterwards)."""
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory(prefix="h7-chromium-") as profile:
        done = subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
            capture_output=True, text=True, timeout=patience(60), check=False,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_status_page_renders_in_headless_chromium(services: Services) -> None:
    analyzer = services.analyzer
    with httpx.Client(base_url=analyzer, timeout=patience(10)) as client:
        hpke = HpkeConfig.model_validate_json(client.get("/v1/hpke-config").content)
        make = report_maker(hpke)
        upload = BatchUpload(batch_id="b" * 32, reports=make(TASK, 5))
        r = client.post(f"/v1/tasks/{TASK.id}/batches", json=upload.model_dump(mode="json"),
                        headers=auth())
        assert r.status_code == 200
        report = PrivacyReport.model_validate_json(
            client.get(f"/v1/tasks/{TASK.id}/privacy").content)
        # Three reports at the shuffler: fewer than a batch (l = 5), so they stay pending.
        pending = ReportUpload(reports=[UploadedReport(**r.model_dump())
                                        for r in make(TASK, 3)])
        r = client.post(f"{services.shuffler}/v1/tasks/{TASK.id}/reports",
                        json=pending.model_dump(mode="json"))
        assert r.status_code == 202, r.text
    dom = dump_dom(analyzer + "/status")
    page = Cells()
    page.feed(dom)
    # The browser built the page (its title and state), and fetched nothing else.
    assert "<title>privbandit analyzer — status</title>" in dom
    assert "state" in page.ids and "ready" in dom
    assert "script" not in page.tags and page.urls == []
    row = page.rows[f"task-{TASK.id}"]
    assert row["task"] == TASK.id
    assert row["model_version"] == str(report.model_version) == "1"
    assert row["batches"] == str(report.batches) == "1"
    assert row["reports_counted"] == str(report.reports_counted) == "5"
    assert row["reports_refused"] == "0"
    # Issue 45 item 9: what is pending at the shuffler, the last batch, the other services, a
    # reload of its own, and the accounting prose once (a note the ledger rows cite).
    assert row["pending_at_shuffler"] == "3"
    assert row["last_batch"].endswith(" s ago)") and "UTC" in row["last_batch"]
    assert page.rows[f"peer-shuffler-{services.shuffler}"]["state"] == "ok"
    assert page.rows[f"peer-device-{services.device}"]["state"] == "unreachable"
    assert '<meta http-equiv="refresh" content="10">' in dom
    assert page.rows[f"ledger-{TASK.id}-central"]["note"] == "[1]"
    assert dom.count(report.ledger.accounting.split(".")[0]) == 1
    central = page.rows[f"ledger-{TASK.id}-central"]
    assert report.ledger.central_epsilon is not None
    assert float(central["epsilon"]) == pytest.approx(report.ledger.central_epsilon, rel=1e-5)
    local = page.rows[f"ledger-{TASK.id}-ldp"]
    assert float(local["epsilon"]) == report.ledger.ldp_epsilon == TASK.policy.eps0
