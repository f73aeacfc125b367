"""Cryptographic core of the ``secure-sum`` shuffle transport (spec §3): Paillier encryption of
slot-packed randomized counts, homomorphic batch summation, and checked decryption.

Paillier (Paillier 1999), with the usual choice g = n + 1. For n = p q (p, q primes of equal size)
a message M ∈ Z_n is encrypted with a fresh r drawn uniformly from Z*_n as

    E(M) = g^M · r^n  mod n²,        and since g^M = (1 + n)^M = 1 + M n  (mod n²),
    E(M) = (1 + M n) · r^n  mod n².

The scheme is additively homomorphic: E(a) · E(b) = (1 + (a + b) n) (r_a r_b)^n = E(a + b mod n),
so the product of the l ciphertexts of a batch decrypts to the sum of their plaintexts. Only the
analyzer holds λ = lcm(p − 1, q − 1) (``phe`` decrypts with CRT over p² and q²).

Roles:
- device: ``pack`` the per-report coordinate counts (0…m, ``BinaryRandomizer.counts``) into slots
  of one or a few plaintexts and ``PaillierEncryptor.encrypt`` them. The expensive part of E is
  r^n mod n² (a 2·|n|-bit modular exponentiation); it does not depend on the message, so the
  device precomputes a pool of r^n off the request path and an encryption is then one
  multiplication mod n².
- shuffler: ``homomorphic_sum`` multiplies the l ciphertexts of a batch per plaintext position and
  forwards only the product and the count l.
- analyzer: ``open_batch_sum`` = ``decrypt_sum`` + ``unpack`` with range checks, giving the batch
  counts (Z, U) that ``SBLB.ingest_statistic`` consumes.

Slot packing. With counts in 0..m and at most l reports per batch, every slot of a batch sum lies in
0..l·m, which needs ``slot_bits = ⌈log2(l·m + 1)⌉`` bits. Slot i of a plaintext sits at bits
[i·s, (i+1)·s). The slots of one plaintext end at least ``GUARD_BITS + 1`` bits below the top
bit of n, so an honest batch sum is < 2^(|n|−1) ≤ n and never wraps modulo n; bits set above the
last slot or a slot above l·m therefore prove a malformed batch (an out-of-range or negative
plaintext from some device, too many reports, or a tampered sum), and ``unpack`` refuses it.

What this does NOT protect against: a device may encrypt any in-range counts (there are no
zero-knowledge range proofs here), so one malicious device can bias a batch sum by up to m per
slot — the same power it has by lying to the randomizer. A malicious shuffler can add or drop
reports (Paillier is malleable); the analyzer only checks ranges and the count. Confidentiality of
individual reports relies on the shuffler not handing single ciphertexts to the analyzer.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import secrets
import stat
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import gmpy2
import numpy as np
from gmpy2 import mpz
from phe import paillier
from pydantic import Field, field_validator, model_validator

from shared.keyfile import create_private_file
from shared.protocol import (
    MAX_BATCH,
    MAX_CIPHERTEXT_BYTES,
    MAX_REPORTS_PER_UPLOAD,
    HexId,
    Message,
    b64decode,
)

log = logging.getLogger(__name__)

DEFAULT_KEY_BITS = 2048
# Production keys are at least 2048 bits (≈112-bit security, NIST SP 800-57). Smaller keys are only
# accepted when a caller asks for them explicitly (tests), never by default.
MIN_KEY_BITS = 2048
MIN_TEST_KEY_BITS = 512
MAX_KEY_BITS = 8192
# Free bits between the last slot and bit |n| − 1 (n ≥ 2^(|n|−1)). One bit would suffice for
# correctness; a few more make wrapped (negative) plaintexts n − k land in bits no slot uses.
GUARD_BITS = 8
KEY_FILE = "paillier.json"
SCHEME = "paillier-g=n+1"


class SlotRangeError(ValueError):
    """A packed plaintext (or batch sum) has a slot outside its range or bits above the last slot:
    the batch overflowed or some plaintext was out of range; refuse it."""


class CiphertextError(ValueError):
    """A ciphertext is malformed: wrong length, not in Z*_{n²}, or not base64."""


class PaillierKeyError(Exception):
    """The persisted Paillier key is missing, inconsistent or too small."""


# ---------------------------------------------------------------------------------------------
# Slot layout and packing (one function pair, used by device and analyzer)


def slot_bits(batch_size: int, m: int) -> int:
    """Bits per slot, s = ⌈log2(l·m + 1)⌉ = bit length of l·m: the largest batch sum of one
    coordinate, l reports each counting up to m, must fit in a slot so it never carries into the
    next one."""
    if batch_size < 1 or m < 1:
        raise ValueError("need batch_size >= 1 and m >= 1")
    return (batch_size * m).bit_length()


def slots_per_plaintext(key_bits: int, slot_bits: int) -> int:
    """How many s-bit slots fit below 2^(key_bits − 1 − GUARD_BITS) ≤ n / 2^GUARD_BITS."""
    if slot_bits < 1:
        raise ValueError("slot_bits must be >= 1")
    capacity = key_bits - 1 - GUARD_BITS
    k = capacity // slot_bits
    if k < 1:
        raise ValueError(f"a {slot_bits}-bit slot does not fit in a {key_bits}-bit plaintext")
    return k


def ciphertext_width(key_bits: int) -> int:
    """Bytes of one ciphertext on the wire: c < n² < 2^(2·key_bits), fixed width big-endian."""
    return (2 * key_bits + 7) // 8


@dataclass(frozen=True)
class SlotLayout:
    """How the c counts of one report are packed: c slots of ``slot_bits`` bits,
    ``slots_per_plaintext`` per plaintext, ``plaintexts`` = ⌈c / slots_per_plaintext⌉."""

    c: int
    batch_size: int
    m: int
    key_bits: int
    slot_bits: int
    slots_per_plaintext: int
    plaintexts: int

    @property
    def max_slot(self) -> int:
        """l·m: the largest value a slot of an honest batch sum can hold."""
        return self.batch_size * self.m

    @property
    def ciphertext_bytes(self) -> int:
        """Wire bytes of one encrypted report (all its ciphertexts)."""
        return self.plaintexts * ciphertext_width(self.key_bits)

    def slots_in(self, j: int) -> int:
        """Number of slots used in plaintext j (the last one may be partly empty)."""
        return min(self.slots_per_plaintext, self.c - j * self.slots_per_plaintext)

    def message(self) -> SecureSumLayout:
        return SecureSumLayout(
            c=self.c, m=self.m, batch_size=self.batch_size, key_bits=self.key_bits,
            slot_bits=self.slot_bits, slots_per_plaintext=self.slots_per_plaintext,
            plaintexts=self.plaintexts, ciphertext_bytes=self.ciphertext_bytes,
        )


@lru_cache(maxsize=256)
def layout(c: int, batch_size: int, m: int, key_bits: int) -> SlotLayout:
    """The slot layout of a task (c = d(d+3)/2 coordinates, batch size l, m bits per coordinate)
    under a key of ``key_bits`` bits. Deterministic: device and analyzer derive the same one."""
    if c < 1:
        raise ValueError("need c >= 1")
    s = slot_bits(batch_size, m)
    k = slots_per_plaintext(key_bits, s)
    return SlotLayout(
        c=c, batch_size=batch_size, m=m, key_bits=key_bits, slot_bits=s,
        slots_per_plaintext=k, plaintexts=-(-c // k),
    )


def pack(counts: Sequence[int] | np.ndarray, batch_size: int, m: int, key_bits: int) -> list[int]:
    """Pack one report's counts (each in 0..m) into plaintexts: plaintext j holds
    Σ_i counts[j·k + i] · 2^(i·s) for i < k (k slots per plaintext, s bits per slot)."""
    arr = np.asarray(counts)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"counts must be a non-empty vector, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"counts must be integers, got dtype {arr.dtype}")
    if (arr < 0).any() or (arr > m).any():
        raise ValueError(f"every count must lie in 0..{m}")
    lay = layout(arr.size, batch_size, m, key_bits)
    s, k = lay.slot_bits, lay.slots_per_plaintext
    values = [int(v) for v in arr]
    out = []
    for j in range(lay.plaintexts):
        acc = 0
        # Horner from the highest slot down: acc = (...(v_{k-1} 2^s + v_{k-2}) 2^s ...) + v_0.
        for v in reversed(values[j * k : (j + 1) * k]):
            acc = (acc << s) | v
        out.append(acc)
    return out


def unpack(
    plaintexts: Sequence[int],
    c: int,
    batch_size: int,
    m: int,
    key_bits: int,
    *,
    n_reports: int | None = None,
) -> np.ndarray:
    """Inverse of ``pack`` for a sum of ``n_reports`` packed reports (default: the task's batch
    size l; 1 for a single report): the c slot values as int64.

    Raises ``SlotRangeError`` unless every slot lies in [0, n_reports·m] and no bit is set above
    the last slot of each plaintext. The layout (slot width) is always the task's, derived from
    ``batch_size``; ``n_reports`` may only be smaller, since more than l reports could carry from
    one slot into the next undetectably."""
    lay = layout(c, batch_size, m, key_bits)
    count = batch_size if n_reports is None else n_reports
    if not 1 <= count <= batch_size:
        raise SlotRangeError(f"a batch sum covers 1..{batch_size} reports, not {count}")
    if len(plaintexts) != lay.plaintexts:
        raise SlotRangeError(f"expected {lay.plaintexts} plaintexts, got {len(plaintexts)}")
    bound = count * m
    s = lay.slot_bits
    mask = (1 << s) - 1
    out = np.empty(c, dtype=np.int64)
    for j, p in enumerate(plaintexts):
        p = int(p)
        used = lay.slots_in(j)
        if p < 0 or p >> (used * s):
            raise SlotRangeError(f"plaintext {j} has bits set above its last slot")
        for i in range(used):
            v = (p >> (i * s)) & mask
            if v > bound:
                raise SlotRangeError(
                    f"slot {j * lay.slots_per_plaintext + i} holds {v} > {count}·{m} = {bound}"
                )
            out[j * lay.slots_per_plaintext + i] = v
    return out


# ---------------------------------------------------------------------------------------------
# Public configuration and wire messages


class SecureSumLayout(Message):
    """A task's slot layout, published so a device can check it derives the same one."""

    c: int = Field(ge=1)
    m: int = Field(ge=1)
    batch_size: int = Field(ge=1, le=MAX_BATCH)
    key_bits: int = Field(ge=MIN_TEST_KEY_BITS, le=MAX_KEY_BITS)
    slot_bits: int = Field(ge=1)
    slots_per_plaintext: int = Field(ge=1)
    plaintexts: int = Field(ge=1)
    ciphertext_bytes: int = Field(ge=1, le=MAX_CIPHERTEXT_BYTES)

    @model_validator(mode="after")
    def _consistent(self) -> SecureSumLayout:
        want = layout(self.c, self.batch_size, self.m, self.key_bits)
        fields = ("slot_bits", "slots_per_plaintext", "plaintexts", "ciphertext_bytes")
        if any(getattr(self, f) != getattr(want, f) for f in fields):
            raise ValueError("layout fields are not the ones derived from (c, l, m, key_bits)")
        return self


