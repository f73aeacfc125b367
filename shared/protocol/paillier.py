"""Wire messages of the ``paillier`` transport (a ``secure-sum`` task with ``secure_sum =
"paillier"``; module ``secure_sum`` and ``SecureSum*`` message names before issue 45): the
analyzer's Paillier configuration, the device's encrypted counts and the shuffler's encrypted
batch sum (spec §4). Their JSON on the wire is unchanged by the renaming.

Every report carries a tag (``shared.crypto.tags``): its report id and the digest of its
ciphertext bytes, HPKE-sealed to the analyzer. The shuffler forwards with each batch sum every
member's tag and the digest of the ciphertext it actually multiplied (``SumMember``), so the
analyzer can count each report id once and detect a re-randomised copy of a report."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from privbandit.shared.crypto.paillier import (
    MAX_KEY_BITS,
    MIN_TEST_KEY_BITS,
    SCHEME,
    b64_to_int,
    int_to_b64,
    paillier_key_id,
)
from privbandit.shared.crypto.slots import SlotLayout, layout
from privbandit.shared.crypto.tags import DIGEST_BYTES
from privbandit.shared.protocol.messages import (
    MAX_BATCH,
    MAX_CIPHERTEXT_BYTES,
    MAX_REPORTS_PER_UPLOAD,
    EncryptedReport,
    HexId,
    Message,
    b64decode,
)


def _is_digest(text: str) -> str:
    if len(b64decode(text)) != DIGEST_BYTES:
        raise ValueError(f"a digest is {DIGEST_BYTES} bytes")
    return text


# URL-safe base64 of a 32-byte SHA-256 digest (``shared.crypto.tags.ciphertext_digest``).
Digest = Annotated[str, Field(max_length=48), AfterValidator(_is_digest)]


class PaillierLayout(Message):
    """A task's slot layout, published so a device can check it derives the same one.

    ``offset`` O > 0 marks a signed layout (``ddp-linucb``): a report value v is packed as the
    digit v + O ∈ [0, m], m = 2O; 0 for the counts of ``sblb``."""

    c: int = Field(ge=1)
    m: int = Field(ge=1)
    batch_size: int = Field(ge=1, le=MAX_BATCH)
    key_bits: int = Field(ge=MIN_TEST_KEY_BITS, le=MAX_KEY_BITS)
    slot_bits: int = Field(ge=1)
    slots_per_plaintext: int = Field(ge=1)
    plaintexts: int = Field(ge=1)
    ciphertext_bytes: int = Field(ge=1, le=MAX_CIPHERTEXT_BYTES)
    offset: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> PaillierLayout:
        want = layout(self.c, self.batch_size, self.m, self.key_bits, offset=self.offset)
        fields = ("slot_bits", "slots_per_plaintext", "plaintexts", "ciphertext_bytes")
        if any(getattr(self, f) != getattr(want, f) for f in fields):
            raise ValueError("layout fields are not the ones derived from (c, l, m, key_bits)")
        return self

    def slot_layout(self) -> SlotLayout:
        """The derived layout these fields describe (for packing)."""
        return layout(self.c, self.batch_size, self.m, self.key_bits, offset=self.offset)

    @classmethod
    def of(cls, lay: SlotLayout) -> PaillierLayout:
        """The wire form of a derived layout."""
        return cls(
            c=lay.c, m=lay.m, batch_size=lay.batch_size, key_bits=lay.key_bits,
            slot_bits=lay.slot_bits, slots_per_plaintext=lay.slots_per_plaintext,
            plaintexts=lay.plaintexts, ciphertext_bytes=lay.ciphertext_bytes, offset=lay.offset,
        )


class PaillierConfig(Message):
    """The analyzer's Paillier public key (g = n + 1), published next to its HPKE config.

    ``n`` is the modulus as URL-safe base64 of its big-endian bytes. ``layout`` is set when the
    config is served for one task (the slot layout depends on the task's l, m and d)."""

    key_id: int = Field(ge=0, le=255)
    scheme: Literal["paillier-g=n+1"] = SCHEME
    key_bits: int = Field(ge=MIN_TEST_KEY_BITS, le=MAX_KEY_BITS)
    n: str = Field(max_length=4 * (MAX_KEY_BITS // 8) // 3 + 4)
    layout: PaillierLayout | None = None

    @field_validator("n")
    @classmethod
    def _n_is_base64(cls, text: str) -> str:
        n = b64_to_int(text)
        if n < 3 or n % 2 == 0:
            raise ValueError("n must be an odd modulus")
        return text

    @model_validator(mode="after")
    def _n_matches(self) -> PaillierConfig:
        n = self.modulus()
        if n.bit_length() != self.key_bits:
            raise ValueError(f"n has {n.bit_length()} bits, config says {self.key_bits}")
        if self.key_id != paillier_key_id(n):
            raise ValueError("key_id does not match n")
        if self.layout is not None and self.layout.key_bits != self.key_bits:
            raise ValueError("layout is for another key size")
        return self

    def modulus(self) -> int:
        return b64_to_int(self.n)


class EncryptedCounts(Message):
    """Device → shuffler: one secure-sum report, ``encode_ciphertexts`` of its ciphertexts, and
    its tag: ``make_tag`` of a fresh report id and the bytes of ``ct``, sealed to the analyzer's
    HPKE key (``key_id`` is the Paillier key's id, the tag carries the HPKE key's)."""

    key_id: int = Field(ge=0, le=255)
    ct: str = Field(max_length=4 * MAX_CIPHERTEXT_BYTES // 3 + 4)
    tag: EncryptedReport
    batch_size: int | None = Field(
        None, ge=1, le=MAX_BATCH, description="ddp-linucb: the batch length l its Skellam share is "
        "sized for; sblb with a growing schedule: the length its ε0 is sized for (the model's "
        "``batch_size``); the shuffler refuses it if l exceeds the task's next batch (issue 22)",
    )


class PaillierUpload(Message):
    """Device → shuffler (``POST /v1/tasks/{task}/encrypted-counts``): one or many secure-sum
    reports of one task, like ``ReportUpload`` for HPKE reports."""

    reports: list[EncryptedCounts] = Field(min_length=1, max_length=MAX_REPORTS_PER_UPLOAD)


class SumMember(Message):
    """One report of a batch sum, as the shuffler forwards it: the device's tag, unopened, and
    the digest (``ciphertext_digest``) of the ciphertext bytes the shuffler multiplied."""

    tag: EncryptedReport
    digest: Digest


class EncryptedBatchSum(Message):
    """Shuffler → analyzer: the product of ``count`` reports' ciphertexts and, per report, its
    tag and ciphertext digest (in the batch's shuffled order); no ciphertext of a report."""

    batch_id: HexId
    key_id: int = Field(ge=0, le=255)
    count: int = Field(ge=1, le=MAX_BATCH)
    ct: str = Field(max_length=4 * MAX_CIPHERTEXT_BYTES // 3 + 4)
    members: list[SumMember] = Field(min_length=1, max_length=MAX_BATCH)

    @model_validator(mode="after")
    def _one_member_per_report(self) -> EncryptedBatchSum:
        if len(self.members) != self.count:
            raise ValueError(f"{len(self.members)} members for a sum of {self.count} reports")
        return self


def paillier_config(n: int, task_layout: SlotLayout | None = None) -> PaillierConfig:
    """The published configuration of the Paillier key with modulus ``n`` (and a task's layout)."""
    n = int(n)
    return PaillierConfig(
        key_id=paillier_key_id(n), key_bits=n.bit_length(), n=int_to_b64(n),
        layout=PaillierLayout.of(task_layout) if task_layout is not None else None,
    )
