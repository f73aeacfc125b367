"""What the shuffler's two stores share: the types intake and delivery see, the ``Store`` protocol
(``sqlite.ShufflerStore``, one process; ``postgres.PgShufflerStore``, N replicas) and the rules
both apply, as pure functions of what the database answered.

Duplicates (``admit``). ``seen`` holds sha256(enc ‖ ct) of every ciphertext ever accepted, per
task, and for a Paillier report also its tag's entry (``tag_hash``, domain-separated). A
report is accepted iff its ciphertext's entry and (if it has a tag) its tag's entry are both
new; a new ciphertext under a tag already held (a re-randomised copy c·rⁿ of a report, or a
device re-encrypting) is a duplicate and leaves no entry. The reports of one upload are judged
in order, each against the entries of those before it.

Batch schedules (``schedule_of``, issue 22). Batch k of a task holds exactly l_k reports
(``BatchSchedule.size``; l_k = l for a fixed batch). k is the count of the task's batches formed
before it, read from the database in the transaction that forms the batch (never from memory),
and never decreases, so every process and replica gives batch k the same length and a report
only ever enters batches at least as long as the task's next one when it was accepted.

Oversized shares (``admit``'s ``limit``). A ``ddp-linucb`` device sizes its Skellam share for the
batch length l announced with the model (σ² = μ/⌈γl⌉: the longer the batch, the smaller each
share) and says which (``EncryptedCounts.batch_size``); an ``sblb`` device under a growing
schedule sizes its ε0 the same way (the longer the batch, the larger ε0) and says which
(``EncryptedCounts.batch_size`` or ``UploadedReport.batch_size``). A report sized for l lands
in a batch k ≥ the task's next index at acceptance, of length ≥ l_next; it carries enough noise
iff l ≤ l_k, guaranteed if l ≤ l_next. An honest device cannot exceed it (the analyzer announced
l_b after ingesting b batches, all formed before: b ≤ next, so l_b ≤ l_next); a report that
does is refused alone (``refused_oversized``) and never stored. One case makes honest reports
oversized: a shuffler whose store was started afresh (``--init``) beside an analyzer that kept
its state. The shuffler then catches up from the analyzer's announcement, never from a device's
(``catch_up_index``; ``services.shuffler.schedule``): skipping indices only lengthens batches.

Stale keys (``stale_refusal``). Once the analyzer's Paillier key is ``key_id``, a report held
under another key can never be counted and must never share a batch with reports under
``key_id``.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from privbandit.services.common.metrics import TxMetrics
from privbandit.shared.core.schedule import BatchSchedule
from privbandit.shared.protocol.messages import EncryptedReport, b64decode, b64encode
from privbandit.shared.protocol.paillier import EncryptedCounts
from privbandit.shared.protocol.prio3 import Prio3Report

T = TypeVar("T")

# Shuffling uses the OS CSPRNG: the permutation is what hides arrival order from the analyzer.
_CSPRNG = secrets.SystemRandom()


def shuffled(rows: list[T]) -> tuple[str, list[T]]:
    """A new batch: a fresh id and ``rows`` in a uniformly random order (Fisher–Yates with the
    OS CSPRNG), shuffled in place."""
    _CSPRNG.shuffle(rows)
    return secrets.token_hex(16), rows


def wire(report: EncryptedReport | EncryptedCounts) -> tuple[int, bytes, bytes]:
    """(key id, enc, ct) as stored; a Paillier report has no encapsulated key (enc = b"")."""
    enc = b64decode(report.enc) if isinstance(report, EncryptedReport) else b""
    return report.key_id, enc, b64decode(report.ct)


def report_hash(report: EncryptedReport | EncryptedCounts) -> bytes:
    """sha256(enc ‖ ct): identical ciphertexts are the same report."""
    _, enc, ct = wire(report)
    return hashlib.sha256(enc + ct).digest()


def tag_bytes(tag: EncryptedReport) -> bytes:
    """A Paillier report's tag as stored: key id (one byte) ‖ enc ‖ ct."""
    return bytes([tag.key_id]) + b64decode(tag.enc) + b64decode(tag.ct)


def tag_from_bytes(raw: bytes) -> EncryptedReport:
    """Inverse of ``tag_bytes`` (X25519 encapsulated keys are 32 bytes)."""
    return EncryptedReport(key_id=raw[0], enc=b64encode(raw[1:33]), ct=b64encode(raw[33:]))


def tag_hash(raw_tag: bytes) -> bytes:
    """The ``seen`` entry of a tag: its enc ‖ ct (not its key id, which intake pins to the
    analyzer's), domain-separated from ciphertext hashes."""
    return hashlib.sha256(b"privbandit/tag|" + raw_tag[1:]).digest()


def schedule_of(spec: int | BatchSchedule) -> BatchSchedule:
    """A task's batch schedule from a store's ``schedules`` argument (an int l: fixed)."""
    return spec if isinstance(spec, BatchSchedule) else BatchSchedule(int(spec))


