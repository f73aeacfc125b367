"""One decoder per shuffle transport, behind the small ``Decoder`` protocol the ingest pipeline
(``services.analyzer.ingest``) runs:

- ``ReportsDecoder`` (``reports`` tasks): a batch of l HPKE reports is decrypted, unpacked and
  turned into rows (``Randomizer.from_bytes``); a report that fails any of it is rejected alone;
  rows whose report id was already counted are dropped as duplicates when fed.
- ``SumDecoder`` (``secure-sum`` tasks): one Paillier-encrypted batch sum is opened with a range
  check (``open_batch_sum``) and fed as the batch's counts (``Policy.ingest_statistic``); a sum
  that cannot be l honest reports refuses the whole batch before anything is fed.

``accept`` runs on the event loop before an upload is queued (transport and wire-level checks);
``decode`` runs in the pipeline's worker thread and never touches the policy; ``Decoded.feed``
does, under the pipeline's roll-back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, TypeVar

import numpy as np

from services.analyzer.errors import (
    AggregationMismatch,
    BadCiphertext,
    BatchSizeMismatch,
    SlotOutOfRange,
    UnknownKey,
)
from shared.core.policies import Policy
from shared.core.randomizers.base import Randomizer
from shared.crypto.hpke import CryptoError, unpack_report
from shared.crypto.keystore import HpkeKeyStore, PaillierKeyStore
from shared.crypto.paillier import CiphertextError, decode_ciphertexts
from shared.crypto.slots import SlotLayout, SlotRangeError
from shared.protocol.messages import BatchUpload
from shared.protocol.secure_sum import EncryptedBatchSum
from shared.settings import TaskConfig

log = logging.getLogger(__name__)

# What the shuffler posts: a report batch (``/batches``) or an encrypted batch sum
# (``/batch-sums``).
Upload = BatchUpload | EncryptedBatchSum


@dataclass(frozen=True)
class BatchSumJob:
    """An encrypted batch sum whose wire form has been checked (count, key id, ciphertexts in
    Z*_{n²}); ``ciphertexts`` are the decoded integers, one per plaintext of the task layout."""

    upload: EncryptedBatchSum
    ciphertexts: list[int]

    @property
    def batch_id(self) -> str:
        return self.upload.batch_id


# What a task's group committer queues: report batches for ``reports`` tasks, batch sums for
# ``secure-sum`` tasks (never mixed: each task has one decoder).
Item = BatchUpload | BatchSumJob
ItemT = TypeVar("ItemT", bound=Item)


@dataclass
class Fed:
    """What feeding one decoded batch counted: reports, duplicates, and the report ids to record
    with the batch."""

    counted: int
    duplicates: int = 0
    new_ids: list[bytes] = field(default_factory=list)


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
    """How one transport's uploads become batches to feed."""

    # True when the transport sees single reports: their rejected/duplicate counters apply.
    report_level: bool

    def accept(self, upload: Upload) -> ItemT:
        """The queueable form of an upload; raises ``AggregationMismatch`` for the other
        transport and a ``BatchRefused`` for a wire-level refusal (nothing is recorded)."""
        ...

    def weight(self, item: ItemT) -> int:
        """An item's share of a group's work bound."""
        ...

    def decode(self, item: ItemT) -> Decoded:
        """Decrypt and check a batch without touching the policy; raises ``BatchRefused`` for a
        batch that cannot be counted at all."""
        ...


def wrong_transport(config: TaskConfig) -> AggregationMismatch:
    """409: the request uses the other shuffle transport than the task is configured with."""
    if config.aggregation == "secure-sum":
        hint = f"it takes only encrypted batch sums (POST /v1/tasks/{config.id}/batch-sums)"
    else:
        hint = f"it takes only report batches (POST /v1/tasks/{config.id}/batches)"
    return AggregationMismatch(
        f"task {config.id!r} uses {config.aggregation} aggregation: {hint}; nothing was counted"
    )


def require_l(config: TaskConfig, n: int, takes: str) -> None:
    """422 ``batch_size_mismatch`` unless an upload holds exactly l reports; ``takes`` says what
    the task takes (``{l}`` stands for the batch size)."""
    l = config.batch_size
    if n != l:
        raise BatchSizeMismatch(f"task {config.id!r} takes {takes.format(l=l)}")


def feed_rows(policy: Policy, rows: list[np.ndarray]) -> None:
    """Feed rows to the policy until all are consumed (exact policies consume rows up to their
    next model switch per call)."""
    if not rows:
        return
    stacked = np.stack(rows)
    consumed = 0
    while consumed < stacked.shape[0]:
        k = policy.ingest(stacked[consumed:])
        if k < 1:
            raise RuntimeError(f"policy {policy.algo} consumed no rows")
        consumed += k


# ---------------------------------------------------------------------------------------------
# reports: HPKE report batches


