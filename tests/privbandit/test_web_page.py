"""``privbandit.web_page``: the page server of ``privbandit up --web`` (static files of one
folder, config.json, the CSP, nothing else), the tasks it offers and the origins it adds."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from privbandit.web_page import PageError, PageServer, browser_tasks, page_config, with_origin
from tests.helpers import make_settings, shuffle_task


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    page = tmp_path / "page"
    (page / "sub").mkdir(parents=True)
    (page / "index.html").write_text("<!doctype html><title>t</title>")
    (page / "app.js").write_text("export {};")
    (tmp_path / "secret.txt").write_text("outside the folder")
    return page


def test_serves_the_folder_and_its_config_only(folder: Path) -> None:
    config = page_config("http://127.0.0.1:9001", "http://127.0.0.1:9002", ["a", "b"])
    with PageServer(folder, config) as page:
        get = lambda path: httpx.get(f"{page.origin}{path}", timeout=10)  # noqa: E731
        index = get("/")
        assert index.status_code == 200 and "<title>t</title>" in index.text
        csp = index.headers["content-security-policy"]
        assert "connect-src 'self' http://127.0.0.1:9001 http://127.0.0.1:9002;" in csp
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert index.headers["cache-control"] == "no-store"
        js = get("/app.js")
        assert js.status_code == 200
        assert js.headers["content-type"].split(";")[0] in ("text/javascript",
                                                            "application/javascript")
        assert get("/config.json").json() == config
        assert get("/sub/").status_code == 404  # no directory listings
        assert get("/../secret.txt").status_code == 404
        assert get("/%2e%2e/secret.txt").status_code == 404
        assert httpx.post(f"{page.origin}/", timeout=10).status_code == 501  # GET/HEAD only
        # The config can be set once the services' addresses are known.
        later = page_config("http://127.0.0.1:9101", "http://127.0.0.1:9102", ["c"])
        page.configure(later)
        assert get("/config.json").json() == later
        assert "http://127.0.0.1:9101" in get("/").headers["content-security-policy"]


def test_refuses_a_folder_without_a_built_page(tmp_path: Path) -> None:
    with pytest.raises(PageError, match="no built page"):
        PageServer(tmp_path)


def test_offers_the_tasks_the_browser_serves_and_adds_its_origin(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path, tasks=[shuffle_task("rep"), shuffle_task("pai", aggregation="secure-sum"),
                         shuffle_task("pri", aggregation="secure-sum", secure_sum="prio3"),
                         shuffle_task("sch", eps0=None, epsilon=1.0,
                                      batch_schedule="geometric:20,2,160")],
        browser_origins=["https://shop.example"])
    # sblb-fixed over reports and over prio3, and with ε0 from a schedule (the analyzer
    # publishes ε0 per batch length); not over Paillier.
    assert browser_tasks(settings.tasks) == ["rep", "pri", "sch"]
    assert json.loads(with_origin(settings, "http://127.0.0.1:8700")) == [
        "https://shop.example", "http://127.0.0.1:8700"]
    assert json.loads(with_origin(settings, "https://shop.example")) == ["https://shop.example"]
