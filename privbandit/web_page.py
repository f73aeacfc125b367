"""The browser client's demo page (docs/web-client.md, "The page"): built from
``clients/web`` (``node page/build.mjs``, esbuild) and served as static files with the
``config.json`` that tells the page where the analyzer and the shuffler are and which tasks to
offer. ``privbandit up --web`` runs it beside the services and lists its origin in the services'
``browser_origins`` (CORS, ``services.common.cors``); the end-to-end test and the benchmark
serve it the same way.

The server is the standard library's threaded HTTP server: GET and HEAD of the built files
only (no directory listings, nothing outside the folder), every answer ``no-store``, and a
Content-Security-Policy that lets the page's scripts talk to its own origin, the analyzer and
the shuffler, and nothing else.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from privbandit.shared.protocol.messages import TaskInfo
from privbandit.shared.settings import Settings, TaskConfig

# The source checkout's web client (the page is not part of the Python wheel).
WEB_ROOT = Path(__file__).resolve().parent.parent / "clients" / "web"
PAGE_DIR = WEB_ROOT / "dist" / "page"
# The policies whose device role the browser client implements (issue 41: the linear tasks).
BROWSER_ALGOS = frozenset({"sblb", "sblb-fixed", "ddp-linucb", "ldp-linucb"})


class PageError(RuntimeError):
    """The page cannot be built or served (a one-line reason for the user)."""


def browser_tasks(tasks: Iterable[TaskConfig]) -> list[str]:
    """The ids of the tasks the browser client can serve (clients/web/src/device/binding.ts):
    linear tasks of its policies over HPKE reports or Prio3 (the browser has no Paillier
    transport; an sblb task whose ε0 follows its batch schedule randomises at the ε0 the
    analyzer publishes per batch length), but not a ddp-linucb task whose devices add the
    noise."""
    def served(t: TaskConfig) -> bool:
        policy = t.policy
        if policy.algo not in BROWSER_ALGOS:
            return False
        if t.aggregation != "reports" and t.secure_sum != "prio3":
            return False
        return getattr(policy, "noise", "aggregators") == "aggregators"

    return [t.id for t in tasks if served(t)]


def build_page(web_root: Path = WEB_ROOT) -> Path:
    """Bundle the page into ``dist/page`` with the checkout's esbuild; the folder."""
    node = shutil.which("node")
    if node is None:
        raise PageError("the page is built with Node.js (20 or later): install it (apt-get "
                        "install nodejs) and run `npm ci` in clients/web")
    if not (web_root / "node_modules" / "esbuild").is_dir():
        raise PageError(f"the page's build tools are missing: run `npm ci` in {web_root}")
    done = subprocess.run([node, "page/build.mjs"], cwd=web_root, capture_output=True,
                          text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise PageError(f"building the page failed: {(done.stderr or done.stdout).strip()}")
    return web_root / "dist" / "page"


def page_config(analyzer: str, shuffler: str, tasks: list[str],
                timing: dict[str, Any] | None = None) -> dict[str, Any]:
    """The page's ``config.json``: where the services are and which tasks to offer."""
    out: dict[str, Any] = {"analyzer": analyzer, "shuffler": shuffler, "tasks": tasks}
    if timing:
        out["timing"] = timing
    return out


class _Handler(SimpleHTTPRequestHandler):
    """Static files of one folder, ``config.json`` from memory; quiet."""

    config_body: bytes = b"{}"
    csp: str = "default-src 'self'"

    def list_directory(self, path: str | Path) -> None:  # type: ignore[override]  # no listings
        self.send_error(HTTPStatus.NOT_FOUND)
        return None

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", self.csp)
        self.send_header("X-Content-Type-Options", "nosniff")
        super().end_headers()

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == "/config.json":
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(self.config_body)))
            self.end_headers()
            self.wfile.write(self.config_body)
            return
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        return None


class PageServer:
    """The built page at ``http://host:port/``, served from a thread until ``stop()``."""

    def __init__(self, folder: Path, config: dict[str, Any] | None = None,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        """Bound at once (so ``origin`` is known, e.g. to list it in the services'
        ``browser_origins`` before they start); ``configure`` sets the page's config.json if
        it is not known yet either."""
        if not (folder / "index.html").is_file() or not (folder / "app.js").is_file():
            raise PageError(f"no built page in {folder}: run `node page/build.mjs` in "
                            f"{WEB_ROOT}")
        self.handler: type[_Handler] = type("PageHandler", (_Handler,), {})
        self.configure(config or page_config("", "", []))
        self.server = ThreadingHTTPServer(
            (host, port), functools.partial(self.handler, directory=str(folder)))
        self.server.daemon_threads = True
        self.host = host
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, name="web-page",
                                        daemon=True)

    def configure(self, config: dict[str, Any]) -> None:
        """The page's config.json, and the CSP that lets it reach those services only."""
        connect = " ".join(["'self'", *(u for u in (config["analyzer"], config["shuffler"])
                                        if u)])
        self.handler.config_body = json.dumps(config).encode()
        self.handler.csp = (f"default-src 'self'; img-src 'self' data:; connect-src {connect}; "
                            "worker-src 'self'; object-src 'none'; base-uri 'none'; "
                            "frame-ancestors 'none'")

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> PageServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> PageServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def user_table(task: TaskInfo, n: int, seed: int) -> list[dict[str, Any]]:
    """The demo's first ``n`` users of ``task`` for ``seed`` (``privbandit.demo.driver``): each
    one's K feature vectors, true means and reward draw, exactly as the Python demo and the
    simulator's same-users reference see them; the page's harness plays them."""
    from privbandit.demo.driver import Driver  # aiohttp and the environments: not for `up`

    driver = Driver(device_url="http://unused", task=task, users=n, seed=seed)
    out = []
    for i in range(n):
        X, mu, u = driver.user(i)
        out.append({"X": X.tolist(), "mu": mu.tolist(), "u": u})
    return out


def drive_page(job: dict[str, Any], workdir: Path, timeout: float,
               halfway: Callable[[], None] | None = None) -> dict[str, Any]:
    """Run ``clients/web/page/drive.mjs`` (headless Chromium through playwright-core) on
    ``job`` (its keys: the script's header; ``webRoot`` is filled in) and return its result;
    ``PageError`` with the script's last words if it fails. ``halfway``: called once the page
    is halfway through the first task (e.g. to restart a service), the page waiting meanwhile."""
    job = {"webRoot": str(WEB_ROOT), **job}
    ready, go = workdir / "page-halfway", workdir / "page-go"
    if halfway is not None:
        job["handshake"] = {"ready": str(ready), "go": str(go)}
    job_file = workdir / "page-job.json"
    job_file.write_text(json.dumps(job))
    node = shutil.which("node") or "node"
    with subprocess.Popen([node, str(WEB_ROOT / "page" / "drive.mjs"), str(job_file)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            if halfway is not None:
                until = time.monotonic() + timeout
                while not ready.exists() and proc.poll() is None and time.monotonic() < until:
                    time.sleep(0.1)
                if ready.exists():
                    halfway()
                    go.touch()
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            proc.kill()
            raise
    if proc.returncode != 0:
        raise PageError(f"the page driver failed: {err[-3000:]}")
    result: dict[str, Any] = json.loads(out)
    return result


def with_origin(settings: Settings, origin: str) -> str:
    """``PRIVBANDIT_BROWSER_ORIGINS`` for the services: the configured origins and ``origin``
    (JSON, as pydantic-settings reads a list from the environment)."""
    origins = list(dict.fromkeys([*settings.browser_origins, origin]))
    return json.dumps(origins)