def catch_up_index(schedule: BatchSchedule, k: int, length: int) -> int:
    """The first index k' ≥ k whose batch is at least ``length`` long (or the cap's): where a
    shuffler behind the analyzer's announced ``length`` goes on. k itself if it already is."""
    target = min(length, schedule.max_size)
    while schedule.size(k) < target:
        k += 1
    return k


@dataclass(frozen=True)
class Upload:
    """One device upload: reports for one task (HPKE reports, or Paillier-encrypted counts for a
    Paillier task; never both)."""

    task: str
    reports: Sequence[EncryptedReport | EncryptedCounts | Prio3Report]


@dataclass(frozen=True)
class AcceptResult:
    accepted: int
    duplicates: int
    refused: int = 0  # oversized shares (``admit``'s ``limit``)


@dataclass(frozen=True)
class Candidate:
    """One uploaded report as it would be stored (``row``: key id, enc, ct, tag or None) with
    its ``seen`` entries."""

    row: tuple[int, bytes, bytes, bytes | None]
    ct_hash: bytes
    tag_hash: bytes | None
    sized_for: int | None = None  # the batch length its noise share is sized for, if stated

    @classmethod
    def of(cls, report: EncryptedReport | EncryptedCounts | Prio3Report) -> Candidate:
        if isinstance(report, Prio3Report):
            return cls.prio3(report)
        key_id, enc, ct = wire(report)
        if isinstance(report, EncryptedCounts):
            tag = tag_bytes(report.tag)
            return cls((key_id, enc, ct, tag), hashlib.sha256(enc + ct).digest(), tag_hash(tag),
                       report.batch_size)
        # An HPKE report may state its length too (``UploadedReport``: sblb's ε0 per length).
        return cls((key_id, enc, ct, None), hashlib.sha256(enc + ct).digest(), None,
                   getattr(report, "batch_size", None))


    @classmethod
    def prio3(cls, report: Prio3Report) -> Candidate:
        """A ``prio3`` report, stored as its JSON (``ct``) with its nonce in the tag column:
        its ``seen`` entries are the JSON's hash and the nonce's, so a second report under a
        nonce already held is a duplicate whatever its shares (the nonce is the report id)."""
        nonce = b64decode(report.nonce)
        raw = report.model_dump_json(exclude_none=True).encode("utf-8")
        return cls((report.helper_share.key_id, b"", raw, nonce), hashlib.sha256(raw).digest(),
                   nonce_hash(nonce), report.batch_size)


def nonce_hash(nonce: bytes) -> bytes:
    """The ``seen`` entry of a ``prio3`` report's nonce (domain-separated)."""
    return hashlib.sha256(b"privbandit/prio3-nonce|" + nonce).digest()


def seen_entries(candidates: Iterable[Candidate]) -> list[bytes]:
    """Every ``seen`` entry an upload may add, in order (a store inserts them all, learns which
    were new, and deletes those ``admit`` does not keep)."""
    out: list[bytes] = []
    for c in candidates:
        out.append(c.ct_hash)
        if c.tag_hash is not None:
            out.append(c.tag_hash)
    return out


@dataclass(frozen=True)
class Admission:
    """What ``admit`` decided for one upload: the rows to store, the duplicates, and the
    ``seen`` entries that stay recorded."""

    rows: list[tuple[int, bytes, bytes, bytes | None]]
    duplicates: int
    recorded: frozenset[bytes]
    refused: int = 0


def admit(candidates: Sequence[Candidate], known: set[bytes], limit: int | None = None
          ) -> Admission:
    """The duplicate rule (module docstring) for one upload, given ``known``: which of its
    ``seen_entries`` were present before it. With ``limit`` (the length of the task's next
    batch), a report whose share is sized for a longer batch is refused first (module
    docstring: oversized shares) and leaves no ``seen`` entry."""
    seen = set(known)
    rows: list[tuple[int, bytes, bytes, bytes | None]] = []
    duplicates = refused = 0
    for c in candidates:
        if limit is not None and c.sized_for is not None and c.sized_for > limit:
            refused += 1
            continue
        if c.ct_hash in seen or (c.tag_hash is not None and c.tag_hash in seen):
            duplicates += 1
            continue
        seen.add(c.ct_hash)
        if c.tag_hash is not None:
            seen.add(c.tag_hash)
        rows.append(c.row)
    return Admission(rows, duplicates, frozenset(seen - known), refused)


def stale_refusal(size: int, sum_key_id: int | None, stale_members: int, key_id: int) -> int:
    """Reports an unacknowledged batch loses once the analyzer's key is ``key_id`` (0: the
    batch stays). A batch whose sum is stored is all under its sum's key (the sum replaced its
    members): all ``size`` are refused if that is another key. Otherwise its ``stale_members``
    (under another key) are refused; the batch is then dissolved, its other members returned
    to pending."""
    if sum_key_id is not None:
        return 0 if sum_key_id == key_id else size
    return stale_members


@dataclass(frozen=True)
class Dissolution:
    """An unacknowledged batch ``refuse_stale_key`` dissolves: the reports it loses, and whether
    its sum is stored (then no member is left to return to pending)."""

    batch_id: str
    refused: int
    has_sum: bool


