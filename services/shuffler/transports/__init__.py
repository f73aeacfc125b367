"""The shuffler's side of each shuffle transport, by the name tasks give it
(``TaskConfig.transport``; the names are on the wire too):

- ``reports`` (``services.shuffler.transports.reports``): HPKE reports in, shuffled batches of
  exactly l of them out;
- ``paillier`` (``services.shuffler.transports.paillier``; ``secure_sum = "paillier"``):
  Paillier-encrypted counts in, one encrypted sum per batch of l out;
- ``prio3`` (``services.shuffler.transports.prio3``): Prio3 reports in (leader share, helper
  share sealed to the analyzer), each batch of l verified jointly with the analyzer, the leader's
  aggregate share over its valid reports out.

Each is a ``ShufflerTransport`` (``base``): its upload route and intake checks, the analyzer
configs it waits for, and what is forwarded for a formed batch. ``Transports`` holds one object
per registered transport for a shuffler's runtime. A new transport is one module defining its
class, registered in ``TRANSPORTS`` below.
"""

from __future__ import annotations

from typing import Any

from privbandit.services.common.transports import TransportSet, lookup
from privbandit.services.shuffler.published import PublishedConfig
from privbandit.services.shuffler.transports.base import (
    Context,
    OnAdopted,
    ShufflerTransport,
    upload_limit,
)
from privbandit.services.shuffler.transports.paillier import PaillierTransport
from privbandit.services.shuffler.transports.prio3 import Prio3Transport
from privbandit.services.shuffler.transports.reports import ReportsTransport
from privbandit.shared.settings import Settings, TaskConfig

_REGISTERED: tuple[type[ShufflerTransport], ...] = (
    ReportsTransport, PaillierTransport, Prio3Transport)
TRANSPORTS: dict[str, type[ShufflerTransport]] = {t.name: t for t in _REGISTERED}

# The body limit of a shuffler without tasks (reports of this ciphertext length).
NO_TASK_CT_BYTES = 1024


def transport_class(config: TaskConfig) -> type[ShufflerTransport]:
    """The transport the task is configured with (``ValueError`` for an unknown name)."""
    return lookup(TRANSPORTS, config, "shuffler")


class Transports(TransportSet[ShufflerTransport]):
    """One object per registered transport, each with the tasks configured with it, for one
    shuffler runtime."""

    def __init__(self, settings: Settings, context: Context) -> None:
        super().__init__(TRANSPORTS, settings, context, "shuffler")

    def published(self) -> list[tuple[PublishedConfig[Any], OnAdopted | None]]:
        return [p for t in self for p in t.published()]

    def max_body(self) -> int:
        """The largest upload body any task takes now."""
        limits = [t.upload_limit() for t in self if t.tasks]
        return max(limits) if limits else upload_limit(NO_TASK_CT_BYTES)
