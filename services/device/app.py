"""The device service's app factory: storage, model cache and uploader wired into one FastAPI app.

``create_app`` takes optional httpx transports for the two peers so tests can run the analyzer and
shuffler apps in-process (``httpx.ASGITransport``) or substitute fakes; in production the peers are
reached over HTTP at the addresses in ``Settings``. Timings are ``Settings.device_timing``.
"""

from __future__ import annotations

import httpx
from fastapi import FastAPI, Request

from privbandit.services.common.app import build_app
from privbandit.services.device.routes import router
from privbandit.services.device.runtime import open_runtime, state_dir
from privbandit.shared.crypto.paillier import MIN_KEY_BITS
from privbandit.shared.settings import Settings

# Largest request body accepted: K = 1024 arms × d = 64 features as JSON text fits comfortably.
MAX_BODY_BYTES = 4 * 1024 * 1024


def create_app(
    settings: Settings | None = None,
    *,
    analyzer_transport: httpx.AsyncBaseTransport | None = None,
    shuffler_transport: httpx.AsyncBaseTransport | None = None,
    paillier_min_bits: int = MIN_KEY_BITS,
    init: bool = False,
    forget_persons: bool = False,
) -> FastAPI:
    """The device app. Its lifespan opens the store and starts the cache, the Paillier key
    fetchers and the uploader. Raises ``StartupRefused`` when its data directory was initialised
    before and its database is missing or empty (unless ``init``, and ``forget_persons`` too
    when a task bounds each person's reports; see ``services.common.datadir``). It needs no
    shuffler token.

    ``paillier_min_bits``: smallest Paillier key the device encrypts under (tests lower it to
    use fast test keys; production keys have at least 2048 bits).
    """
    settings = settings if settings is not None else Settings()
    return build_app(
        "device",
        settings,
        router=router,
        runtime=lambda: open_runtime(
            settings,
            analyzer_transport=analyzer_transport,
            shuffler_transport=shuffler_transport,
            paillier_min_bits=paillier_min_bits,
        ),
        max_body=MAX_BODY_BYTES,
        description="On-device agent: decides locally, randomises and encrypts feedback.",
        on_error=_count_rejection,
        state=state_dir(settings),
        init=init,
        forget_persons=forget_persons,
    )


def _count_rejection(request: Request, status: int, code: str) -> None:
    """Count every 4xx the device answers, by code (a metric of client mistakes)."""
    runtime = getattr(request.app.state, "runtime", None)
    if runtime is not None and 400 <= status < 500:
        runtime.metrics.rejected.labels(code).inc()
