"""The Grafana dashboard shipped with compose (``docker/grafana/dashboards/privbandit.json``)
queries only metrics the services export: every ``privbandit_*`` name in its PromQL is one
that real analyzer, shuffler and device apps serve on ``/metrics`` (scraped in-process, the
three wired together over ASGI transports)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from privbandit.services.analyzer.app import create_app as create_analyzer
from privbandit.services.device.app import create_app as create_device
from privbandit.services.shuffler.app import create_app as create_shuffler
from tests.helpers import make_settings, running

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "docker" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "privbandit.json"
PROMETHEUS = ROOT / "docker" / "prometheus" / "prometheus.yml"
METRIC = re.compile(r"\bprivbandit_[a-z0-9_]+")
# The series a family of each type exposes (a counter ``x`` is queried as ``x_total``).
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum",
                                                              "_created"),
            "gauge": ("",), "summary": ("_count", "_sum", "_created")}


def exported(text: str) -> set[str]:
    """Every series name an exposition can carry, samples or not yet."""
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {family.name + s for s in SUFFIXES.get(family.type, ("",))}
        names |= {s.name for s in family.samples}
    return names


async def scrape_all(tmp_path: Path) -> dict[str, str]:
    """Each service's ``/metrics`` after one ``GET /healthz`` on it."""
    settings = make_settings(tmp_path / "data")
    analyzer = create_analyzer(settings)
    async with running(analyzer) as a:
        shuffler = create_shuffler(settings, analyzer_transport=httpx.ASGITransport(analyzer))
        async with running(shuffler) as s:
            device = create_device(settings, analyzer_transport=httpx.ASGITransport(analyzer),
                                   shuffler_transport=httpx.ASGITransport(shuffler))
            async with running(device) as d:
                clients = {"analyzer": a, "shuffler": s, "device": d}
                for c in clients.values():
                    await c.get("/healthz")
                return {name: (await c.get("/metrics")).text for name, c in clients.items()}


def queries(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]


async def test_every_metric_the_dashboard_queries_is_exported(tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    used = {m for q in queries(dashboard) for m in METRIC.findall(q)}
    texts = await scrape_all(tmp_path)
    served = {name: exported(text) for name, text in texts.items()}
    everything = set().union(*served.values())
    assert used, "the dashboard queries no privbandit metric"
    assert not used - everything, f"queried but exported by no service: {used - everything}"
    # Each service's per-route HTTP metrics and the analyzer's per-task gauges are on it.
    for service, text in texts.items():
        assert f"privbandit_{service}_http_requests_total" in used
        assert f"privbandit_{service}_http_request_duration_seconds_bucket" in used
        # ... and each service records its routes there (its GET /healthz above: 200, or
        # 503 while a device still waits for its models).
        assert re.search(f'privbandit_{service}_http_requests_total{{handler="/healthz",'
                         r'method="GET",status="(200|503)"} 1\.0', text), service
    for gauge in ("privacy_epsilon", "task_batches", "task_reports_refused",
                  "task_reports_counted"):
        assert f"privbandit_analyzer_{gauge}" in used


def test_dashboard_and_provisioning_fit_together() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    sources = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml")
                             .read_text())["datasources"]
    uids = {s["uid"] for s in sources}
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] in uids
    providers = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "privbandit.yml")
                               .read_text())["providers"]
    assert providers[0]["options"]["path"] == "/var/lib/grafana/dashboards"
    # Prometheus scrapes every service at the port the default config gives it.
    scrape = yaml.safe_load(PROMETHEUS.read_text())["scrape_configs"]
    targets = {t for job in scrape for sc in job["static_configs"] for t in sc["targets"]}
    assert {"analyzer:8701", "shuffler:8702", "device:8703"} <= targets
