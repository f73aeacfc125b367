"""One decoder per shuffle transport, behind the small ``Decoder`` protocol the ingest pipeline
(``services.analyzer.ingest``) runs:

- ``ReportsDecoder`` (``reports`` tasks): a batch of l HPKE reports is decrypted, unpacked and
  turned into rows (``Randomizer.from_bytes``, which also refuses a row its randomizer cannot
  produce); a report that fails any of it is rejected alone; rows whose report id was already
  counted are dropped as duplicates when fed.
- ``SumDecoder`` (``secure-sum`` tasks): every member's tag is opened (``open_tag``) and checked
  against the digest of the ciphertext the shuffler multiplied, the Paillier-encrypted batch sum
  is opened with a range check (``open_batch_sum``; for ``ddp-linucb``'s signed layout also a
  bound on every coordinate sum), and the batch is fed as its counts or signed sums
  (``Policy.ingest_statistic``) with its members' report ids. One report cannot be taken out of
  a sum, so a batch that fails any check — a bad ciphertext, a sum out of range, a tag that does
  not open, a digest that does not match, a report id repeated or already counted — is
  **quarantined** as a whole: acknowledged, recorded as processed, nothing fed, its reports
  counted as refused (``Fed.quarantined``). The shuffler then moves on instead of re-sending it
  forever.

``accept`` runs on the event loop before an upload is queued (transport and wire-level checks:
what is wrong there is wrong with the deployment, not with a batch, and is refused with a 4xx);
``decode`` runs in the pipeline's worker thread and never touches the policy; ``Decoded.feed``
does, under the pipeline's roll-back.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from services.analyzer.errors import AggregationMismatch, BatchSizeMismatch, UnknownKey
from shared.core.policies import Policy
from shared.core.randomizers.base import Randomizer
from shared.crypto.hpke import CryptoError, unpack_report
from shared.crypto.keystore import HpkeKeyStore, PaillierKeyStore
from shared.crypto.paillier import CiphertextError, decode_ciphertexts
from shared.crypto.slots import SlotLayout, SlotRangeError, SumRangeError
from shared.crypto.tags import open_tag
from shared.protocol.messages import BatchUpload, b64decode
from shared.protocol.secure_sum import EncryptedBatchSum
from shared.settings import TaskConfig

log = logging.getLogger(__name__)

# What the shuffler posts: a report batch (``/batches``) or an encrypted batch sum
# (``/batch-sums``).
Upload = BatchUpload | EncryptedBatchSum


@dataclass(frozen=True)
class BatchSumJob:
    """An encrypted batch sum whose wire form has been checked (count, key id);
    ``ciphertexts`` are the decoded integers, one per plaintext of the task layout, or empty
    with ``bad_ciphertext`` saying why they are not elements of Z*_{n²} (the batch will be
    quarantined)."""

    upload: EncryptedBatchSum
    ciphertexts: list[int]
    bad_ciphertext: str | None = None

    @property
    def batch_id(self) -> str:
        return self.upload.batch_id


# What a task's group committer queues: report batches for ``reports`` tasks, batch sums for
# ``secure-sum`` tasks (never mixed: each task has one decoder).
Item = BatchUpload | BatchSumJob
ItemT = TypeVar("ItemT", bound=Item)


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


U = TypeVar("U", BatchUpload, EncryptedBatchSum)


def admit(config: TaskConfig, upload: Upload, kind: type[U], count: Callable[[U], int],
          takes: str) -> U:
    """The upload, if it is of the task's transport (409 otherwise: individual reports of a
    secure-sum task must never reach the analyzer) and holds exactly l reports (422
    ``batch_size_mismatch`` otherwise; ``takes`` says what the task takes, ``{l}`` standing for
    the batch size and ``{n}`` for the count received)."""
    if not isinstance(upload, kind):
        raise wrong_transport(config)
    n, l = count(upload), config.batch_size
    if n != l:
        raise BatchSizeMismatch(f"task {config.id!r} takes {takes.format(l=l, n=n)}")
    return upload


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
class TaskDecoder:
    """What both decoders share: the task, and the shape checks of ``accept`` (``admit``: the
    task's transport, exactly l reports), described by the subclass's ``kind``, ``count`` and
    ``takes``."""

    config: TaskConfig
    kind: ClassVar[type]
    takes: ClassVar[str]

    @staticmethod
    def count(upload: Any) -> int:
        raise NotImplementedError

    def admit(self, upload: Upload) -> Any:
        return admit(self.config, upload, self.kind, self.count, self.takes)


@dataclass
class ReportsDecoder(TaskDecoder):
    """Batches of exactly l HPKE reports, sealed to the analyzer for this task; ``row_bytes`` is
    the wire length of one report row."""

    keys: HpkeKeyStore
    randomizer: Randomizer
    row_bytes: int
    # A policy-level check of a decoded row (``MABPolicy.admit_row``: e.g. a Tsallis-INF
    # probability no published model gave); raises ValueError to reject the report alone. It
    # runs in the pipeline's worker thread, which is the only one that mutates the policy.
    check_row: Callable[[np.ndarray], None] | None = None
    report_level: ClassVar[bool] = True
    kind: ClassVar[type] = BatchUpload
    takes: ClassVar[str] = "batches of exactly l = {l} reports, got {n}"

    @staticmethod
    def count(upload: BatchUpload) -> int:
        return len(upload.reports)

    def accept(self, upload: Upload) -> BatchUpload:
        return self.admit(upload)

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
                row = self.randomizer.from_bytes(row_bytes)
                if self.check_row is not None:
                    self.check_row(row)
                rows.append(row)
            except (CryptoError, ValueError) as exc:
                rejected += 1
                log.debug("task %s batch %s: rejected a report: %s", task, item.batch_id, exc)
                continue
            ids.append(report_id)
        return DecodedReports(item.batch_id, ids, rows, rejected)


# ---------------------------------------------------------------------------------------------
# secure-sum: one Paillier-encrypted batch sum


class Quarantine(Exception):
    """(Not an HTTP error.) Why a secure-sum batch is refused as a whole: ``code`` is one of
    ``bad_ciphertext``, ``slot_out_of_range``, ``sum_out_of_range`` (a signed sum beyond what an
    honest batch reaches), ``bad_tag``, ``digest_mismatch``,
    ``repeated_report_id``, ``duplicate_report_id``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def quarantine_log(task: str, batch_id: str, count: int, reason: Quarantine) -> None:
    log.warning("task %s: batch %s quarantined, its %d reports refused (%s)",
                task, batch_id, count, reason)


@dataclass
class DecodedSum:
    """A batch sum that passed every check: its counts and its members' report ids."""

    task: str
    batch_id: str
    stat: np.ndarray
    count: int
    ids: list[bytes]
    rejected: int = 0

    @property
    def report_ids(self) -> Sequence[bytes]:
        return self.ids

    def feed(self, policy: Policy, known: set[bytes]) -> Fed:
        if any(rid in known for rid in self.ids):
            # Counted before (or earlier in this group): the whole sum would count it again.
            reason = Quarantine("duplicate_report_id", "a member's report id was already counted")
            quarantine_log(self.task, self.batch_id, self.count, reason)
            return Fed(0, quarantined=self.count)
        policy.ingest_statistic(self.stat, self.count)
        known.update(self.ids)
        return Fed(self.count, new_ids=list(self.ids))


@dataclass
class QuarantinedSum:
    """A batch sum refused as a whole when decoded; feeding it changes nothing."""

    batch_id: str
    count: int
    rejected: int = 0

    @property
    def report_ids(self) -> Sequence[bytes]:
        return ()

    def feed(self, policy: Policy, known: set[bytes]) -> Fed:
        return Fed(0, quarantined=self.count)


@dataclass
class SumDecoder(TaskDecoder):
    """Encrypted batch sums of l reports under the analyzer's Paillier key, packed as the task's
    slot ``layout``, with one tag per member sealed to the analyzer's HPKE key (``hpke``). Only
    the batch counts (Z, U) are ever decrypted, never a single report."""

    keys: PaillierKeyStore
    layout: SlotLayout
    hpke: HpkeKeyStore
    # A signed layout (``ddp-linucb``): the largest |coordinate sum| an honest batch of n reports
    # reaches (``SkellamRandomizer.sum_bound``, exceeded with probability below 2⁻⁶⁴).
    sum_bound: Callable[[int], float] | None = None
    report_level: ClassVar[bool] = False
    kind: ClassVar[type] = EncryptedBatchSum
    takes: ClassVar[str] = "sums of exactly l = {l} reports, got count = {n}"

    @staticmethod
    def count(upload: EncryptedBatchSum) -> int:
        return upload.count

    def accept(self, upload: Upload) -> BatchSumJob:
        upload = self.admit(upload)
        keys = self.keys
        if upload.key_id != keys.key_id:
            raise UnknownKey(
                f"batch {upload.batch_id} is encrypted under Paillier key {upload.key_id}; this "
                f"analyzer's key is {keys.key_id}"
            )
        try:
            ciphertexts = decode_ciphertexts(upload.ct, keys.n, self.layout.plaintexts)
        except CiphertextError as exc:
            # The shuffler checks every member is a unit mod n², so their product is one: this
            # sum was corrupted after that. It cannot be counted; quarantine it (in ``decode``).
            return BatchSumJob(upload, [], str(exc))
        return BatchSumJob(upload, ciphertexts)

    def weight(self, item: BatchSumJob) -> int:
        # One HPKE open per member's tag, one decryption per plaintext (at most a few).
        return item.upload.count + len(item.ciphertexts)

    def decode(self, item: BatchSumJob) -> DecodedSum | QuarantinedSum:
        """Open the tags, then the sum: pure, so nothing is fed before every check passed; a
        batch failing any check is quarantined (``QuarantinedSum``)."""
        count = item.upload.count
        task = self.config.id
        try:
            if item.bad_ciphertext is not None:
                raise Quarantine("bad_ciphertext", item.bad_ciphertext)
            ids = self._open_tags(item.upload)
            bound = self.sum_bound(count) if self.sum_bound is not None else None
            try:
                stat = self.keys.open_batch_sum(item.ciphertexts, self.layout, count, bound)
            except SumRangeError as exc:
                raise Quarantine(
                    "sum_out_of_range",
                    f"the decrypted sum of {count} reports has a coordinate beyond the "
                    f"±{bound:.0f} an honest batch stays within ({exc})",
                ) from exc
            except SlotRangeError as exc:
                raise Quarantine(
                    "slot_out_of_range",
                    f"the decrypted sum is not one of {count} reports with digits in "
                    f"0..{self.layout.m} ({exc})",
                ) from exc
            except CiphertextError as exc:
                raise Quarantine("bad_ciphertext", str(exc)) from exc
        except Quarantine as reason:
            quarantine_log(task, item.batch_id, count, reason)
            return QuarantinedSum(item.batch_id, count)
        return DecodedSum(task, item.batch_id, stat, count, ids)

    def _open_tags(self, upload: EncryptedBatchSum) -> list[bytes]:
        """The members' report ids, or ``Quarantine`` if a tag does not open, does not hold the
        digest of the ciphertext the shuffler multiplied (a re-randomised copy reusing another
        report's tag), or repeats a report id of the batch."""
        hpke, task = self.hpke, self.config.id
        ids: list[bytes] = []
        seen: set[bytes] = set()
        for i, member in enumerate(upload.members):
            try:
                report_id, digest = open_tag(hpke.private_key, hpke.key_id, task, member.tag)
            except CryptoError as exc:
                raise Quarantine("bad_tag", f"members[{i}]: {exc}") from exc
            if not hmac.compare_digest(digest, b64decode(member.digest)):
                raise Quarantine(
                    "digest_mismatch",
                    f"members[{i}]: the tag was made for another ciphertext than the one "
                    "multiplied into the sum",
                )
            if report_id in seen:
                raise Quarantine("repeated_report_id", f"members[{i}] repeats a report id")
            seen.add(report_id)
            ids.append(report_id)
        return ids
