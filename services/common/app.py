"""The one way a service's FastAPI app is put together (each service's ``create_app`` calls
``build_app``): title and version, the request-body limit, error handling (every error as
``ErrorBody``), the service's router, and a lifespan that opens the service's runtime before the
first request, keeps it at ``app.state.runtime`` (where ``services.common.deps.get_runtime``
finds it) and closes it after the last."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI

from services.common.web import BodyLimitMiddleware, ErrorHook, install_error_handlers
from shared.settings import Settings

# Opens a service's runtime (stores, clients, background loops) and closes it on exit.
RuntimeFactory = Callable[[], AbstractAsyncContextManager[Any]]


def build_app(
    service: str,
    settings: Settings,
    *,
    router: APIRouter,
    runtime: RuntimeFactory,
    max_body: int | Callable[[], int],
    description: str = "",
    on_error: ErrorHook | None = None,
) -> FastAPI:
    """A service app: ``runtime()`` is entered for the app's lifespan and what it yields becomes
    ``app.state.runtime``; request bodies above ``max_body`` bytes (a number, or a function
    evaluated per request) are refused with 413 ``body_too_large``; ``on_error`` sees every
    error response (see ``install_error_handlers``)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with runtime() as rt:
            app.state.runtime = rt
            yield

    app = FastAPI(
        title=f"privbandit {service}", version="1", lifespan=lifespan, description=description
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_body)
    app.state.settings = settings
    install_error_handlers(app, on_error=on_error)
    app.include_router(router)
    return app
