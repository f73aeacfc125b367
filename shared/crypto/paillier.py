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
- device: ``shared.crypto.slots.pack`` the per-report coordinate counts (0…m,
  ``BinaryRandomizer.counts``) into slots of one or a few plaintexts and
  ``PaillierEncryptor.encrypt`` them. The expensive part of E is
  r^n mod n² (a 2·|n|-bit modular exponentiation); it does not depend on the message, so the
  device precomputes a pool of r^n off the request path and an encryption is then one
  multiplication mod n².
- shuffler: ``homomorphic_sum`` multiplies the l ciphertexts of a batch per plaintext position and
  forwards only the product and the count l.
- analyzer: ``open_batch_sum`` = ``decrypt_sum`` + ``unpack`` with range checks, giving the batch
  counts (Z, U) that ``SBLB.ingest_statistic`` consumes.

Slot packing lives in ``shared.crypto.slots``.

What this does NOT protect against: a device may encrypt any in-range counts (there are no
zero-knowledge range proofs here), so one malicious device can bias a batch sum by up to m per
slot — the same power it has by lying to the randomizer. A malicious shuffler can add or drop
reports (Paillier is malleable); the analyzer only checks ranges and the count. Confidentiality of
individual reports relies on the shuffler not handing single ciphertexts to the analyzer.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import gmpy2
import numpy as np
from gmpy2 import mpz
from phe import paillier

from privbandit.shared.crypto.obfuscators import random_unit
from privbandit.shared.crypto.slots import (
    SlotLayout,
    SlotRangeError,
    ciphertext_width,
    pack,
    pack_signed,
    unpack,
    unpack_signed,
)
from privbandit.shared.protocol.messages import MAX_CIPHERTEXT_BYTES, b64decode

if TYPE_CHECKING:
    from privbandit.shared.protocol.paillier import PaillierConfig

DEFAULT_KEY_BITS = 2048
# Production keys are at least 2048 bits (≈112-bit security, NIST SP 800-57). Smaller keys are only
# accepted when a caller asks for them explicitly (tests), never by default.
MIN_KEY_BITS = 2048
MIN_TEST_KEY_BITS = 512
MAX_KEY_BITS = 8192
SCHEME: Final = "paillier-g=n+1"  # its type is the literal the wire message declares


class CiphertextError(ValueError):
    """A ciphertext is malformed: wrong length, not in Z*_{n²}, or not base64."""


class PaillierKeyError(Exception):
    """The persisted Paillier key is missing, inconsistent or too small."""


