"""Per-route HTTP metrics (``services.common.http_metrics``): every service counts and times its
requests by route template on its own registry, with labels bounded whatever a client sends."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from privbandit.services.analyzer.app import create_app
from privbandit.services.common.http_metrics import HTTP_SECONDS
from tests.helpers import make_settings, running


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples called ``name`` in an exposition, keyed by their sorted labels."""
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text) for s in family.samples
        if s.name == name
    }


async def test_routes_statuses_and_latency_by_template(tmp_path: Path) -> None:
    async with running(create_app(make_settings(tmp_path / "data"))) as client:
        for _ in range(3):
            assert (await client.get("/v1/tasks/shuf/model")).status_code == 200
        assert (await client.get("/v1/tasks/loc/model")).status_code == 200
        assert (await client.get("/v1/tasks/nope/model")).status_code == 404
        text = (await client.get("/metrics")).text
    requests = samples(text, "privbandit_analyzer_http_requests_total")
    model = "/v1/tasks/{task}/model"
    # Two tasks, one series: the template, not the path.
    assert requests[(("handler", model), ("method", "GET"), ("status", "200"))] == 4
    assert requests[(("handler", model), ("method", "GET"), ("status", "404"))] == 1
    counts = samples(text, "privbandit_analyzer_http_request_duration_seconds_count")
    assert counts[(("handler", model), ("method", "GET"))] == 5
    buckets = samples(text, "privbandit_analyzer_http_request_duration_seconds_bucket")
    les = {dict(k)["le"] for k in buckets if dict(k)["handler"] == model}
    assert les == {repr(float(b)) for b in HTTP_SECONDS} | {"+Inf"}


async def test_labels_stay_bounded_whatever_the_client_sends(tmp_path: Path) -> None:
    """Random paths, random task ids behind a trailing slash (which the instrumentation library
    reports as the raw path: the redirect case) and invented methods add no label value."""
    async with running(create_app(make_settings(tmp_path / "data"))) as client:
        for i in range(20):
            await client.get(f"/random/{i}")
            await client.get(f"/v1/tasks/t{i}/model/")
            await client.request(f"M{i}", "/healthz")
        text = (await client.get("/metrics")).text
    requests = samples(text, "privbandit_analyzer_http_requests_total")
    handlers = {dict(k)["handler"] for k in requests}
    methods = {dict(k)["method"] for k in requests}
    assert handlers == {"none", "/healthz"}
    assert methods == {"GET", "other"}
    assert not re.search(r'handler="[^"]*(random|t\d)', text)
    assert requests[(("handler", "none"), ("method", "GET"), ("status", "404"))] == 20
    assert requests[(("handler", "none"), ("method", "GET"), ("status", "307"))] == 20
    assert requests[(("handler", "/healthz"), ("method", "other"), ("status", "405"))] == 20


async def test_two_apps_in_one_process_keep_their_series_apart(tmp_path: Path) -> None:
    first = create_app(make_settings(tmp_path / "a"))
    second = create_app(make_settings(tmp_path / "b"))
    async with running(first) as a, running(second) as b:
        await a.get("/healthz")
        await a.get("/healthz")
        await b.get("/healthz")
        in_a = samples((await a.get("/metrics")).text, "privbandit_analyzer_http_requests_total")
        in_b = samples((await b.get("/metrics")).text, "privbandit_analyzer_http_requests_total")
    key = (("handler", "/healthz"), ("method", "GET"), ("status", "200"))
    assert in_a[key] == 2 and in_b[key] == 1
