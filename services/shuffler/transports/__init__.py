"""The shuffler's side of each shuffle transport, by the name tasks give it
(``TaskConfig.aggregation``; the names are on the wire too):

- ``reports`` (``services.shuffler.transports.reports``): HPKE reports in, shuffled batches of
  exactly l of them out;
- ``secure-sum`` (``services.shuffler.transports.secure_sum``): Paillier-encrypted counts in,
  one encrypted sum per batch of l out.

Each is a ``ShufflerTransport`` (``base``): its upload route and intake checks, the analyzer
configs it waits for, and what is forwarded for a formed batch. ``Transports`` holds one object
per registered transport for a shuffler's runtime. A new transport is one module defining its
class, registered in ``TRANSPORTS`` below.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from services.shuffler.published import PublishedConfig
from services.shuffler.transports.base import (
    Context,
    OnAdopted,
    ShufflerTransport,
    upload_limit,
)
from services.shuffler.transports.reports import ReportsTransport
from services.shuffler.transports.secure_sum import SecureSumTransport
from shared.settings import Settings, TaskConfig

TRANSPORTS: dict[str, type[ShufflerTransport]] = {
    t.name: t for t in (ReportsTransport, SecureSumTransport)
}

# The body limit of a shuffler without tasks (reports of this ciphertext length).
NO_TASK_CT_BYTES = 1024


def transport_class(config: TaskConfig) -> type[ShufflerTransport]:
    """The transport the task is configured with; ``ValueError`` for a name none is
    registered under (never a silent default)."""
    try:
        return TRANSPORTS[config.aggregation]
    except KeyError:
        raise ValueError(
            f"task {config.id!r}: no shuffler transport {config.aggregation!r} (known: "
            f"{', '.join(sorted(TRANSPORTS))})"
        ) from None


class Transports:
    """One object per registered transport, each with the tasks configured with it, for one
    shuffler runtime."""

    def __init__(self, settings: Settings, context: Context) -> None:
        by_name: dict[str, list[TaskConfig]] = {name: [] for name in TRANSPORTS}
        for task in settings.tasks:
            by_name[transport_class(task).name].append(task)
        self.by_name: dict[str, ShufflerTransport] = {
            name: cls(by_name[name], context)
            for name, cls in TRANSPORTS.items()
        }
        self._of_task = {t.id: self.by_name[t.aggregation] for t in settings.tasks}

    def __iter__(self) -> Iterator[ShufflerTransport]:
        return iter(self.by_name.values())

    def __getitem__(self, name: str) -> ShufflerTransport:
        return self.by_name[name]

    def of(self, task: str) -> ShufflerTransport:
        """The transport of a configured task."""
        return self._of_task[task]

    def published(self) -> list[tuple[PublishedConfig[Any], OnAdopted | None]]:
        return [p for t in self for p in t.published()]

    def missing(self) -> list[str]:
        return [m for t in self for m in t.missing()]

    def health(self) -> dict[str, object]:
        return {k: v for t in self for k, v in t.health().items()}

    def max_body(self) -> int:
        """The largest upload body any task takes now."""
        limits = [t.upload_limit() for t in self if t.tasks]
        return max(limits) if limits else upload_limit(NO_TASK_CT_BYTES)

