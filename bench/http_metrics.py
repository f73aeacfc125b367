"""CPU cost of two middlewares of every service app, the per-route HTTP metrics
(``services.common.http_metrics``) and the request ids (``services.common.logs``, issue 45): the
analyzer's cheapest request, a model fetch answered 304 from its ETag, called N times in-process
through the app's ASGI interface, by three apps built alike except that one has the
instrumentation middleware removed and one the request-id middleware; rounds alternate, the
median per app is reported.

    python bench/http_metrics.py [--requests 20000] [--rounds 3]
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from bench.args import parse, write_json
from privbandit.services.analyzer.app import create_app
from privbandit.shared.settings import Settings, TaskConfig

TOKEN = "bench-shuffler-token-0123456789abcdef"
TASK = TaskConfig.model_validate({
    "id": "shuf", "threat_model": "shuffle", "K": 4,
    "policy": {"algo": "sblb-fixed", "d": 3, "eps0": 4.0, "batch_size": 100},
})
PATH = "/v1/tasks/shuf/model"


async def cpu_per_request(app: FastAPI, n: int) -> float:
    """Microseconds of this process's CPU per ``GET PATH`` with ``If-None-Match: "0"``."""
    scope: dict[str, Any] = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": PATH, "raw_path": PATH.encode(), "query_string": b"",
        "root_path": "", "headers": [(b"host", b"bench"), (b"if-none-match", b'"0"')],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
    }
    statuses: set[int] = set()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.add(message["status"])

    start = time.process_time()
    for _ in range(n):
        await app(dict(scope, state={}, app=app), receive, send)  # type: ignore[arg-type]  # plain dicts as ASGI messages
    elapsed = time.process_time() - start
    assert statuses == {304}, statuses
    return elapsed / n * 1e6


async def main() -> None:
    args = parse(__doc__, {"requests": 20000, "rounds": 3}, "out/bench/http_metrics.json")
    with tempfile.TemporaryDirectory() as tmp:
        apps = {}
        for name, without in (("full", None), ("bare", "Prometheus"),
                              ("no_request_ids", "CorrelationId")):
            settings = Settings(data_dir=Path(tmp) / name, shuffler_token=TOKEN, tasks=[TASK])
            app = apps[name] = create_app(settings)
            if without is not None:
                app.user_middleware = [m for m in app.user_middleware
                                       if without not in getattr(m.cls, "__name__", "")]
        results: dict[str, list[float]] = {name: [] for name in apps}
        ctx = [app.router.lifespan_context(app) for app in apps.values()]
        for c in ctx:
            await c.__aenter__()
        try:
            for _ in range(args.rounds):
                for name, app in apps.items():
                    await cpu_per_request(app, 500)  # warm-up
                    results[name].append(await cpu_per_request(app, args.requests))
        finally:
            for c in reversed(ctx):
                await c.__aexit__(None, None, None)
    medians = {name: statistics.median(r) for name, r in results.items()}
    extra = medians["full"] - medians["bare"]
    ids = medians["full"] - medians["no_request_ids"]
    for name, rounds in results.items():
        print(f"{name:>15}: {medians[name]:.1f} µs CPU/request (rounds: "
              + ", ".join(f"{x:.1f}" for x in rounds) + ")")
    print(f"per-route HTTP metrics: +{extra:.1f} µs CPU per request "
          f"(full / bare = {medians['full'] / medians['bare']:.3f})")
    print(f"request ids: +{ids:.1f} µs CPU per request "
          f"(full / without = {medians['full'] / medians['no_request_ids']:.3f})")
    write_json(args.json, {"requests": args.requests, "path": PATH, "rounds_us": results,
                           "median_us": medians, "extra_us": extra, "request_ids_us": ids})


if __name__ == "__main__":
    asyncio.run(main())
