"""Wire messages of the privbandit protocol, version 1 (spec §4).

Every request and response of the three services is one of these pydantic v2 models: strict types,
no unknown fields, finite numbers, bounded lengths and dimensions. Binary fields travel as
unpadded-or-padded URL-safe base64 strings.

Report plaintext (inside HPKE, never JSON): 16-byte random report id ‖ the randomizer's wire form of
the report row (``Randomizer.to_bytes``). No device id, no timestamp, no decision id.
"""

from __future__ import annotations

import base64
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from shared.core.accounting.ledger import PrivacyLedger

PROTOCOL_VERSION = "v1"
REPORT_ID_BYTES = 16
MAX_DIM = 64
MAX_ARMS = 1024
MAX_CIPHERTEXT_BYTES = 65536
MAX_REPORTS_PER_UPLOAD = 1000
MAX_BATCH = 100_000
TASK_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"

TaskId = Annotated[str, Field(pattern=TASK_ID_PATTERN)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
Reward = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
HexId = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]

_B64 = re.compile(r"^[A-Za-z0-9_-]*={0,2}$")


def b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


def b64decode(text: str) -> bytes:
    if not _B64.match(text):
        raise ValueError("not URL-safe base64")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _check_b64(max_bytes: int):
    def check(text: str) -> str:
        raw = b64decode(text)
        if len(raw) == 0 or len(raw) > max_bytes:
            raise ValueError(f"must decode to 1..{max_bytes} bytes")
        return text

    return check


Ciphertext = Annotated[
    str, Field(max_length=4 * MAX_CIPHERTEXT_BYTES // 3 + 4),
    AfterValidator(_check_b64(MAX_CIPHERTEXT_BYTES)),
]
EncapsulatedKey = Annotated[str, Field(max_length=128), AfterValidator(_check_b64(96))]


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# ---------------------------------------------------------------------------------------------
# Errors


class ErrorBody(Message):
    code: str = Field(description="machine-readable error code, e.g. 'batch_too_small'")
    message: str = Field(description="what went wrong, for a human")


# ---------------------------------------------------------------------------------------------
# Analyzer


class HpkeConfig(Message):
    """The analyzer's HPKE public configuration (RFC 9180 base mode)."""

    key_id: int = Field(ge=0, le=255)
    kem: Literal["DHKEM(X25519, HKDF-SHA256)"] = "DHKEM(X25519, HKDF-SHA256)"
    kdf: Literal["HKDF-SHA256"] = "HKDF-SHA256"
    aead: Literal["AES-128-GCM"] = "AES-128-GCM"
    public_key: EncapsulatedKey


class TaskInfo(Message):
    """Public parameters of one task: enough for a device to decide, randomise and encrypt."""

    id: TaskId
    threat_model: Literal["none", "ldp", "shuffle", "central"]
    algo: str
    d: int = Field(ge=1, le=MAX_DIM)
    K: int = Field(ge=2, le=MAX_ARMS)
    batch_size: int = Field(ge=1, le=MAX_BATCH)
    aggregation: Literal["reports", "secure-sum"] = "reports"
    policy: dict[str, Any] = Field(description="the task's full policy configuration")


class ModelMessage(Message):
    """A published model: devices choose argmax ⟨x, θ̃⟩ + β ‖x‖_{V⁻¹}. ETag = version."""

    task: TaskId
    version: int = Field(ge=0)
    theta: list[FiniteFloat] = Field(max_length=MAX_DIM)
    V: list[list[FiniteFloat]] = Field(max_length=MAX_DIM)
    beta: FiniteFloat = Field(ge=0)
    reports: int = Field(ge=0, description="reports counted into this model")


class EncryptedReport(Message):
    """One HPKE ciphertext (base mode): encapsulated key and AEAD ciphertext."""

    key_id: int = Field(ge=0, le=255)
    enc: EncapsulatedKey
    ct: Ciphertext


class BatchUpload(Message):
    """Shuffler → analyzer: exactly l reports in CSPRNG order, nothing else."""

    batch_id: HexId
    reports: list[EncryptedReport] = Field(min_length=1, max_length=MAX_BATCH)


class BatchAck(Message):
    batch_id: HexId
    replayed: bool = Field(description="true when this batch id was already processed")
    counted: int = Field(ge=0, description="reports newly counted from this batch")
    rejected: int = Field(ge=0, description="reports that failed decryption or validation")
    duplicates: int = Field(ge=0, description="reports whose id had already been counted")
    model_version: int = Field(ge=0)
    quarantined: bool = Field(
        False,
        description="true when the whole batch was refused as one (a secure-sum batch whose "
                    "sum, ciphertext or report tags are invalid): nothing of it was counted, "
                    "its reports are in ``rejected``, and its id is processed (re-delivery "
                    "answers ``replayed``)",
    )


class PrivacyReport(Message):
    """The analyzer's privacy ledger for one task, with what it covers."""

    task: TaskId
    ledger: PrivacyLedger
    reports_counted: int = Field(ge=0)
    reports_refused: int = Field(
        0, ge=0,
        description="reports the shuffler delivered that were not counted: rejected when "
                    "decoded (decryption or range checks), dropped as a duplicate report id, or "
                    "members of a quarantined secure-sum batch; accepted = counted + refused + "
                    "pending",
    )
    batches: int = Field(ge=0, description="batches processed, quarantined ones included")
    model_version: int = Field(ge=0)


# ---------------------------------------------------------------------------------------------
# Shuffler


class ReportUpload(Message):
    """Device → shuffler: one or many ciphertexts for one task."""

    reports: list[EncryptedReport] = Field(min_length=1, max_length=MAX_REPORTS_PER_UPLOAD)


class ReportsAccepted(Message):
    accepted: int = Field(ge=0, description="new reports made durable")
    duplicates: int = Field(ge=0, description="identical ciphertexts already held")


class TaskQueueStatus(Message):
    task: TaskId
    batch_size: int
    pending: int = Field(description="accepted reports waiting for a batch to fill")
    accepted: int = Field(description="reports accepted since the store was created")
    batches_formed: int
    batches_acknowledged: int
    batches_in_flight: int
    refused_stale_key: int = Field(
        0, description="accepted secure-sum reports dropped because the analyzer's Paillier key "
        "changed (an explicit --init): nobody can decrypt them any more",
    )
    last_error: str | None = Field(
        None, description="the last failure forwarding a batch to the analyzer (None once acked)"
    )


class ShufflerStatus(Message):
    tasks: list[TaskQueueStatus]


# ---------------------------------------------------------------------------------------------
# Device


class DecideRequest(Message):
    """A user's private per-arm features, K rows of d numbers (never leave the device)."""

    features: list[list[FiniteFloat]] = Field(min_length=2, max_length=MAX_ARMS)


class DecideResponse(Message):
    decision_id: HexId
    action: int = Field(ge=0)
    model_version: int = Field(ge=0)


class FeedbackRequest(Message):
    decision_id: HexId
    reward: Reward


class FeedbackResponse(Message):
    queued: bool
    outbox_pending: int = Field(ge=0, description="reports not yet accepted by the shuffler")


class DeviceStatus(Message):
    tasks: dict[str, int] = Field(description="cached model version per task")
    feedbacks: int
    outbox_pending: int
    uploaded: int
    dropped: int = Field(
        0, ge=0,
        description="secure-sum reports dropped because they were encrypted under a Paillier key "
                    "the analyzer no longer has (they could never be counted)",
    )
