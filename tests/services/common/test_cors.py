"""CORS for browser clients (issue 41, ``services.common.cors``), on the real analyzer and
shuffler apps: exactly the browser routes open, for exactly the configured origins, no
credentials, no wildcard; nothing at all by default; nothing changes for a client without an
``Origin``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from privbandit.services.analyzer.app import create_app as create_analyzer
from privbandit.services.shuffler.app import create_app as create_shuffler
from privbandit.shared.settings import Settings
from tests.helpers import make_settings, running

PAGE = "http://page.test:8080"
OTHER = "http://evil.test"


@asynccontextmanager
async def stack(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """The real analyzer and a shuffler that reaches it in-process."""
    analyzer_app = create_analyzer(settings)
    async with running(analyzer_app) as analyzer:
        shuffler_app = create_shuffler(
            settings, analyzer_transport=httpx.ASGITransport(analyzer_app))
        async with running(shuffler_app) as shuffler:
            yield analyzer, shuffler


def preflight(method: str, origin: str = PAGE, headers: str = "") -> dict[str, str]:
    out = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers:
        out["Access-Control-Request-Headers"] = headers
    return out


def cors_headers(resp: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in resp.headers.items() if k.lower().startswith("access-control-")}


@pytest.fixture
def open_settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path / "data", browser_origins=[PAGE])


async def test_browser_routes_open_to_the_listed_origin_only(open_settings: Settings) -> None:
    async with stack(open_settings) as (analyzer, shuffler):
        # The analyzer's reads: preflights (a model poll sends If-None-Match; an EventSource
        # reconnecting sends Last-Event-ID) and the answers themselves.
        for path, headers in [("/v1/hpke-config", ""), ("/v1/tasks/shuf", ""),
                              ("/v1/tasks/shuf/model", "if-none-match"),
                              ("/v1/tasks/shuf/model/stream", "last-event-id"),
                              ("/v1/tasks/shuf/privacy", "")]:
            resp = await analyzer.options(path, headers=preflight("GET", headers=headers))
            assert resp.status_code == 200, (path, resp.text)
            got = cors_headers(resp)
            assert got["access-control-allow-origin"] == PAGE
            assert "GET" in got["access-control-allow-methods"]
            assert "access-control-allow-credentials" not in got
            if headers:
                assert headers in got["access-control-allow-headers"].lower()
            # Another origin is refused (no allow-origin: the browser blocks the request).
            resp = await analyzer.options(path, headers=preflight("GET", origin=OTHER))
            assert resp.status_code == 400
            assert "access-control-allow-origin" not in resp.headers
        for path in ["/v1/hpke-config", "/v1/tasks/shuf", "/v1/tasks/shuf/model",
                     "/v1/tasks/shuf/privacy"]:
            resp = await analyzer.get(path, headers={"Origin": PAGE})
            assert resp.status_code == 200, (path, resp.text)
            assert resp.headers["access-control-allow-origin"] == PAGE
            assert "origin" in resp.headers["vary"].lower()  # caches keep origins apart
            assert "access-control-allow-credentials" not in resp.headers
            assert "etag" in resp.headers["access-control-expose-headers"].lower()
            resp = await analyzer.get(path, headers={"Origin": OTHER})
            assert "access-control-allow-origin" not in resp.headers
        # An error is readable too (the page learns why), e.g. an unknown task's 404.
        resp = await analyzer.get("/v1/tasks/nope/model", headers={"Origin": PAGE})
        assert resp.status_code == 404
        assert resp.headers["access-control-allow-origin"] == PAGE
        # The shuffler's report uploads: a JSON POST, preflighted.
        for path in ["/v1/tasks/shuf/reports", "/v1/tasks/shuf/prio3-reports"]:
            resp = await shuffler.options(path, headers=preflight("POST", headers="content-type"))
            assert resp.status_code == 200, (path, resp.text)
            assert resp.headers["access-control-allow-origin"] == PAGE
            assert "POST" in resp.headers["access-control-allow-methods"]
            assert "content-type" in resp.headers["access-control-allow-headers"].lower()
        resp = await shuffler.post("/v1/tasks/shuf/reports", json={"reports": []},
                                   headers={"Origin": PAGE})
        assert resp.status_code == 422  # refused as for any client, and readable by the page
        assert resp.headers["access-control-allow-origin"] == PAGE
        assert "retry-after" in resp.headers["access-control-expose-headers"].lower()


async def test_other_routes_and_methods_stay_closed(open_settings: Settings) -> None:
    async with stack(open_settings) as (analyzer, shuffler):
        # Not a browser route: no CORS at all, whatever the origin.
        for client, path, method in [
            (analyzer, "/status", "GET"), (analyzer, "/metrics", "GET"),
            (analyzer, "/healthz", "GET"), (analyzer, "/v1/tasks/shuf/batches", "POST"),
            (shuffler, "/v1/status", "GET"), (shuffler, "/metrics", "GET"),
            (shuffler, "/v1/tasks/shuf/encrypted-counts", "POST"),
        ]:
            resp = await client.options(path, headers=preflight(method, headers="content-type"))
            assert "access-control-allow-origin" not in resp.headers, path
            if method == "GET":
                resp = await client.get(path, headers={"Origin": PAGE})
                assert cors_headers(resp) == {}, path
        # A browser route with a method it does not have: the preflight fails.
        resp = await analyzer.options("/v1/tasks/shuf/model", headers=preflight("POST"))
        assert resp.status_code == 400
        resp = await shuffler.options("/v1/tasks/shuf/reports", headers=preflight("GET"))
        assert resp.status_code == 400
        # A header beyond the three a client needs (e.g. Authorization): the preflight fails,
        # so no page can present the shuffler's bearer token.
        resp = await shuffler.options("/v1/tasks/shuf/reports",
                                      headers=preflight("POST", headers="authorization"))
        assert resp.status_code == 400


async def test_nothing_opens_by_default_and_clients_without_origin_see_no_change(
    settings: Settings, open_settings: Settings
) -> None:
    assert settings.browser_origins == []
    async with stack(settings) as (analyzer, shuffler):
        resp = await analyzer.options("/v1/tasks/shuf/model", headers=preflight("GET"))
        assert "access-control-allow-origin" not in resp.headers
        resp = await analyzer.get("/v1/tasks/shuf/model", headers={"Origin": PAGE})
        assert resp.status_code == 200
        assert cors_headers(resp) == {}
        resp = await shuffler.options("/v1/tasks/shuf/reports", headers=preflight("POST"))
        assert "access-control-allow-origin" not in resp.headers
        closed = await analyzer.get("/v1/tasks/shuf/model")
    async with stack(open_settings) as (analyzer, shuffler):
        opened = await analyzer.get("/v1/tasks/shuf/model")
        # Without an Origin (any non-browser client) the answer is the same as with CORS off.
        assert cors_headers(opened) == {}
        assert opened.status_code == closed.status_code == 200
        assert opened.headers["etag"] == closed.headers["etag"]
        assert opened.content == closed.content


@pytest.mark.parametrize("origin", [
    "*", "null", "http://page.test/", "http://page.test/app", "ftp://page.test",
    "http://Page.test", "page.test", "http://*.page.test", "https://page.test:8080/x",
])
def test_an_origin_that_would_open_more_than_one_site_is_refused(
    tmp_path: Path, origin: str
) -> None:
    with pytest.raises(ValidationError, match="browser origin"):
        make_settings(tmp_path, browser_origins=[origin])


def test_origins_as_a_browser_sends_them_are_accepted(tmp_path: Path) -> None:
    origins = ["http://127.0.0.1:8080", "https://shop.example", "http://[::1]:9000"]
    assert make_settings(tmp_path, browser_origins=origins).browser_origins == origins
