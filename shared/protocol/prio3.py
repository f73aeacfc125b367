"""Wire messages of the ``prio3`` transport (docs/protocol.md, docs/prio3.md; issue 23).

Device → shuffler: ``Prio3Upload`` of ``Prio3Report``s (``POST /v1/tasks/{task}/prio3-reports``).
Shuffler → analyzer, per batch of l: ``Prio3VerifyRequest`` (``POST
/v1/tasks/{task}/prio3-verify``, answered with ``Prio3VerifyResponse``), then ``Prio3Aggregate``
(``POST /v1/tasks/{task}/prio3-aggregates``, answered with a ``BatchAck``). All byte strings are
URL-safe base64."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from privbandit.shared.protocol.messages import (
    MAX_BATCH,
    MAX_REPORTS_PER_UPLOAD,
    EncryptedReport,
    HexId,
    Message,
    b64decode,
)

NONCE_BYTES = 16
SEED_BYTES = 32
# A leader share of the largest task (d = 64: c = 2144 values of up to ~20 bits, 16-byte field
# elements, proof included) stays below this.
MAX_LEADER_SHARE_BYTES = 4 << 20


def _exactly(n: int) -> Callable[[str], str]:
    def check(text: str) -> str:
        if len(b64decode(text)) != n:
            raise ValueError(f"must decode to {n} bytes")
        return text

    return check


def _at_most(n: int) -> Callable[[str], str]:
    def check(text: str) -> str:
        raw = b64decode(text)
        if not 0 < len(raw) <= n:
            raise ValueError(f"must decode to 1..{n} bytes")
        return text

    return check


Nonce = Annotated[str, Field(max_length=24), AfterValidator(_exactly(NONCE_BYTES))]
PublicShare = Annotated[str, Field(max_length=88), AfterValidator(_exactly(2 * SEED_BYTES))]
VerifierMessage = Annotated[str, Field(max_length=44), AfterValidator(_exactly(SEED_BYTES))]
Share = Annotated[str, Field(max_length=4 * MAX_LEADER_SHARE_BYTES // 3 + 4),
                  AfterValidator(_at_most(MAX_LEADER_SHARE_BYTES))]


class Prio3Report(Message):
    """Device → shuffler: one report, Prio3SumVec-sharded (``shard``) under ctx = the task id
    with a fresh nonce from the OS CSPRNG (the report id): the public share (the two
    joint-randomness parts), the leader share in full (for the shuffler), and the helper share
    sealed to the analyzer's HPKE key (``shared.crypto.prio3_task.seal_helper``)."""

    nonce: Nonce
    public_share: PublicShare
    leader_share: Share
    helper_share: EncryptedReport
    batch_size: int | None = Field(
        None, ge=1, le=MAX_BATCH, description="ddp-linucb: the batch length l its Skellam share "
        "is sized for (as ``EncryptedCounts.batch_size``)",
    )


class Prio3Config(Message):
    """Analyzer → device (``GET /v1/tasks/{task}/secure-sum`` of a prio3 task): the Prio3
    parameters a device shards its reports with (``shared.crypto.prio3_task.TaskVdaf``).

    Each report's ``length`` values v are shifted by their ``offsets`` O and measured as v + O,
    entry i in [0, max_values[i]]: Prio3SumVec(length, max_value) when every entry has the same
    maximum, else SumVecRanges; field ``Field128``, ``chunk_length`` of the validity circuit's
    gadget calls, ctx = the task id. ``noise_variance``: the Skellam variance each aggregator
    adds per coordinate of a batch sum (0: the noise, if any, is in the devices' shares). The
    helper share is sealed to ``GET /v1/hpke-config``'s key."""

    task: str
    mechanism: Literal["prio3"] = "prio3"
    vdaf: Literal["Prio3SumVec", "Prio3SumVecRanges"]
    field: Literal["Field128"] = "Field128"
    length: int = Field(ge=1)
    max_value: int = Field(ge=1)
    max_values: list[int] | None = None
    offsets: list[int]
    chunk_length: int = Field(ge=1)
    proofs: int = Field(ge=1)
    noise_variance: float = Field(ge=0)
    endpoint: str = Field(description="where a device uploads its Prio3Upload (the shuffler)")


class Prio3Upload(Message):
    """Device → shuffler: one or many Prio3 reports of one task."""

    reports: list[Prio3Report] = Field(min_length=1, max_length=MAX_REPORTS_PER_UPLOAD)


class VerifyItem(Message):
    """One report of a batch as the shuffler (leader) forwards it for verification: never its
    leader share, only its verifier share (``verify_init`` of aggregator 0)."""

    nonce: Nonce
    public_share: PublicShare
    helper_share: EncryptedReport
    verifier_share: Share


class Prio3VerifyRequest(Message):
    """Shuffler → analyzer: the reports of one batch, in the batch's CSPRNG order."""

    batch_id: HexId
    reports: list[VerifyItem] = Field(min_length=1, max_length=MAX_BATCH)


class Verdict(Message):
    """The analyzer's verdict on one report: the verifier message (the joint-randomness seed,
    32 bytes) if it is valid, else ``refused`` (a reason code)."""

    message: VerifierMessage | None = None
    refused: str | None = Field(None, max_length=64)

    @model_validator(mode="after")
    def _one(self) -> Verdict:
        if (self.message is None) == (self.refused is None):
            raise ValueError("a verdict carries a message or a refusal, not both")
        return self


class Prio3VerifyResponse(Message):
    """Analyzer → shuffler: one verdict per report, in order, and the analyzer's sealed
    continuation for the batch (opaque to the shuffler: returned in ``Prio3Aggregate``)."""

    batch_id: HexId
    verdicts: list[Verdict] = Field(min_length=1, max_length=MAX_BATCH)
    continuation: Share


class Prio3Aggregate(Message):
    """Shuffler → analyzer: the batch's outcome. ``count`` is the batch length l,
    ``accepted`` the nonces of the reports found valid (in batch order), ``agg_share`` the
    leader's aggregate share over exactly those, ``continuation`` the analyzer's, as it was
    answered."""

    batch_id: HexId
    count: int = Field(ge=1, le=MAX_BATCH)
    accepted: list[Nonce] = Field(max_length=MAX_BATCH)
    agg_share: Share
    continuation: Share

    @model_validator(mode="after")
    def _at_most_count(self) -> Prio3Aggregate:
        if len(self.accepted) > self.count:
            raise ValueError(f"{len(self.accepted)} accepted of a batch of {self.count}")
        return self
