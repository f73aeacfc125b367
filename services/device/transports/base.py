"""The device's side of a shuffle transport: the ``DeviceTransport`` a task's configured
transport name (``TaskConfig.aggregation``) is looked up by (``services.device.transports``).

A transport turns the randomized row of one feedback into what the device queues durably and
uploads verbatim (``Encoded``): ``sealer(task)`` takes the keys it needs as they are now, or
refuses (503) before the decision is even opened, and the sealer's ``seal`` encrypts the row.
The transport also says where its uploads go on the shuffler (``endpoint``) and, if it encrypts
under a key of its own, how to fetch that key again when the shuffler does not know it
(``refresh_key``: the outbox then drops what is under a key the analyzer no longer has).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

import httpx
import numpy as np

from privbandit.services.device.cache import ModelCache
from privbandit.services.device.errors import NoHpkeKey
from privbandit.shared.core.randomizers.base import Randomizer, Summable
from privbandit.shared.settings import Settings, TaskConfig

if TYPE_CHECKING:  # the metrics module imports the Paillier transport's key type
    from privbandit.services.device.metrics import DeviceMetrics

# Re-fetch a task's key; the current key id, or None if the analyzer is unreachable.
KeyRefresher = Callable[[str], Awaitable[int | None]]


@dataclass(frozen=True)
class Encoded:
    """One report as the outbox stores and uploads it: its JSON (sent verbatim, so a retry
    sends exactly the bytes of the first try), its transport's name (the outbox groups uploads
    by it) and the id of the transport's own key it is encrypted under, if any."""

    report_json: str
    transport: str
    key_id: int | None = None


class Sealer(Protocol):
    """The keys one feedback is encrypted under, taken when the feedback began."""

    async def seal(self, randomizer: Randomizer, row: np.ndarray) -> Encoded:
        """The randomized ``row`` of ``randomizer`` encrypted to the analyzer; ValueError for a
        row that cannot be encoded."""
        ...


@dataclass(frozen=True)
class Context:
    """What a transport may use of the device: its settings, the analyzer client, the model
    cache (which holds the analyzer's HPKE config) and its metrics; ``paillier_min_bits``: the
    smallest Paillier key accepted (below 2048 bits only in tests)."""

    settings: Settings
    analyzer: httpx.AsyncClient
    cache: ModelCache
    metrics: DeviceMetrics
    paillier_min_bits: int


class DeviceTransport(Protocol):
    """One shuffle transport as the device runs it: one object per device, for the tasks
    configured with it (``tasks``, possibly none)."""

    # The transport's name in task configs, on the wire and in the outbox's ``transport``.
    name: ClassVar[str]
    # The shuffler's upload route: ``POST /v1/tasks/{task}/<endpoint>`` with
    # ``{"reports": [...]}`` of the stored JSON items.
    endpoint: ClassVar[str]
    # See the module docstring; None when the transport has no key of its own.
    refresh_key: KeyRefresher | None

    tasks: dict[str, TaskConfig]

    def __init__(self, tasks: list[TaskConfig], context: Context) -> None: ...

    def sealer(self, task: str) -> Sealer:
        """The task's sealer with the keys as they are now; ``NoPaillierKey``/``NoHpkeKey``
        (503) while a key has not come from the analyzer yet."""
        ...

    def missing(self) -> list[str]:
        """What has not come from the analyzer yet (readiness)."""
        ...

    def health(self) -> dict[str, object]:
        """What ``/healthz`` says of the transport once ready."""
        ...

    def start(self) -> None: ...

    async def stop(self) -> None: ...


def hpke_key(cache: ModelCache) -> tuple[int, bytes]:
    """The analyzer's HPKE (key id, public key), which every report or tag is sealed to;
    ``NoHpkeKey`` until it is known."""
    hpke, public_key = cache.hpke, cache.hpke_public_key
    if hpke is None or public_key is None:
        raise NoHpkeKey("the analyzer's HPKE key is not known yet; retry soon")
    return hpke.key_id, public_key


class HpkeOnlyTransport(ABC):
    """A transport whose only key is the analyzer's HPKE key, which the model cache holds:
    ``sealer`` takes that key as it is now, and the subclass's ``encode`` seals a row to it;
    nothing of its own to fetch, report, start or stop."""

    name: ClassVar[str]
    endpoint: ClassVar[str]
    refresh_key: KeyRefresher | None = None

    def __init__(self, tasks: list[TaskConfig], context: Context) -> None:
        self.tasks = {t.id: t for t in tasks}
        self.cache = context.cache

    def sealer(self, task: str) -> HpkeSealer:
        return HpkeSealer(self, task, *hpke_key(self.cache))

    @abstractmethod
    async def encode(self, task: str, randomizer: Randomizer, row: np.ndarray,
                     hpke_key_id: int, hpke_public_key: bytes) -> Encoded:
        """The randomized ``row`` of ``randomizer`` for ``task``, sealed to the analyzer's HPKE
        key ``hpke_key_id``/``hpke_public_key``; ValueError for a row that cannot be encoded."""

    def missing(self) -> list[str]:
        return []  # the HPKE config is the model cache's

    def health(self) -> dict[str, object]:
        return {}

    def start(self) -> None:
        """Nothing to fetch of its own."""
        return None

    async def stop(self) -> None:
        """Nothing to stop."""
        return None


@dataclass(frozen=True)
class HpkeSealer:
    """One feedback's sealer of an ``HpkeOnlyTransport``: the analyzer's HPKE key as it was when
    the feedback began, which the transport's ``encode`` seals the row to."""

    transport: HpkeOnlyTransport
    task: str
    hpke_key_id: int
    hpke_public_key: bytes

    async def seal(self, randomizer: Randomizer, row: np.ndarray) -> Encoded:
        return await self.transport.encode(self.task, randomizer, row, self.hpke_key_id,
                                           self.hpke_public_key)


def summed_values(transport: str, randomizer: Randomizer, row: np.ndarray) -> np.ndarray:
    """What a report of a summing transport (``transport``: its name, for the error) adds to
    the batch sum: the randomizer's ``summand`` (the 0/1 randomizer's per-coordinate counts
    0..m, a Skellam row's signed integers as they are); ``TypeError`` for a randomizer that is
    not ``Summable`` (the registry offers summing transports only to policies whose randomizer
    is)."""
    if not isinstance(randomizer, Summable):
        raise TypeError(f"{transport} cannot sum the rows of {type(randomizer).__name__}")
    return randomizer.summand(row)