def _int_to_b64(x: int) -> str:
    return base64.urlsafe_b64encode(x.to_bytes((x.bit_length() + 7) // 8, "big")).decode("ascii")


def _b64_to_int(text: str) -> int:
    # protocol.b64decode checks the alphabet first (the stdlib decoder silently skips junk).
    return int.from_bytes(b64decode(text), "big")


class PaillierConfig(Message):
    """The analyzer's Paillier public key (g = n + 1), published next to its HPKE config.

    ``n`` is the modulus as URL-safe base64 of its big-endian bytes. ``layout`` is set when the
    config is served for one task (the slot layout depends on the task's l, m and d)."""

    key_id: int = Field(ge=0, le=255)
    scheme: Literal["paillier-g=n+1"] = SCHEME
    key_bits: int = Field(ge=MIN_TEST_KEY_BITS, le=MAX_KEY_BITS)
    n: str = Field(max_length=4 * (MAX_KEY_BITS // 8) // 3 + 4)
    layout: SecureSumLayout | None = None

    @field_validator("n")
    @classmethod
    def _n_is_base64(cls, text: str) -> str:
        n = _b64_to_int(text)
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
        return _b64_to_int(self.n)


class EncryptedCounts(Message):
    """Device → shuffler: one secure-sum report, ``encode_ciphertexts`` of its ciphertexts."""

    key_id: int = Field(ge=0, le=255)
    ct: str = Field(max_length=4 * MAX_CIPHERTEXT_BYTES // 3 + 4)


class SecureSumUpload(Message):
    """Device → shuffler (``POST /v1/tasks/{task}/encrypted-counts``): one or many secure-sum
    reports of one task, like ``ReportUpload`` for HPKE reports."""

    reports: list[EncryptedCounts] = Field(min_length=1, max_length=MAX_REPORTS_PER_UPLOAD)


class EncryptedBatchSum(Message):
    """Shuffler → analyzer: the product of ``count`` reports' ciphertexts, nothing else."""

    batch_id: HexId
    key_id: int = Field(ge=0, le=255)
    count: int = Field(ge=1, le=MAX_BATCH)
    ct: str = Field(max_length=4 * MAX_CIPHERTEXT_BYTES // 3 + 4)


def paillier_key_id(n: int) -> int:
    """Key id derived from the modulus (like the HPKE key id): first byte of SHA-256 over a
    domain-separated encoding of n, so it changes exactly when the key does."""
    raw = int(n).to_bytes((int(n).bit_length() + 7) // 8, "big")
    return hashlib.sha256(b"privbandit/paillier|" + raw).digest()[0]


def paillier_config(
    public_key: paillier.PaillierPublicKey, task_layout: SlotLayout | None = None
) -> PaillierConfig:
    n = int(public_key.n)
    return PaillierConfig(
        key_id=paillier_key_id(n), key_bits=n.bit_length(), n=_int_to_b64(n),
        layout=task_layout.message() if task_layout is not None else None,
    )


# ---------------------------------------------------------------------------------------------
# Ciphertext wire form


def check_ciphertext(c: int, n: int, n_squared: int | None = None) -> None:
    """Raise ``CiphertextError`` unless c ∈ Z*_{n²}: 0 < c < n² and gcd(c, n) = 1. A c sharing a
    factor with n is not a Paillier ciphertext; multiplied into a batch it would make the whole
    sum undecryptable (and it would reveal a factor of n)."""
    n2 = n * n if n_squared is None else n_squared
    if not 0 < c < n2:
        raise CiphertextError("ciphertext out of range (0, n²)")
    if gmpy2.gcd(c, n) != 1:
        raise CiphertextError("ciphertext is not a unit modulo n²")


def encode_ciphertexts(ciphertexts: Sequence[int], key_bits: int) -> str:
    """URL-safe base64 of the concatenated fixed-width (2·key_bits/8 bytes) big-endian
    ciphertexts; the fixed width keeps every report of a task the same length."""
    width = ciphertext_width(key_bits)
    parts = []
    for c in ciphertexts:
        c = int(c)
        if c <= 0:
            raise CiphertextError("ciphertexts are positive")
        try:
            parts.append(c.to_bytes(width, "big"))
        except OverflowError as exc:
            raise CiphertextError(f"ciphertext longer than {width} bytes") from exc
    if not parts:
        raise CiphertextError("no ciphertexts")
    return base64.urlsafe_b64encode(b"".join(parts)).decode("ascii")


def decode_ciphertexts(text: str, n: int, plaintexts: int) -> list[int]:
    """Inverse of ``encode_ciphertexts`` for a key with modulus n, validating the length
    (``plaintexts`` ciphertexts of fixed width) and that each ciphertext is in Z*_{n²}."""
    n = int(n)
    width = ciphertext_width(n.bit_length())
    if len(text) > 4 * MAX_CIPHERTEXT_BYTES // 3 + 4:
        raise CiphertextError("ciphertext string too long")
    try:
        raw = b64decode(text)
    except ValueError as exc:  # binascii.Error is a ValueError
        raise CiphertextError(f"not URL-safe base64: {exc}") from exc
    if len(raw) != plaintexts * width:
        raise CiphertextError(f"expected {plaintexts}×{width} bytes, got {len(raw)}")
    n2 = n * n
    out = []
    for j in range(plaintexts):
        c = int.from_bytes(raw[j * width : (j + 1) * width], "big")
        check_ciphertext(c, n, n2)
        out.append(c)
    return out


# ---------------------------------------------------------------------------------------------
# Device: encryption with precomputed randomness


def random_unit(n: int) -> int:
    """r uniform in Z*_n from the OS CSPRNG (rejection: r ∈ [1, n), retry while gcd(r, n) ≠ 1,
    which for an RSA modulus happens with probability ≈ 2/√n)."""
    while True:
        r = secrets.randbelow(n - 1) + 1
        if gmpy2.gcd(r, n) == 1:
            return r


class PoolEmpty(RuntimeError):
    """No precomputed randomness left and the caller refused the slow path."""


class PaillierEncryptor:
    """Device-side Paillier encryption E(M) = (1 + M n) · r^n mod n².

    The obfuscator r^n mod n² does not depend on M, so it is precomputed into a pool off the
    request path (``refill`` or ``start_refiller``). Each pool entry is used exactly once and never
    persisted: two ciphertexts with the same r would reveal the difference of their plaintexts
    (E(a)/E(b) = 1 + (a − b) n). When the pool is empty, ``encrypt`` falls back to computing r^n
    inline (``fallbacks`` counts how often) unless ``fallback=False``."""

    def __init__(self, n: int) -> None:
        if n < 3 or n % 2 == 0:
            raise ValueError("n must be an odd modulus")
        self.n = mpz(n)
        self.n_squared = self.n * self.n
        self.key_bits = int(n).bit_length()
        self._n_int = int(n)
        self._pool: deque[mpz] = deque()
        self._lock = threading.Lock()
        self._wanted = threading.Event()  # set when the pool dropped below a refiller's target
        self.fallbacks = 0

    @classmethod
    def from_config(cls, config: PaillierConfig) -> PaillierEncryptor:
        return cls(config.modulus())

    def obfuscator(self) -> mpz:
        """r^n mod n² for a fresh r ∈ Z*_n: the expensive part of an encryption."""
        return gmpy2.powmod(mpz(random_unit(self._n_int)), self.n, self.n_squared)

    def refill(self, k: int) -> int:
        """Compute k obfuscators and add them to the pool; returns the new pool size."""
        fresh = [self.obfuscator() for _ in range(k)]
        with self._lock:
            self._pool.extend(fresh)
            return len(self._pool)

    @property
    def pool_size(self) -> int:
        return len(self._pool)

    def _take(self, fallback: bool) -> mpz:
        with self._lock:
            rn = self._pool.popleft() if self._pool else None
        self._wanted.set()
        if rn is not None:
            return rn
        if not fallback:
            raise PoolEmpty("no precomputed Paillier randomness left")
        self.fallbacks += 1
        return self.obfuscator()

    def encrypt(self, plaintexts: Sequence[int], *, fallback: bool = True) -> list[int]:
        """Raw ciphertexts of the plaintexts (each 0 ≤ M < n): (1 + M n) · r^n mod n², one
        multiplication mod n² per plaintext when the pool has randomness."""
        out = []
        for p in plaintexts:
            p = int(p)
            if not 0 <= p < self._n_int:
                raise ValueError("plaintext must lie in [0, n)")
            # g^M = (1 + n)^M ≡ 1 + M n (mod n²): the binomial terms with n² vanish.
            gm = self.n * p + 1
            out.append(int(gm * self._take(fallback) % self.n_squared))
        return out

    def encrypt_counts(
        self, counts: Sequence[int] | np.ndarray, batch_size: int, m: int, *, fallback: bool = True
    ) -> list[int]:
        """``pack`` then ``encrypt``: the ciphertexts of one report's counts."""
        return self.encrypt(pack(counts, batch_size, m, self.key_bits), fallback=fallback)

    def start_refiller(self, target: int, chunk: int = 8) -> PoolRefiller:
        """Start a daemon thread keeping about ``target`` obfuscators in the pool."""
        refiller = PoolRefiller(self, target, chunk)
        refiller.start()
        return refiller


class PoolRefiller(threading.Thread):
    """Background thread that tops the encryptor's pool up to ``target``, ``chunk`` at a time.

    It runs gmpy2 with ``allow_release_gil`` (a thread-local context), so the exponentiations do
    not hold the interpreter lock while a request encrypts on another thread."""

    def __init__(self, encryptor: PaillierEncryptor, target: int, chunk: int = 8) -> None:
        super().__init__(name="paillier-refiller", daemon=True)
        if target < 1 or chunk < 1:
            raise ValueError("target and chunk must be >= 1")
        self.encryptor, self.target, self.chunk = encryptor, target, chunk
        self._stop_event = threading.Event()

    def run(self) -> None:
        enc = self.encryptor
        with gmpy2.context(allow_release_gil=True):
            while not self._stop_event.is_set():
                missing = self.target - enc.pool_size
                if missing > 0:
                    enc.refill(min(self.chunk, missing))
                    continue
                enc._wanted.clear()
                # Re-check after clearing so a take between the size check and clear() is seen.
                if enc.pool_size >= self.target:
                    enc._wanted.wait(timeout=1.0)

    def stop(self, timeout: float | None = 5.0) -> None:
        self._stop_event.set()
        self.encryptor._wanted.set()
        self.join(timeout)


# ---------------------------------------------------------------------------------------------
# Shuffler: homomorphic batch sum


def _product_mod(values: list[mpz], modulus: mpz) -> mpz:
    """Π values mod ``modulus`` by a balanced product tree (pairs per level, reduced each time):
    the same l − 1 multiplications as a running product, but in list comprehensions, so the
    interpreter's share of the cost is small."""
    while len(values) > 1:
        nxt = [values[i] * values[i + 1] % modulus for i in range(0, len(values) - 1, 2)]
        if len(values) % 2:
            nxt.append(values[-1])
        values = nxt
    return values[0] % modulus


def homomorphic_sum(ciphertexts: Sequence[Sequence[int]], n_squared: int) -> list[int]:
    """E(Σ M) per plaintext position: Π_reports c_{report, j} mod n² (E(a)E(b) = E(a + b)).

    ``ciphertexts`` holds one list per report, all of the same length (the layout's number of
    plaintexts). The inputs should have passed ``check_ciphertext`` (``decode_ciphertexts``)."""
    if not ciphertexts:
        raise ValueError("a batch sum needs at least one report")
    width = len(ciphertexts[0])
    if width == 0 or any(len(cts) != width for cts in ciphertexts):
        raise ValueError("every report must carry the same, non-zero number of ciphertexts")
    mod = mpz(n_squared)
    return [
        int(_product_mod([mpz(cts[j]) for cts in ciphertexts], mod)) for j in range(width)
    ]


# ---------------------------------------------------------------------------------------------
# Analyzer: decryption and checked unpacking


def decrypt_sum(private_key: paillier.PaillierPrivateKey, ciphertexts: Sequence[int]) -> list[int]:
    """D(c) = L(c^λ mod n²) · μ mod n with L(u) = (u − 1)/n (``phe``'s CRT form), per ciphertext,
    after checking each lies in Z*_{n²}."""
    n = int(private_key.public_key.n)
    n2 = n * n
    out = []
    for c in ciphertexts:
        c = int(c)
        check_ciphertext(c, n, n2)
        out.append(int(private_key.raw_decrypt(c)))
    return out


def open_batch_sum(
    private_key: paillier.PaillierPrivateKey,
    ciphertexts: Sequence[int],
    task_layout: SlotLayout,
    n_reports: int,
) -> np.ndarray:
    """The batch counts (Z, U) of ``n_reports`` reports from their encrypted sum, or
    ``SlotRangeError`` / ``CiphertextError``. Pure: call the policy's ``ingest_statistic`` only
    with its result, so a refused batch leaves the analyzer's state untouched."""
    key_bits = int(private_key.public_key.n).bit_length()
    if key_bits != task_layout.key_bits:
        raise SlotRangeError(f"layout is for {task_layout.key_bits}-bit keys, key has {key_bits}")
    if len(ciphertexts) != task_layout.plaintexts:
        raise SlotRangeError(
            f"expected {task_layout.plaintexts} ciphertexts, got {len(ciphertexts)}"
        )
    plain = decrypt_sum(private_key, ciphertexts)
    return unpack(
        plain, task_layout.c, task_layout.batch_size, task_layout.m, key_bits, n_reports=n_reports
    )


# ---------------------------------------------------------------------------------------------
# Key generation and persistence


def generate_keypair(
    key_bits: int = DEFAULT_KEY_BITS, *, allow_small: bool = False
) -> tuple[paillier.PaillierPublicKey, paillier.PaillierPrivateKey]:
    """A fresh key pair from ``phe`` (primes from ``random.SystemRandom``, i.e. the OS CSPRNG,
    and gmpy2's ``next_prime``); n has exactly ``key_bits`` bits."""
    _check_key_bits(key_bits, allow_small)
    return paillier.generate_paillier_keypair(n_length=key_bits)


def _check_key_bits(key_bits: int, allow_small: bool) -> None:
    lo = MIN_TEST_KEY_BITS if allow_small else MIN_KEY_BITS
    if not lo <= key_bits <= MAX_KEY_BITS or key_bits % 2:
        raise PaillierKeyError(f"Paillier keys must have an even {lo}..{MAX_KEY_BITS} bits")


def _key_to_json(private_key: paillier.PaillierPrivateKey) -> dict[str, Any]:
    n = int(private_key.public_key.n)
    return {
        "scheme": SCHEME,
        "key_bits": n.bit_length(),
        "n": format(n, "x"),
        "p": format(int(private_key.p), "x"),
        "q": format(int(private_key.q), "x"),
    }


def _key_from_json(data: dict[str, Any], allow_small: bool) -> paillier.PaillierPrivateKey:
    try:
        if data["scheme"] != SCHEME:
            raise PaillierKeyError(f"unknown scheme {data['scheme']!r}")
        n, p, q = (int(data[k], 16) for k in ("n", "p", "q"))
        key_bits = int(data["key_bits"])
    except (KeyError, TypeError, ValueError) as exc:
        raise PaillierKeyError(f"malformed Paillier key file: {exc}") from exc
    _check_key_bits(key_bits, allow_small)
    if n.bit_length() != key_bits or p * q != n or p == q:
        raise PaillierKeyError("Paillier key file is inconsistent (n ≠ p q or wrong size)")
    if not (gmpy2.is_prime(p, 40) and gmpy2.is_prime(q, 40)):
        raise PaillierKeyError("Paillier key file: p or q is not prime")
    return paillier.PaillierPrivateKey(paillier.PaillierPublicKey(n), p, q)


class PaillierKeyStore:
    """The analyzer's Paillier key pair, created on first start and persisted as JSON (mode 0600)
    next to the HPKE key (same directory, same create-once protocol as ``shared.crypto.KeyStore``).

    ``key_bits`` is only used when creating the key; a stored key is loaded as it is (and refused
    if smaller than 2048 bits unless ``allow_small``, for tests)."""

    def __init__(
        self, directory: Path | str, key_bits: int = DEFAULT_KEY_BITS, *, allow_small: bool = False
    ) -> None:
        _check_key_bits(key_bits, allow_small)
        self.directory = Path(directory)
        self.path = self.directory / KEY_FILE
        self.key_bits_requested = key_bits
        self.allow_small = allow_small
        self.private_key = self._load_or_create()
        self.public_key: paillier.PaillierPublicKey = self.private_key.public_key
        self.n = int(self.public_key.n)
        self.key_bits = self.n.bit_length()
        self.key_id = paillier_key_id(self.n)

    def _load_or_create(self) -> paillier.PaillierPrivateKey:
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            self._create()
        mode = stat.S_IMODE(self.path.stat().st_mode)
        if mode & 0o077:
            # A key readable by others is a misconfiguration; tighten it rather than refuse.
            log.warning("Paillier key %s had mode %o; setting 0600", self.path, mode)
            os.chmod(self.path, 0o600)
        try:
            data = json.loads(self.path.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise PaillierKeyError(f"cannot read {self.path}: {exc}") from exc
        if not isinstance(data, dict):
            raise PaillierKeyError(f"{self.path} does not hold a Paillier key")
        return _key_from_json(data, self.allow_small)

    def _create(self) -> None:
        _, private_key = generate_keypair(self.key_bits_requested, allow_small=self.allow_small)
        body = json.dumps(_key_to_json(private_key), indent=1).encode("utf-8")
        create_private_file(self.path, body)

    def layout(self, c: int, batch_size: int, m: int) -> SlotLayout:
        return layout(c, batch_size, m, self.key_bits)

    def paillier_config(self, task_layout: SlotLayout | None = None) -> PaillierConfig:
        return paillier_config(self.public_key, task_layout)

    def open_batch_sum(
        self, ciphertexts: Sequence[int], task_layout: SlotLayout, n_reports: int
    ) -> np.ndarray:
        """``open_batch_sum`` with this store's key."""
        return open_batch_sum(self.private_key, ciphertexts, task_layout, n_reports)
