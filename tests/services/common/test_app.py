"""The shared app pieces: ``build_app`` (lifespan, runtime, body limit, error bodies), the task
dependency, readiness on ``/healthz``, per-app metrics and the error kinds."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Response

from privbandit.services.common.app import build_app
from privbandit.services.common.deps import get_runtime, task_dependency
from privbandit.services.common.errors import (
    Conflict,
    NotFound,
    ServiceError,
    Unavailable,
    UnknownTask,
)
from privbandit.services.common.group_commit import ShuttingDown
from privbandit.services.common.health import Readiness, health
from privbandit.services.common.metrics import ServiceMetrics
from tests.helpers import error, make_settings, running


class Metrics(ServiceMetrics):
    def __init__(self) -> None:
        super().__init__("probe")
        self.hits = self.counter("hits", "Task lookups", ["task"])


@dataclass
class Runtime:
    tasks: dict[str, int]
    ready: bool = False
    metrics: Metrics = field(default_factory=Metrics)
    readiness: Readiness = field(default_factory=Readiness)
    closed: bool = False


class Taken(Conflict, code="taken"):
    pass


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
TaskDep = Annotated[int, Depends(task_dependency("probe"))]
router = APIRouter()


@router.get("/v1/tasks/{task}")
async def get_task(value: TaskDep, task: str, runtime: RuntimeDep) -> dict[str, int]:
    runtime.metrics.hits.labels(task).inc()
    return {"value": value}


@router.post("/v1/tasks/{task}")
async def post_task(value: TaskDep) -> None:
    raise Taken(f"value {value} is taken", headers={"Retry-After": "3"})


@router.get("/healthz")
async def healthz(runtime: RuntimeDep) -> Response:
    return health("probe", runtime.readiness, {"tasks": sorted(runtime.tasks)})


@router.get("/metrics")
async def metrics(runtime: RuntimeDep) -> Response:
    return runtime.metrics.response()


def probe_app(tmp_path: Path, seen: list[Runtime]) -> object:
    @asynccontextmanager
    async def open_runtime() -> AsyncIterator[Runtime]:
        rt = Runtime(tasks={"a": 1, "b": 2})
        rt.readiness.require("the analyzer", lambda: [] if rt.ready else ["key", "model:a"])
        rt.readiness.require_that("the committer", lambda: rt.ready)
        seen.append(rt)
        try:
            yield rt
        finally:
            rt.closed = True

    return build_app("probe", make_settings(tmp_path), router=router, runtime=open_runtime,
                     max_body=64)


async def test_build_app_wires_runtime_errors_limits_health_and_metrics(tmp_path: Path) -> None:
    seen: list[Runtime] = []
    app = probe_app(tmp_path, seen)
    async with running(app) as client:  # type: ignore[arg-type]
        (rt,) = seen
        assert app.state.runtime is rt  # type: ignore[attr-defined]
        assert (await client.get("/v1/tasks/b")).json() == {"value": 2}
        body = error(await client.get("/v1/tasks/" + "x" * 100), 404, "unknown_task")
        assert body.message == f"no task {'x' * 64!r} on this probe"
        r = await client.post("/v1/tasks/a")
        assert error(r, 409, "taken").message == "value 1 is taken"
        assert r.headers["retry-after"] == "3"
        error(await client.post("/v1/tasks/a", content=b"x" * 65), 413, "body_too_large")
        error(await client.get("/nothing"), 404, "not_found")
        starting = error(await client.get("/healthz"), 503, "starting")
        assert starting.message == "waiting for the analyzer: key, model:a; the committer"
        rt.ready = True
        assert (await client.get("/healthz")).json() == {
            "status": "ok", "service": "probe", "tasks": ["a", "b"]}
        text = (await client.get("/metrics")).text
        assert 'privbandit_probe_hits_total{task="b"} 1.0' in text
        # The process collector is on the registry /metrics exposes (issue 45 item 9).
        for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                     "process_open_fds", "process_max_fds"):
            line = next(x for x in text.splitlines() if x.startswith(name + " "))
            assert float(line.split()[1]) > 0, line
    assert rt.closed


async def test_a_service_process_freezes_its_startup_heap_and_a_test_app_does_not(
    tmp_path: Path,
) -> None:
    """``cli.serve`` flags the app: once its runtime is up, what is alive is frozen out of the
    garbage collector (full collections under load stop walking it), and the collector, which a
    service's ``__main__`` turned off for its start, is on again; an app built without the
    flag (tests, embedding) leaves the collector alone."""
    gc.unfreeze()
    try:
        async with running(probe_app(tmp_path, [])):  # type: ignore[arg-type]
            assert gc.get_freeze_count() == 0
        app = probe_app(tmp_path, [])
        app.state.freeze_gc = True  # type: ignore[attr-defined]
        gc.disable()
        async with running(app):  # type: ignore[arg-type]
            assert gc.get_freeze_count() > 10_000
            assert gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()


def test_error_kinds_carry_status_and_code() -> None:
    assert (UnknownTask.status, UnknownTask.default_code) == (404, "unknown_task")
    assert issubclass(UnknownTask, NotFound) and issubclass(Taken, ServiceError)
    assert (Taken.status, Taken("m").code, Taken("m", code="other").code) == (409, "taken",
                                                                             "other")
    # A commit refused at shutdown reaches a client as 503 "unavailable".
    assert issubclass(ShuttingDown, Unavailable) and ShuttingDown("x").status == 503


def test_a_service_process_runs_blas_on_one_thread() -> None:
    """``cli.serve`` limits BLAS to one thread (a multi-threaded BLAS stalls a busy host's event
    loop on d×d work); the limiter restores the previous limits."""
    from threadpoolctl import threadpool_info

    from privbandit.services.common.cli import single_threaded_blas

    limiter = single_threaded_blas()
    try:
        blas = [p for p in threadpool_info() if p["user_api"] == "blas"]
        assert blas and all(p["num_threads"] == 1 for p in blas)
    finally:
        limiter.restore_original_limits()


def test_no_page_loads_scripts_from_a_cdn() -> None:
    """FastAPI's /docs and /redoc pages fetch their scripts from a CDN (nothing loads offline):
    not served; the schema is (issue 26 item 10)."""
    import tempfile
    from pathlib import Path

    from fastapi.testclient import TestClient

    from privbandit.services.shuffler.app import create_app
    from tests.helpers import make_settings

    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(make_settings(Path(tmp) / "data"))
        client = TestClient(app)
        assert client.get("/docs").status_code == 404
        assert client.get("/redoc").status_code == 404
        assert client.get("/openapi.json").json()["info"]["title"] == "privbandit shuffler"


def test_an_unreachable_database_is_a_503_with_retry_after() -> None:
    """A lost PostgreSQL connection, once the transaction's retries are spent, is answered
    503 store_unavailable with Retry-After, not 500 (issue 26 item 2); other errors stay 500."""
    import psycopg
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from privbandit.services.common.web import STORE_RETRY_AFTER, install_error_handlers

    app = FastAPI()
    install_error_handlers(app)

    @app.get("/lost")
    async def lost() -> None:
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    @app.get("/broken")
    async def broken() -> None:
        raise RuntimeError("a bug")

    client = TestClient(app, raise_server_exceptions=False)
    r = client.get("/lost")
    assert r.status_code == 503 and r.json()["code"] == "store_unavailable"
    assert r.headers["Retry-After"] == str(STORE_RETRY_AFTER)
    r = client.get("/broken")
    assert r.status_code == 500 and "Retry-After" not in r.headers
