"""FastAPI dependencies every service declares the same way.

Each service keeps its state in one runtime object at ``app.state.runtime`` (set by the lifespan
that ``services.common.app.build_app`` wires) and declares typed aliases of its own::

    RuntimeDep = Annotated[ShufflerRuntime, Depends(get_runtime)]
    TaskDep = Annotated[TaskSpec, Depends(task_dependency("shuffler"))]
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from fastapi import Request

from privbandit.services.common.errors import UnknownTask

T = TypeVar("T")


async def get_runtime(request: Request) -> Any:
    """The app's runtime (``async``: a plain ``def`` dependency would be run in a worker thread
    on every request)."""
    return runtime_of(request)


def runtime_of(request: Request) -> Any:
    """The app's runtime, for the hot routes (decide, feedback, report uploads) that take the
    ``Request`` itself: resolving ``RuntimeDep`` and ``JsonBody`` as FastAPI dependencies costs
    about 8 µs each per request (docs/benchmarks/load.md, session 5), a few % of a decide."""
    return request.app.state.runtime


def lookup_task(tasks: Mapping[str, T], task: str, service: str) -> T:
    """``tasks[task]``, or 404 ``unknown_task`` (the id is echoed at most 64 characters long)."""
    found = tasks.get(task)
    if found is None:
        raise UnknownTask(f"no task {task[:64]!r} on this {service}")
    return found


def task_dependency(service: str) -> Callable[[str, Request], Awaitable[Any]]:
    """A dependency resolving the ``{task}`` path parameter against ``runtime.tasks`` (a mapping
    from task id to whatever the service keeps per task)."""

    async def get_task(task: str, request: Request) -> Any:
        return lookup_task(request.app.state.runtime.tasks, task, service)

    return get_task
