"""The shuffler service: accepts opaque HPKE ciphertexts from devices, keeps them durably, and
releases each task's reports to the analyzer only in batches of exactly l, in a uniformly random
order from the OS CSPRNG, with nothing but the batch id and the ciphertexts (spec §2). For a
``secure-sum`` task it accepts Paillier-encrypted counts instead and releases only the encrypted
sum of each batch of l (spec §3).

It holds no private key and cannot read a report. Its task list comes from its own ``Settings``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from fastapi import FastAPI

from services.common.web import BodyLimitMiddleware, install_error_handlers, report_json_bytes
from services.shuffler.forwarder import HTTP_TIMEOUT, Committer, Forwarder
from services.shuffler.metrics import ShufflerMetrics
from services.shuffler.routes import ShufflerRuntime, TaskSpec, router
from services.shuffler.secure_sum import PaillierState, fetch_paillier_config
from services.shuffler.store import Store
from shared.core.policies import randomizer_for
from shared.crypto.hpke import ciphertext_length, row_length
from shared.crypto.paillier import DEFAULT_KEY_BITS
from shared.crypto.slots import layout_for
from shared.protocol.messages import MAX_REPORTS_PER_UPLOAD
from shared.settings import Settings, TaskConfig

DB_FILE = "shuffler.sqlite3"


def _ct_bytes(config: TaskConfig) -> int:
    """The task's HPKE ciphertext length: report id + the randomizer's row + AEAD tag (public).
    0 for a secure-sum task, whose ciphertext length depends on the analyzer's Paillier key."""
    if config.aggregation == "secure-sum":
        return 0
    return ciphertext_length(row_length(randomizer_for(config.policy)))


def _upload_limit(ct_bytes: int) -> int:
    """Largest acceptable upload body: the most reports per upload of ``ct_bytes`` each."""
    return MAX_REPORTS_PER_UPLOAD * report_json_bytes(ct_bytes) + 64 * 1024


def create_app(
    settings: Settings | None = None,
    *,
    analyzer_transport: httpx.AsyncBaseTransport | None = None,
) -> FastAPI:
    """Build a shuffler app; its state lives in ``settings.data_dir / "shuffler"``.

    ``analyzer_transport``: how to reach the analyzer (default: HTTP to ``settings.analyzer``);
    tests pass ``httpx.ASGITransport(analyzer_app)`` or a failing transport.
    """
    settings = settings if settings is not None else Settings()
    specs = {t.id: TaskSpec(config=t, ct_bytes=_ct_bytes(t)) for t in settings.tasks}
    largest_report = max((s.ct_bytes for s in specs.values()), default=1024)
    hpke_limit = _upload_limit(largest_report)
    secure_tasks = [t for t in settings.tasks if t.aggregation == "secure-sum"]

    @functools.lru_cache(maxsize=8)
    def limit_for_key(key_bits: int) -> int:
        return max(
            [hpke_limit]
            + [_upload_limit(layout_for(t, key_bits).ciphertext_bytes) for t in secure_tasks]
        )

    def max_body() -> int:
        """The body limit, per request: a secure-sum report's length depends on the analyzer's
        key, known once fetched (until then uploads are refused with 503 anyway, and the limit
        assumes the default key size)."""
        runtime = getattr(app.state, "runtime", None)
        config = runtime.paillier.config if runtime is not None else None
        return limit_for_key(config.key_bits if config is not None else DEFAULT_KEY_BITS)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        metrics = ShufflerMetrics()
        store = Store(
            Path(settings.data_dir) / "shuffler" / DB_FILE,
            {t.id: t.batch_size for t in settings.tasks},
        )
        client = httpx.AsyncClient(
            base_url=settings.analyzer.url, transport=analyzer_transport, timeout=HTTP_TIMEOUT
        )
        paillier = PaillierState(settings.tasks)
        forwarder = Forwarder(settings, store, metrics, client, paillier)
        committer = Committer(store, metrics, forwarder)
        app.state.runtime = ShufflerRuntime(
            settings, store, specs, committer, forwarder, metrics, paillier
        )
        fetcher = None
        if paillier.needed:
            fetcher = asyncio.create_task(
                fetch_paillier_config(paillier, client, settings), name="fetch-paillier-config"
            )
        committer.start()
        forwarder.start()
        try:
            yield
        finally:
            if fetcher is not None:
                fetcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await fetcher
            await committer.stop()
            await forwarder.stop()
            await client.aclose()
            store.close()

    app = FastAPI(title="privbandit shuffler", version="1", lifespan=lifespan)
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_body)
    app.state.settings = settings
    install_error_handlers(app)
    app.include_router(router)
    return app
