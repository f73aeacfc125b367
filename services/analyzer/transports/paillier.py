"""The analyzer's side of the ``paillier`` transport (``secure_sum = "paillier"``): one
Paillier-encrypted batch sum.

``SumDecoder``: every member's tag is opened (``open_tag``) and checked against the digest of
the ciphertext the shuffler multiplied, the Paillier-encrypted batch sum is opened with a range
check (``open_batch_sum``; for ``ddp-linucb``'s signed layout also a bound on every coordinate
sum), and the batch is fed as its counts or signed sums (``Policy.ingest_statistic``) with its
members' report ids. One report cannot be taken out of a sum, so a batch that fails any check —
a bad ciphertext, a sum out of range, a tag that does not open, a digest that does not match, a
report id repeated or already counted — is **quarantined** as a whole: acknowledged, recorded
as processed, nothing fed, its reports counted as refused (``Fed.quarantined``). The shuffler
then moves on instead of re-sending it forever.

``PaillierTransport`` holds the analyzer's Paillier key (created at start-up when a task uses
the transport) and the slot layout of each task under it.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, cast

import numpy as np
from fastapi import APIRouter, Depends
from pydantic import BaseModel

from privbandit.services.analyzer.errors import NoPaillierKey, NotSecureSum, UnknownKey
from privbandit.services.analyzer.transports.base import (
    AnalyzerKeys,
    Delivery,
    Fed,
    TaskDecoder,
    UploadJob,
)
from privbandit.services.common.deps import get_runtime, task_dependency
from privbandit.services.common.web import error_responses, report_json_bytes
from privbandit.shared.core.policies import Policy
from privbandit.shared.core.policies.base import Scheduled, SumIngesting
from privbandit.shared.core.randomizers.base import SumBounded
from privbandit.shared.crypto.hpke import CryptoError
from privbandit.shared.crypto.keystore import PAILLIER_KEY_FILE, HpkeKeyStore, PaillierKeyStore
from privbandit.shared.crypto.paillier import CiphertextError, decode_ciphertexts
from privbandit.shared.crypto.slots import SlotLayout, SlotRangeError, SumRangeError, layout_for
from privbandit.shared.crypto.tags import DIGEST_BYTES, TAG_CIPHERTEXT_BYTES, open_tag
from privbandit.shared.protocol.messages import MAX_CIPHERTEXT_BYTES, b64decode
from privbandit.shared.protocol.paillier import EncryptedBatchSum, PaillierConfig
from privbandit.shared.protocol.prio3 import Prio3Config
from privbandit.shared.settings import TaskConfig

log = logging.getLogger(__name__)

# Upper bound on the JSON of one ``SumMember`` of a batch sum: a tag (an ``EncryptedReport``) and
# a digest, each bounded like a report (generously, see ``report_json_bytes``).
SUM_MEMBER_JSON_BYTES = report_json_bytes(TAG_CIPHERTEXT_BYTES) + report_json_bytes(DIGEST_BYTES)


@dataclass(frozen=True)
class BatchSumJob(UploadJob[EncryptedBatchSum]):
    """An encrypted batch sum whose wire form has been checked (count, key id);
    ``ciphertexts`` are the decoded integers, one per plaintext of the task layout, or empty
    with ``bad_ciphertext`` saying why they are not elements of Z*_{n²} (the batch will be
    quarantined)."""

    ciphertexts: list[int]
    bad_ciphertext: str | None = None


class Quarantine(Exception):
    """(Not an HTTP error.) Why a Paillier batch is refused as a whole: ``code`` is one of
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
        if not isinstance(policy, SumIngesting):  # the registry offers secure-sum only to these
            raise TypeError(f"{policy.algo} cannot learn from batch sums")
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
    delivery: ClassVar[Delivery] = Delivery(
        EncryptedBatchSum, "sums of exactly l = {l} reports, got count = {n}",
        "it takes only encrypted batch sums (POST /v1/tasks/{task}/batch-sums)")

    def public_config(self) -> PaillierConfig:
        """The Paillier public key with the task's slot layout."""
        return self.keys.paillier_config(self.layout)

    def accept(self, upload: BaseModel) -> BatchSumJob:
        return self._job(self.admit(upload))

    def _job(self, upload: EncryptedBatchSum) -> BatchSumJob:
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


