"""The shuffler's side of a shuffle transport: the ``ShufflerTransport`` a task's configured
transport name (``TaskConfig.aggregation``) is looked up by (``services.shuffler.transports``).

A transport says how an upload of its kind is checked at intake (before anything of it is
stored), what the analyzer must have published before such uploads are taken, and what is
forwarded for a formed batch of exactly l (``load``: the exact request, re-sent unchanged or
loaded again before each attempt). Batch formation itself — a uniformly random order from the OS
CSPRNG over exactly l accepted reports, in the same transaction as the upload that completes
the batch — is the store's and the same for every transport.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import httpx
from pydantic import BaseModel

from privbandit.services.common.web import report_json_bytes
from privbandit.services.shuffler.hpke import HpkeState, Refresh
from privbandit.services.shuffler.metrics import ShufflerMetrics
from privbandit.services.shuffler.published import PublishedConfig
from privbandit.services.shuffler.store import Store
from privbandit.shared.protocol.messages import MAX_REPORTS_PER_UPLOAD, EncryptedReport
from privbandit.shared.protocol.paillier import EncryptedCounts
from privbandit.shared.protocol.prio3 import Prio3Report
from privbandit.shared.settings import Settings, TaskConfig

# What one device upload carries (each transport takes one kind of report).
Reports = Sequence[EncryptedReport] | Sequence[EncryptedCounts] | Sequence[Prio3Report]
# Run when the analyzer's published config changes: ``(config, wake)``, ``wake(task)`` making
# delivery look at the task's batches again.
OnAdopted = Callable[[Any, Callable[[str], None]], Awaitable[None]]


@dataclass(frozen=True)
class Delivery:
    """One batch ready to post: where to, and the exact body (re-sent unchanged on retries)."""

    batch_id: str
    task: str
    path: str
    body: str


def upload_limit(ct_bytes: int) -> int:
    """Largest acceptable upload body: the most reports per upload of ``ct_bytes`` each."""
    return MAX_REPORTS_PER_UPLOAD * report_json_bytes(ct_bytes) + 64 * 1024


@dataclass(frozen=True)
class Context:
    """What a transport may use of the shuffler: its runtime's store and metrics, the
    directory where the analyzer configs it follows are cached (None: not cached), and, for a
    transport that talks to the analyzer while forming what it forwards (``prio3``: the
    verification exchange), the analyzer client and the settings (its bearer token)."""

    store: Store
    metrics: ShufflerMetrics
    cache_dir: Path | None = None
    analyzer: httpx.AsyncClient | None = None
    settings: Settings | None = None


@dataclass(frozen=True)
class UploadRoute:
    """Devices upload to ``POST /v1/tasks/{task}/<endpoint>`` a body of type ``upload`` (a
    message with ``reports``); ``takes`` names it in the 409 another transport's task answers;
    ``summary`` is the route's OpenAPI description."""

    endpoint: str
    upload: type[BaseModel]
    takes: str
    summary: str


class ShufflerTransport(Protocol):
    """One shuffle transport as the shuffler runs it: one object per shuffler, for the tasks
    configured with it (``tasks``, possibly none)."""

    # The transport's name in task configs and on the wire (``TaskConfig.aggregation``).
    name: ClassVar[str]
    # Where and what devices upload (``UploadRoute``).
    route: ClassVar[UploadRoute]
    # Delivery loads a batch again before every attempt (its body may change: e.g. checked
    # against the analyzer's current key), instead of re-sending the first one.
    reload: ClassVar[bool]

    tasks: dict[str, TaskConfig]

    def __init__(self, tasks: list[TaskConfig], context: Context) -> None:
        """For ``tasks``, the ones configured with the transport (possibly none)."""
        ...

    @staticmethod
    def ct_bytes(config: TaskConfig) -> int:
        """The public ciphertext length of every HPKE report of the task (0: none fixed)."""
        ...

    def published(self) -> list[tuple[PublishedConfig[Any], OnAdopted | None]]:
        """The analyzer's configs the transport needs beyond the HPKE one (fetched, cached and
        followed by the runtime), each with what to do when a new one is adopted."""
        ...

    def missing(self) -> list[str]:
        """What intake of this transport still waits for (readiness)."""
        ...

    def health(self) -> dict[str, object]:
        """What ``/healthz`` says of the transport once ready."""
        ...

    def upload_limit(self) -> int:
        """The largest upload body a task of the transport takes now (0 without tasks)."""
        ...

    async def check(self, task: str, reports: Reports, hpke: HpkeState, refresh: Refresh
                    ) -> None:
        """Intake checks of one upload for ``task``; raises the shuffler error of the first bad
        report (then nothing of the upload may be stored)."""
        ...

    async def delivery_ready(self) -> None:
        """Return once batches of the transport can be forwarded."""
        ...

    def load(self, task: str, batch_id: str) -> Delivery | None:
        """(Worker thread.) What to post for an unacknowledged batch, or None if it was
        acknowledged (or dissolved) meanwhile; raises ``Undeliverable`` if it cannot be formed
        now (retried with backoff)."""
        ...

    def refused(self, code: str | None) -> None:
        """The analyzer refused a delivery with this error code (the batch is retried)."""
        ...


class TransportBase:
    """What the shuffler's transports share: the tasks configured with one (``tasks``) and the
    runtime's ``context``, and the defaults of a transport that needs no analyzer config beyond
    the HPKE one (the runtime's) and forwards a batch at once: nothing to wait for, report or
    look at again. ``upload_limit`` is ``_limit``, which a subclass sets from its tasks."""

    def __init__(self, tasks: list[TaskConfig], context: Context) -> None:
        self.tasks = {t.id: t for t in tasks}
        self.context = context
        self._limit = 0

    def published(self) -> list[tuple[PublishedConfig[Any], OnAdopted | None]]:
        return []  # the HPKE config, which every transport needs, is the runtime's

    def missing(self) -> list[str]:
        return []

    def health(self) -> dict[str, object]:
        return {}

    def upload_limit(self) -> int:
        return self._limit

    async def delivery_ready(self) -> None:
        """At once: nothing to wait for beyond the HPKE config."""

    def refused(self, code: str | None) -> None:
        """Nothing of the transport's own to look at again (the batch is retried)."""