def int_to_b64(x: int) -> str:
    return base64.urlsafe_b64encode(x.to_bytes((x.bit_length() + 7) // 8, "big")).decode("ascii")


def b64_to_int(text: str) -> int:
    # protocol.b64decode checks the alphabet first (the stdlib decoder silently skips junk).
    return int.from_bytes(b64decode(text), "big")


def paillier_key_id(n: int) -> int:
    """Key id derived from the modulus (like the HPKE key id): first byte of SHA-256 over a
    domain-separated encoding of n, so it changes exactly when the key does."""
    raw = int(n).to_bytes((int(n).bit_length() + 7) // 8, "big")
    return hashlib.sha256(b"privbandit/paillier|" + raw).digest()[0]


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
        return self.add([self.obfuscator() for _ in range(k)])

    def add(self, fresh: Sequence[int]) -> int:
        """Add obfuscators r^n mod n² computed elsewhere (``shared.crypto.obfuscators``, under
        this modulus, each fresh) to the pool; returns the new pool size."""
        values = [mpz(v) for v in fresh]
        with self._lock:
            self._pool.extend(values)
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

    def encrypt_report(
        self, values: Sequence[int] | np.ndarray, lay: SlotLayout, *, fallback: bool = True
    ) -> list[int]:
        """The ciphertexts of one report under a task's layout: its counts (``pack``), or, for a
        signed layout (offset O > 0, ``ddp-linucb``), its signed values as digits v + O
        (``pack_signed``; ``SlotRangeError`` for a value beyond ±O)."""
        if lay.key_bits != self.key_bits:
            raise ValueError(f"layout is for {lay.key_bits}-bit keys, key has {self.key_bits}")
        if lay.offset:
            return self.encrypt(pack_signed(values, lay), fallback=fallback)
        return self.encrypt_counts(values, lay.batch_size, lay.m, fallback=fallback)

    def wait_wanted(self, timeout: float) -> None:
        """Block until an encryption took randomness from the pool (or ``timeout``)."""
        self._wanted.wait(timeout=timeout)

    def clear_wanted(self) -> None:
        self._wanted.clear()

    def wake(self) -> None:
        """Wake a refiller waiting in ``wait_wanted`` (to stop it)."""
        self._wanted.set()


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
    bound: float | None = None,
) -> np.ndarray:
    """The batch counts (Z, U) of ``n_reports`` reports from their encrypted sum, or
    ``SlotRangeError`` / ``CiphertextError``. Pure: call the policy's ``ingest_statistic`` only
    with its result, so a refused batch leaves the analyzer's state untouched.

    A signed layout (``ddp-linucb``) gives the signed coordinate sums instead (``unpack_signed``:
    the slot sums minus n_reports·O), refused with ``SumRangeError`` beyond ±``bound`` (required
    then: the largest |sum| an honest batch of n_reports reaches,
    ``SkellamRandomizer.sum_bound``)."""
    key_bits = int(private_key.public_key.n).bit_length()
    if key_bits != task_layout.key_bits:
        raise SlotRangeError(f"layout is for {task_layout.key_bits}-bit keys, key has {key_bits}")
    if len(ciphertexts) != task_layout.plaintexts:
        raise SlotRangeError(
            f"expected {task_layout.plaintexts} ciphertexts, got {len(ciphertexts)}"
        )
    plain = decrypt_sum(private_key, ciphertexts)
    if task_layout.offset:
        if bound is None:
            raise ValueError("a signed layout's sums need a bound")
        return unpack_signed(plain, task_layout, bound, n_reports=n_reports)
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
    check_key_bits(key_bits, allow_small)
    return paillier.generate_paillier_keypair(n_length=key_bits)


def check_key_bits(key_bits: int, allow_small: bool) -> None:
    lo = MIN_TEST_KEY_BITS if allow_small else MIN_KEY_BITS
    if not lo <= key_bits <= MAX_KEY_BITS or key_bits % 2:
        raise PaillierKeyError(f"Paillier keys must have an even {lo}..{MAX_KEY_BITS} bits")


def key_to_json(private_key: paillier.PaillierPrivateKey) -> dict[str, Any]:
    n = int(private_key.public_key.n)
    return {
        "scheme": SCHEME,
        "key_bits": n.bit_length(),
        "n": format(n, "x"),
        "p": format(int(private_key.p), "x"),
        "q": format(int(private_key.q), "x"),
    }


def key_numbers(
    data: dict[str, Any], allow_small: bool, check_primes: bool = True
) -> tuple[int, int, int]:
    """(n, p, q) of a key file's JSON, checked: its scheme, its size, n = p q with p ≠ q, and
    (``check_primes``: 40 Miller–Rabin rounds each, ~0.1 s for a 2048-bit key) that p and q are
    prime. A bit flipped anywhere breaks n = p q or the size already; the primality test catches
    a key that was never a Paillier key."""
    try:
        if data["scheme"] != SCHEME:
            raise PaillierKeyError(f"unknown scheme {data['scheme']!r}")
        n, p, q = (int(data[k], 16) for k in ("n", "p", "q"))
        key_bits = int(data["key_bits"])
    except (KeyError, TypeError, ValueError) as exc:
        raise PaillierKeyError(f"malformed Paillier key file: {exc}") from exc
    check_key_bits(key_bits, allow_small)
    if n.bit_length() != key_bits or p * q != n or p == q:
        raise PaillierKeyError("Paillier key file is inconsistent (n ≠ p q or wrong size)")
    if check_primes and not (gmpy2.is_prime(p, 40) and gmpy2.is_prime(q, 40)):
        raise PaillierKeyError("Paillier key file: p or q is not prime")
    return n, p, q


def key_from_json(data: dict[str, Any], allow_small: bool) -> paillier.PaillierPrivateKey:
    """The private key a key file's JSON holds, its numbers checked (``key_numbers``)."""
    n, p, q = key_numbers(data, allow_small)
    return paillier.PaillierPrivateKey(paillier.PaillierPublicKey(n), p, q)