class PaillierTransport:
    """``paillier``: the shuffler forwards only the encrypted sum of each batch of l, with its
    members' tags; the analyzer decrypts only that sum."""

    name = "paillier"
    endpoint = "batch-sums"
    upload: type[BaseModel] = EncryptedBatchSum
    summary = (
        "The encrypted sum of one batch of exactly l Paillier reports from the shuffler, with "
        "its members' tags; idempotent on batch id. A sum that cannot be counted (out of range, "
        "bad ciphertext, tag or digest, a report id seen before) is quarantined: 200 with "
        "``quarantined``, its reports refused. A 422 (wrong l or Paillier key) changes no state "
        "and leaves the id unprocessed."
    )
    key_files = {PAILLIER_KEY_FILE: "the analyzer's Paillier private key (Paillier tasks)"}

    def add_routes(self, router: APIRouter) -> None:
        """``GET /v1/paillier-config`` (the shuffler) and ``GET /v1/tasks/{task}/secure-sum``
        (devices; a prio3 task's answers its Prio3 parameters, ``Prio3Decoder.public_config``)."""
        router.add_api_route("/v1/paillier-config", paillier_config, methods=["GET"],
                             responses=error_responses(404))
        router.add_api_route("/v1/tasks/{task}/secure-sum", secure_sum_config, methods=["GET"],
                             response_model=PaillierConfig | Prio3Config,
                             responses=error_responses(401, 404, 409, 413, 422))

    def open_keys(self, keys: AnalyzerKeys) -> None:
        """Create or load the Paillier key: devices and the shuffler fetch it."""
        keys.paillier_keys()

    def decoder(self, config: TaskConfig, policy: Policy, keys: AnalyzerKeys) -> SumDecoder:
        paillier = keys.paillier_keys()
        return SumDecoder(config, paillier, task_layout(config, paillier), keys.keys,
                          sum_bound=sum_bound(config, policy))

    def max_body(self, config: TaskConfig) -> int:
        """One ``EncryptedBatchSum``: a few ciphertexts, whatever l is (base64 of at most
        ``MAX_CIPHERTEXT_BYTES``, the bound its ``ct`` field enforces), and l members."""
        return 4 * MAX_CIPHERTEXT_BYTES // 3 + config.max_batch * SUM_MEMBER_JSON_BYTES


def sum_bound(config: TaskConfig, policy: Policy) -> Callable[[int], float] | None:
    """The bound an honest batch sum stays within (``SkellamRandomizer.sum_bound``). Under a
    growing schedule a batch may hold reports sized for any earlier length (devices holding an
    older model), whose shares are larger (σ² = μ/⌈γl⌉): the bound is the first length's, the
    largest share a report can carry."""
    randomizer = (policy.randomizer_for(config.schedule.size(0)) if isinstance(policy, Scheduled)
                  else policy.randomizer)
    # Only distributed noise has such a bound (sblb's counts are bounded by the layout instead).
    return randomizer.sum_bound if isinstance(randomizer, SumBounded) else None


def task_layout(config: TaskConfig, keys: PaillierKeyStore) -> SlotLayout:
    """c = d(d+3)/2 counts of 0..m per report, batch size l, under the Paillier key."""
    try:
        return layout_for(config, keys.key_bits)
    except ValueError as exc:
        raise RuntimeError(f"task {config.id!r}: no Paillier slot layout: {exc}") from exc


# The analyzer's runtime (``AnalyzerRuntime``) and a task's (``TaskRuntime``), as the routes
# below get them (typed loosely: the runtime module imports this one).
RuntimeDep = Annotated[Any, Depends(get_runtime)]
TaskDep = Annotated[Any, Depends(task_dependency("analyzer"))]


async def paillier_config(runtime: RuntimeDep) -> PaillierConfig:
    """The Paillier public key of the ``paillier`` transport (no task layout); 404
    ``no_paillier_key`` when no task uses it. Never creates the key: an unauthenticated GET
    must not write a private key to the analyzer's disk (issue 45 item 9); the tasks that use
    Paillier create it at start-up (``open_keys``)."""
    keys: PaillierKeyStore | None = runtime.opened_paillier_keys()
    if keys is None:
        raise NoPaillierKey("no task of this analyzer uses the Paillier secure sum")
    return keys.paillier_config()


async def secure_sum_config(rt: TaskDep) -> PaillierConfig | Prio3Config:
    """What a device needs to encode its reports of a secure-sum task: for Paillier, the public
    key with the task's slot layout (c = d(d+3)/2 slots of ⌈log2(l·m + 1)⌉ bits); for prio3,
    the task's Prio3 parameters (``Prio3Config``)."""
    config = rt.decoder.public_config()
    if config is None:
        raise NotSecureSum(
            f"task {rt.id!r} uses {rt.config.aggregation} aggregation, not secure-sum"
        )
    return cast("PaillierConfig | Prio3Config", config)
