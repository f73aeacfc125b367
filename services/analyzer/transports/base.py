"""The analyzer's side of a shuffle transport: the ``AnalyzerTransport`` a task's configured
transport name (``TaskConfig.aggregation``) is looked up by (``services.analyzer.transports``),
and the ``Decoder`` it builds per task, which the one ingest pipeline
(``services.analyzer.ingest``) runs.

``Decoder.accept`` runs on the event loop before an upload is queued (transport and wire-level
checks: what is wrong there is wrong with the deployment, not with a batch, and is refused with
a 4xx); ``decode`` runs in the pipeline's worker thread and never touches the policy;
``Decoded.feed`` does, under the pipeline's roll-back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from fastapi import APIRouter
from pydantic import BaseModel

from privbandit.services.analyzer.errors import AggregationMismatch, BatchSizeMismatch
from privbandit.shared.core.policies import Policy
from privbandit.shared.crypto.keystore import HpkeKeyStore, PaillierKeyStore
from privbandit.shared.settings import TaskConfig


class Item(Protocol):
    """What a task's group committer queues (the decoder's ``accept`` makes it from an upload):
    anything with the id of the batch it stands for."""

    @property
    def batch_id(self) -> str: ...


ItemT = TypeVar("ItemT", bound=Item)


@dataclass(frozen=True)
class UploadJob(Generic[ItemT]):
    """An upload as a decoder's ``accept`` queues it, beside what ``accept`` derived from it (a
    subclass's fields): it stands for the upload's batch."""

    upload: ItemT

    @property
    def batch_id(self) -> str:
        return self.upload.batch_id


@dataclass
class Fed:
    """What feeding one decoded batch counted: reports, duplicates, the report ids to record
    with the batch, and the reports refused with the whole batch (``quarantined`` > 0: nothing
    of the batch was fed)."""

    counted: int
    duplicates: int = 0
    new_ids: list[bytes] = field(default_factory=list)
    quarantined: int = 0


class Decoded(Protocol):
    """One batch ready to be fed."""

    batch_id: str
    rejected: int

    @property
    def report_ids(self) -> Sequence[bytes]:
        """Every report id the batch carries (looked up for the whole group before feeding)."""
        ...

    def feed(self, policy: Policy, known: set[bytes]) -> Fed:
        """Feed the policy; ``known`` holds the report ids already counted and grows with the
        ones this batch counts (repeats within a batch or group are duplicates too)."""
        ...


class Decoder(Protocol[ItemT]):
    """How one task's uploads of its transport become batches to feed."""

    # True when the transport sees single reports: their rejected/duplicate counters apply.
    report_level: ClassVar[bool]

    def accept(self, upload: BaseModel) -> ItemT:
        """The queueable form of an upload; raises ``AggregationMismatch`` for another
        transport's upload and a ``BatchRefused`` for a wire-level refusal (nothing is
        recorded)."""
        ...

    def weight(self, item: ItemT) -> int:
        """An item's share of a group's work bound."""
        ...

    def decode(self, item: ItemT) -> Decoded:
        """Decrypt and check a batch without touching the policy; raises ``BatchRefused`` for a
        batch that cannot be counted at all."""
        ...


class AnalyzerKeys(Protocol):
    """The analyzer's private keys as a transport may use them (``AnalyzerRuntime``)."""

    keys: HpkeKeyStore

    def paillier_keys(self) -> PaillierKeyStore:
        """The Paillier key store, created on first use."""
        ...


class AnalyzerTransport(Protocol):
    """One shuffle transport as the analyzer serves it (one object per transport, shared by
    its tasks)."""

    # The transport's name in task configs and on the wire (``TaskConfig.aggregation``).
    name: str
    # Where the shuffler posts a task's batches: ``POST /v1/tasks/{task}/<endpoint>``.
    endpoint: str
    # The body of that request.
    upload: type[BaseModel]
    # The route's description (OpenAPI).
    summary: str
    # The private key files of the data directory it needs, beyond the HPKE key (file name →
    # what it holds), when at least one task uses it.
    key_files: dict[str, str]

    def add_routes(self, router: APIRouter) -> None:
        """Add the GET routes of the transport's public parameters, if it has any (devices and
        the shuffler fetch them), to the analyzer's router."""
        ...

    def open_keys(self, keys: AnalyzerKeys) -> None:
        """At start-up, when a task uses the transport: create or load the keys it needs
        before the first request (devices and the shuffler fetch them)."""
        ...

    def decoder(self, config: TaskConfig, policy: Policy, keys: AnalyzerKeys) -> Decoder[Any]:
        """The decoder of one task (``RuntimeError`` if the task cannot run under the keys)."""
        ...

    def max_body(self, config: TaskConfig) -> int:
        """The largest request body one batch of the task may need (before headroom)."""
        ...


def wrong_transport(config: TaskConfig, hint: str) -> AggregationMismatch:
    """409: the request uses another shuffle transport than the task is configured with;
    ``hint`` says what the task takes."""
    return AggregationMismatch(
        f"task {config.id!r} uses {config.aggregation} aggregation: {hint}; nothing was counted"
    )


U = TypeVar("U", bound=BaseModel)


def admit(config: TaskConfig, upload: BaseModel, kind: type[U], count: Callable[[U], int],
          takes: str, hint: str) -> U:
    """The upload, if it is of the task's transport (409 otherwise: individual reports of a
    secure-sum task must never reach the analyzer, Paillier or prio3) and holds exactly l
    reports (422 ``batch_size_mismatch`` otherwise; ``takes`` says what the task takes, ``{l}``
    standing for the batch size and ``{n}`` for the count received)."""
    if not isinstance(upload, kind):
        raise wrong_transport(config, hint)
    n, sizes = count(upload), config.schedule.distinct_sizes()
    if n not in sizes:
        # A growing schedule (issue 22): the shuffler forms batch k of its length l_k.
        l = " or ".join(str(s) for s in sizes) if len(sizes) <= 8 else f"one of {sizes}"
        raise BatchSizeMismatch(f"task {config.id!r} takes {takes.format(l=l, n=n)}")
    return upload


@dataclass(frozen=True)
class Delivery:
    """What a delivery to a decoder must be (``admit``): its message type, what a 422 says it
    takes (``{l}``, ``{n}``: the batch lengths expected and got) and the hint at its route
    (``{task}`` standing for the task id)."""

    kind: type
    takes: str
    hint: str


@dataclass
class TaskDecoder:
    """What every decoder shares: the task, and the shape checks of ``accept`` (``admit``: the
    task's transport, exactly l reports), described by the subclass's ``delivery`` and by
    ``count``."""

    config: TaskConfig
    delivery: ClassVar[Delivery]

    @staticmethod
    def count(upload: Any) -> int:
        """How many reports an upload stands for: the ``count`` a batch-level message (a sum, an
        aggregate) states; a decoder of uploads that carry their reports counts them instead."""
        return upload.count

    def public_config(self) -> BaseModel | None:
        """What a device needs to encode this task's secure-sum reports (``GET
        /v1/tasks/{task}/secure-sum``); ``None``: the task has no secure sum."""
        return None

    def admit(self, upload: BaseModel) -> Any:
        d = self.delivery
        return admit(self.config, upload, d.kind, self.count, d.takes,
                     d.hint.format(task=self.config.id))
