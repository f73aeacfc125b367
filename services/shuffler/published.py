"""What the shuffler learns from the analyzer's public configuration endpoints, fetched and cached
the same way for every kind: the HPKE config (``GET /v1/hpke-config``, ``services.shuffler.hpke``)
and the Paillier config (``GET /v1/paillier-config``, ``services.shuffler.transports.paillier``).

``PublishedConfig`` holds the last config adopted. Intake that needs it waits for it (503
``not_ready``, and ``/healthz`` 503 ``starting``) until the first fetch succeeds. The last config
adopted is kept in the shuffler's data directory (public data, nothing secret), so a shuffler
restarted while the analyzer is down is ready at once and keeps taking reports; the fetch still
runs and adopts a newer config.

``ConfigFetcher`` fetches: ``first()`` once during start-up (so a shuffler whose analyzer is up
is ready when its lifespan has started); ``follow()`` in the background for the service's life:
until the first success with exponential backoff and jitter (as batch delivery), then every
``REFRESH`` seconds, or ``MIN_REFETCH`` seconds after ``PublishedConfig.request_refresh()`` (from
any thread: the analyzer refused a sum under a key, a device named one), calling a hook whenever
the adopted config changes (the Paillier key: refuse what is held under the old one); and
``refresh()`` on demand for an upload that waits for the answer (intake, when a report names a
key the shuffler does not know), at most once per ``min_interval`` seconds however often it is
asked, so a flood of reports with made-up key ids costs the analyzer nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from privbandit.services.common.retry import Jittered, until_true
from privbandit.shared.files import write_atomically
from privbandit.shared.settings import Settings

log = logging.getLogger(__name__)

C = TypeVar("C", bound=BaseModel)

# Seconds between two on-demand fetches of one config (``ConfigFetcher.refresh``).
REFRESH_INTERVAL = 5.0
# Seconds between routine re-fetches once a config is held (``ConfigFetcher.follow``), and the
# least time between two fetches asked for by ``PublishedConfig.request_refresh``.
REFRESH = 60.0
MIN_REFETCH = 1.0
# Longest wait for the analyzer during start-up (``ConfigFetcher.first``) and while an upload
# waits for an on-demand fetch (``ConfigFetcher.refresh``).
FETCH_TIMEOUT = 2.0


class PublishedConfig(Generic[C]):
    """One public configuration of the analyzer as this shuffler knows it (the event loop and
    worker threads read it; it is set from the event loop). Subclasses say where it is served
    (``path``), how readiness names it (``name``), its model (``model``), and what they derive
    from it (``_derive``, pure, and ``_install``)."""

    path: ClassVar[str]
    name: ClassVar[str]
    model: type[C]

    def __init__(self, needed: bool, cache: Path | None = None) -> None:
        self.needed = needed
        self.config: C | None = None
        self.last_error: str | None = None
        self.ready = asyncio.Event()
        # Set (from any thread, via the follower's loop) to fetch the config again soon.
        self._refresh: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.cache = cache
        if cache is not None and needed and cache.exists():
            try:
                self.set(self.model.model_validate_json(cache.read_bytes()), save=False)
            except (OSError, ValidationError, ValueError) as exc:
                log.warning("ignoring the cached %s %s: %s", self.name, cache, exc)

    def missing(self) -> list[str]:
        """What intake waits for (readiness): this config, if a task needs it."""
        return [self.name] if self.needed and self.config is None else []

    def set(self, config: C, save: bool = True) -> None:
        """Adopt a fetched config (and keep it in the cache file); raises ValueError (and
        changes nothing) if the tasks cannot use it."""
        derived = self._derive(config)
        if save and self.cache is not None and config != self.config:
            write_atomically(self.cache, config.model_dump_json().encode("utf-8"))
        self._install(config, derived)
        self.config = config
        self.last_error = None
        self.ready.set()

    def request_refresh(self) -> None:
        """Ask the follower (``ConfigFetcher.follow``) to fetch the config again soon: someone
        named a key this shuffler does not hold. Thread-safe; a no-op while no follower runs."""
        loop, event = self._loop, self._refresh
        if loop is not None and event is not None and not loop.is_closed():
            loop.call_soon_threadsafe(event.set)

    def refresh_requests(self) -> asyncio.Event:
        """The event ``request_refresh`` sets, bound to the running loop (the follower's)."""
        self._loop = asyncio.get_running_loop()
        self._refresh = asyncio.Event()
        return self._refresh

    def describe(self, config: C) -> str:
        """A log line's account of an adopted config."""
        return self.name

    def _derive(self, config: C) -> Any:
        """What the tasks need of ``config`` (pure); ValueError if they cannot use it."""
        return None

    def _install(self, config: C, derived: Any) -> None:
        """Make ``derived`` current (called once the config is accepted)."""


class ConfigFetcher:
    """Fetches one ``PublishedConfig`` from the analyzer: ``follow`` from start-up until it has
    it, ``refresh`` on demand (rate-limited)."""

    def __init__(
        self,
        state: PublishedConfig[Any],
        client: httpx.AsyncClient,
        settings: Settings,
        min_interval: float | None = None,
    ) -> None:
        self.state = state
        self.client = client
        self.settings = settings
        self.min_interval = REFRESH_INTERVAL if min_interval is None else min_interval
        self._lock = asyncio.Lock()
        self._last_attempt: float | None = None
        self._last_ok = False

    async def fetch(self) -> bool:
        """One fetch; True once a valid config is adopted (else ``state.last_error`` says why)."""
        state = self.state
        try:
            resp = await self.client.get(state.path)
            if resp.status_code == 200:
                config = state.model.model_validate_json(resp.content)
                changed = config != state.config
                state.set(config)
                if changed:
                    log.info("analyzer %s adopted", state.describe(config))
                return True
            error = f"HTTP {resp.status_code}: {resp.text[:200]}"
        except (httpx.HTTPError, ValidationError, ValueError, OSError) as exc:
            # OSError: the cache file could not be written (then nothing was adopted).
            error = f"{type(exc).__name__}: {exc}"
        state.last_error = f"fetching the analyzer's {state.name}: {error}"
        return False

    async def first(self) -> bool:
        """One fetch during start-up, given at most ``FETCH_TIMEOUT`` seconds."""
        return await self._fetch_within(FETCH_TIMEOUT)

    async def _fetch_within(self, timeout: float) -> bool:
        try:
            return await asyncio.wait_for(self.fetch(), timeout)
        except TimeoutError:
            self.state.last_error = f"fetching the analyzer's {self.state.name}: no answer " \
                                    f"within {timeout:g} s"
            return False

    async def follow(
        self, on_adopted: Callable[[Any], Awaitable[None]] | None = None, fetched: bool = False
    ) -> None:
        """Follow the analyzer's config for the service's life: fetch until a valid config
        arrives (exponential backoff with jitter), then again every ``REFRESH`` seconds, or
        ``MIN_REFETCH`` seconds after ``state.request_refresh()``. ``fetched``: a fetch just
        succeeded (``first()``), so start by waiting. ``on_adopted(config)`` runs whenever the
        config held differs from the one it last ran for; if it fails it runs again after the
        next fetch. A background task from start-up until cancelled."""
        wake = self.state.refresh_requests()
        wait = Jittered(self.settings.retry_initial, self.settings.retry_max)

        async def attempt() -> bool:
            wake.clear()  # this fetch answers any refresh requested before it
            return await self.fetch()

        def failed(delay: float) -> None:
            log.warning("%s; retrying in %.1fs", self.state.last_error, delay)

        checked: Any = None
        while True:
            if not fetched:
                # Until a valid config arrives; each round of failures starts the schedule anew.
                await until_true(wait, failed)(attempt)
            config = self.state.config
            if on_adopted is not None and config != checked:
                try:
                    await on_adopted(config)
                    checked = config
                except Exception:
                    log.exception("acting on the analyzer's new %s failed", self.state.name)
            await asyncio.sleep(MIN_REFETCH)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), max(0.0, REFRESH - MIN_REFETCH))
            fetched = False

    async def refresh(self) -> bool:
        """Fetch now unless a fetch was tried less than ``min_interval`` seconds ago (then its
        outcome stands); concurrent callers share one fetch, which waits at most
        ``FETCH_TIMEOUT`` seconds. True iff the config is as the analyzer published it at that
        last try."""
        loop = asyncio.get_running_loop()
        async with self._lock:
            last = self._last_attempt
            if last is not None and loop.time() - last < self.min_interval:
                return self._last_ok
            self._last_ok = await self._fetch_within(FETCH_TIMEOUT)
            self._last_attempt = loop.time()
            if not self._last_ok:
                log.warning("%s", self.state.last_error)
            return self._last_ok