def dissolutions(
    batches: Iterable[tuple[str, int, int | None, int]], key_id: int
) -> list[Dissolution]:
    """Of a task's unacknowledged batches, each (id, size, key id of its stored sum or None,
    members under another key than ``key_id``), those to dissolve (``stale_refusal`` > 0), in
    the order given."""
    out = []
    for batch_id, size, sum_key_id, stale in batches:
        if lost := stale_refusal(size, sum_key_id, int(stale), key_id):
            out.append(Dissolution(batch_id, lost, sum_key_id is not None))
    return out


@dataclass(frozen=True)
class Batch:
    batch_id: str
    task: str
    reports: list[EncryptedReport]


def batch(batch_id: str, task: str, members: Iterable[tuple[int, bytes, bytes]]) -> Batch:
    """A ``Batch`` from its stored (key id, enc, ct) members, in their stored order."""
    return Batch(batch_id=batch_id, task=task, reports=[
        EncryptedReport(key_id=key_id, enc=b64encode(bytes(enc)), ct=b64encode(bytes(ct)))
        for key_id, enc, ct in members
    ])


@dataclass(frozen=True)
class SecureBatch:
    """An unacknowledged batch of a Paillier task: its encrypted sum once computed
    (``sum_ct``, with ``key_id`` and ``sum_members``, the JSON list of its ``SumMember``s),
    otherwise its members' (key id, ciphertext bytes, tag bytes or None)."""

    batch_id: str
    task: str
    size: int
    key_id: int | None
    sum_ct: bytes | None
    members: list[tuple[int, bytes, bytes | None]]
    sum_members: str | None = None


def secure_batch(
    batch_id: str,
    row: tuple[str, int],
    stored: tuple[Any, ...] | None,
    members: Iterable[tuple[int, bytes, bytes | None]],
) -> SecureBatch:
    """A ``SecureBatch`` from its (task, size) row, its stored (key id, sum, members JSON) if
    any, and otherwise its stored (key id, ct, tag) members."""
    return SecureBatch(
        batch_id=batch_id,
        task=row[0],
        size=row[1],
        key_id=None if stored is None else stored[0],
        sum_ct=None if stored is None else bytes(stored[1]),
        members=[(k, bytes(ct), None if tag is None else bytes(tag)) for k, ct, tag in members],
        sum_members=None if stored is None else stored[2],
    )


@dataclass(frozen=True)
class TaskCounts:
    pending: int
    accepted: int
    duplicates: int
    batches_formed: int
    batches_acknowledged: int
    refused_stale_key: int = 0
    refused_oversized: int = 0
    next_batch: int = 0  # the schedule index k of the task's next batch


@dataclass(frozen=True)
class StaleKeyRefusal:
    """What ``refuse_stale_key`` did: reports dropped, batches dissolved, batches formed anew."""

    refused: int
    dissolved: int
    formed: int


class Store(Protocol):
    """What intake, delivery and status need of the shuffler's durable state; implemented by
    ``ShufflerStore`` (SQLite, one process) and ``PgShufflerStore`` (PostgreSQL, N replicas).
    Every method may block: call it in a worker thread.

    ``poll_interval``: None if every batch this process must deliver is formed by this process
    (it is woken for them); else the seconds after which delivery looks again (batches formed
    by another replica's sweep, or taken over from a dead one).

    ``accept_in_loop``: True if ``accept`` is quick enough, apart from one local fsync, to run on
    the event loop's thread (intake then makes no thread hand-off per group commit), in which
    case ``checkpoint`` must be called in a worker thread now and then (``Intake``).

    ``observe``: count the store's transactions in the app's metrics (PostgreSQL; SQLite has
    nothing to count).

    ``schedules``: each task's batch schedule (module docstring)."""

    schedules: dict[str, BatchSchedule]
    poll_interval: float | None
    accept_in_loop: bool

    def checkpoint(self) -> None: ...
    def observe(self, metrics: TxMetrics) -> None: ...

    def close(self) -> None: ...
    def stored(self, task: str) -> int: ...
    def accept(
        self, uploads: Sequence[Upload]
    ) -> tuple[list[AcceptResult], dict[str, int]]: ...
    def unacked(
        self, task: str, limit: int, exclude: frozenset[str] = frozenset()
    ) -> list[str]: ...
    def load_batch(self, batch_id: str) -> Batch | None: ...
    def load_secure_batch(self, batch_id: str) -> SecureBatch | None: ...
    def save_sum(
        self, batch_id: str, key_id: int, count: int, ct: bytes, members: str
    ) -> bool: ...
    def refuse_stale_key(self, task: str, key_id: int) -> StaleKeyRefusal: ...
    def has_sum(self, batch_id: str) -> bool: ...
    def next_unacked(self, task: str) -> Batch | None: ...
    def acknowledge(self, batch_id: str) -> bool: ...
    def counts(self, task: str) -> TaskCounts: ...
    def catch_up(self, task: str, length: int) -> int: ...
    def batch_members(self, batch_id: str) -> int: ...