@dataclass
class DecodedReports:
    batch_id: str
    ids: list[bytes]
    rows: list[np.ndarray]
    rejected: int

    @property
    def report_ids(self) -> Sequence[bytes]:
        return self.ids

    def feed(self, policy: Policy, known: set[bytes]) -> Fed:
        new_ids: list[bytes] = []
        new_rows: list[np.ndarray] = []
        for report_id, row in zip(self.ids, self.rows, strict=True):
            if report_id in known:
                continue
            known.add(report_id)  # also catches repeats within the batch and group
            new_ids.append(report_id)
            new_rows.append(row)
        feed_rows(policy, new_rows)
        return Fed(len(new_ids), len(self.ids) - len(new_ids), new_ids)


@dataclass
class ReportsDecoder:
    """Batches of exactly l HPKE reports, sealed to the analyzer for this task; ``row_bytes`` is
    the wire length of one report row."""

    config: TaskConfig
    keys: HpkeKeyStore
    randomizer: Randomizer
    row_bytes: int
    report_level: ClassVar[bool] = True

    def accept(self, upload: Upload) -> BatchUpload:
        if not isinstance(upload, BatchUpload):
            raise wrong_transport(self.config)
        n = len(upload.reports)
        require_l(self.config, n, f"batches of exactly l = {{l}} reports, got {n}")
        return upload

    def weight(self, item: BatchUpload) -> int:
        # One decryption per report.
        return len(item.reports)

    def decode(self, item: BatchUpload) -> DecodedReports:
        task = self.config.id
        ids: list[bytes] = []
        rows: list[np.ndarray] = []
        rejected = 0
        for report in item.reports:
            try:
                plaintext = self.keys.open(task, report)
                report_id, row_bytes = unpack_report(plaintext, self.row_bytes)
                rows.append(self.randomizer.from_bytes(row_bytes))
            except (CryptoError, ValueError) as exc:
                rejected += 1
                log.debug("task %s batch %s: rejected a report: %s", task, item.batch_id, exc)
                continue
            ids.append(report_id)
        return DecodedReports(item.batch_id, ids, rows, rejected)


# ---------------------------------------------------------------------------------------------
# secure-sum: one Paillier-encrypted batch sum


@dataclass
class DecodedSum:
    batch_id: str
    stat: np.ndarray
    count: int
    rejected: int = 0

    @property
    def report_ids(self) -> Sequence[bytes]:
        # No report ids: duplicates are dropped by the shuffler (identical ciphertexts) before
        # a sum is formed.
        return ()

    def feed(self, policy: Policy, known: set[bytes]) -> Fed:
        policy.ingest_statistic(self.stat, self.count)
        return Fed(self.count)


@dataclass
class SumDecoder:
    """Encrypted batch sums of l reports under the analyzer's Paillier key, packed as the task's
    slot ``layout``. Only the batch counts (Z, U) are ever decrypted, never a single report."""

    config: TaskConfig
    keys: PaillierKeyStore
    layout: SlotLayout
    report_level: ClassVar[bool] = False

    def accept(self, upload: Upload) -> BatchSumJob:
        if not isinstance(upload, EncryptedBatchSum):
            # Individual reports of a secure-sum task must never reach the analyzer.
            raise wrong_transport(self.config)
        n = upload.count
        require_l(self.config, n, f"sums of exactly l = {{l}} reports, got count = {n}")
        keys = self.keys
        if upload.key_id != keys.key_id:
            raise UnknownKey(
                f"batch {upload.batch_id} is encrypted under Paillier key {upload.key_id}; this "
                f"analyzer's key is {keys.key_id}"
            )
        try:
            ciphertexts = decode_ciphertexts(upload.ct, keys.n, self.layout.plaintexts)
        except CiphertextError as exc:
            raise BadCiphertext(f"batch {upload.batch_id}: {exc}") from exc
        return BatchSumJob(upload, ciphertexts)

    def weight(self, item: BatchSumJob) -> int:
        # One decryption per plaintext (at most a few).
        return len(item.ciphertexts)

    def decode(self, item: BatchSumJob) -> DecodedSum:
        """A sum with a slot outside 0..l·m (an out-of-range report, too many reports, a
        tampered product) is refused: pure, so nothing is fed before every check passed."""
        count = item.upload.count
        try:
            stat = self.keys.open_batch_sum(item.ciphertexts, self.layout, count)
        except SlotRangeError as exc:
            raise SlotOutOfRange(
                f"batch {item.batch_id}: the decrypted sum is not one of {count} reports with "
                f"counts in 0..{self.layout.m} ({exc}); nothing was counted"
            ) from exc
        except CiphertextError as exc:
            raise BadCiphertext(f"batch {item.batch_id}: {exc}") from exc
        return DecodedSum(item.batch_id, stat, count)
