"""The shuffler service: accepts opaque HPKE ciphertexts from devices, keeps them durably, and
releases each task's reports to the analyzer only in batches of exactly l, in a uniformly random
order from the OS CSPRNG, with nothing but the batch id and the ciphertexts (spec §2). For a
``paillier`` task it accepts Paillier-encrypted counts instead and releases only the encrypted
sum of each batch of l (spec §3).

It holds no private key and cannot read a report. Its task list comes from its own ``Settings``.
"""

from __future__ import annotations

import httpx
from fastapi import FastAPI

from privbandit.services.common.app import build_app
from privbandit.services.shuffler.routes import BROWSER_ROUTES, router
from privbandit.services.shuffler.runtime import open_runtime, state_dir
from privbandit.services.shuffler.tasks import task_specs
from privbandit.services.shuffler.transports import NO_TASK_CT_BYTES
from privbandit.services.shuffler.transports.base import upload_limit
from privbandit.shared.settings import Settings


def create_app(
    settings: Settings | None = None,
    *,
    analyzer_transport: httpx.AsyncBaseTransport | None = None,
    init: bool = False,
) -> FastAPI:
    """Build a shuffler app; its state lives in ``settings.data_dir / "shuffler"``. Raises
    ``StartupRefused`` without a usable shuffler token, or when that directory was initialised
    before and its database is missing or empty (unless ``init``; see
    ``services.common.datadir``).

    ``analyzer_transport``: how to reach the analyzer (default: HTTP to ``settings.analyzer``);
    tests pass ``httpx.ASGITransport(analyzer_app)`` or a failing transport.
    """
    settings = settings if settings is not None else Settings()
    if settings.shuffler.postgres:
        # A wrong URL or a server that is down refuses the start at once (no SQLite fallback).
        from privbandit.services.common import pg

        pg.check(settings.shuffler.store, service="shuffler")
    specs = task_specs(settings)

    def max_body() -> int:
        """The body limit, per request, from the tasks' transports: e.g. a Paillier report's
        length depends on the analyzer's key, known once fetched (until then uploads are
        refused with 503 anyway, and the limit assumes the default key size). No request is
        served before the lifespan opened the runtime."""
        runtime = getattr(app.state, "runtime", None)
        if runtime is None:
            return upload_limit(NO_TASK_CT_BYTES)
        return runtime.transports.max_body()

    app = build_app(
        "shuffler",
        settings,
        router=router,
        runtime=lambda: open_runtime(settings, specs, analyzer_transport),
        max_body=max_body,
        state=state_dir(settings),
        init=init,
        uses_shuffler_token=True,
        browser_routes=BROWSER_ROUTES,
    )
    return app
