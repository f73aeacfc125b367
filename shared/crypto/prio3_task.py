"""The ``prio3`` transport's cryptography for one task (docs/prio3.md, issue 23): which Prio3
instance a secure-sum task's reports are proved valid under, how a measurement is encoded for it,
and the three secrets around it.

**Measurement and validity predicate** (``TaskVdaf``). A report is c = d(d+3)/2 integers:

- ``sblb``/``sblb-fixed``: the 0/1 randomizer's counts, each in [0, m];
- ``ddp-linucb`` with the noise added by the aggregators (the default, issue 40): the rounded
  statistics, entry i in its honest range [lo_i, hi_i] (``randomizers.skellam.entry_ranges``),
  encoded as v_i − lo_i ∈ [0, hi_i − lo_i]: ``SumVecRanges`` (one maximum per entry, a private
  codepoint), so a report can move each coordinate by at most what an honest one can;
- ``ddp-linucb`` with device noise shares (``noise = "devices"``): the rounded statistics plus
  the Skellam share, each v in [−O, O] (O: the randomizer's packing offset — clip-and-round range
  plus the Skellam tail bound, the same O the Paillier slot layout uses), encoded as v + O.

The others are Prio3SumVec(length c, max M, chunk ⌈√(c·bitlen(M))⌋) over Field128 (draft-irtf-
cfrg-vdaf-20 §7.4.3, registered codepoint 3): valid iff every entry is in [0, M]. The aggregate
of n valid reports decodes to Σ x_i; for ddp the analyzer subtracts n·O_i per coordinate.

**Aggregator noise** (``noise_variance`` > 0): each aggregator adds Sk(μ_a) per coordinate to its
aggregate share, as a field element (N mod p), before the shares are combined; the unsharded
sum is then decoded as a signed integer (|Σ| stays far below p/2 ≈ 1.7·10³⁸).

**The helper share** (``seal_helper``/``open_helper``) is HPKE-sealed to the analyzer (purpose
``prio3-helper`` in the HPKE info, so it can be opened as nothing else) with plaintext
nonce ‖ SHA-256(public share) ‖ helper share: the analyzer refuses it unless it was made for
this very nonce and public share, so a helper share replayed under another nonce, or paired with
another report's public share, is refused before verification.

**The verification key** (``verify_key``) of a task is HMAC-SHA256(shuffler token,
"privbandit/prio3-verify-key|" ‖ task): a secret both aggregators already hold and no device
does (docs/prio3.md asked for a key from the OS CSPRNG; derived from the link secret, itself from
the CSPRNG, it needs no key file, no distribution and no cache — a device that learned it could
post batches to the analyzer anyway).

**The continuation** (``seal_continuation``/``open_continuation``): what the analyzer learns in
the verification exchange of a batch — its own aggregate share over the reports it accepted and
the digest of their nonces — sealed with AES-256-GCM under a key derived from its HPKE private
key, bound to (task, batch id), and handed to the shuffler, which returns it with its own
aggregate share. The analyzer keeps no state between the two requests, and the shuffler can
neither read the helper's aggregate share (which with its own would give the batch sum) nor
change the accepted set.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import secrets
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from privbandit.shared.core.randomizers.base import SumEncoding
from privbandit.shared.core.randomizers.exact_poisson import ExactSkellam
from privbandit.shared.crypto.hpke import CryptoError, ciphertext_length, open_report, seal
from privbandit.shared.crypto.prio3.prio3 import (
    NONCE_SIZE,
    HelperShare,
    Prio3,
    chunk_length_for,
    prio3_sum_vec,
    prio3_sum_vec_ranges,
)
from privbandit.shared.protocol.messages import REPORT_ID_BYTES, EncryptedReport

HELPER_PURPOSE = "prio3-helper"
DIGEST_BYTES = 32
SEED_BYTES = 32
# The helper share: its seed and its joint-randomness blind (SumVec uses joint randomness).
HELPER_SHARE_BYTES = 2 * SEED_BYTES
# Nonce ‖ SHA-256(public share) ‖ helper share, sealed.
HELPER_PLAINTEXT_BYTES = NONCE_SIZE + DIGEST_BYTES + HELPER_SHARE_BYTES
# ``ciphertext_length`` counts a report id in front of a row; the nonce plays that part here.
HELPER_CIPHERTEXT_BYTES = ciphertext_length(HELPER_PLAINTEXT_BYTES - REPORT_ID_BYTES)
# Two joint-randomness parts (leader, helper).
PUBLIC_SHARE_BYTES = 2 * SEED_BYTES
VERIFY_KEY_BYTES = 32
_GCM_NONCE = 12

assert NONCE_SIZE == REPORT_ID_BYTES  # the Prio3 nonce is the report id the analyzer counts


@functools.lru_cache(maxsize=64)
def sum_vec(length: int, max_value: int) -> Prio3[Sequence[int], list[int]]:
    """Prio3SumVec(length, max_value) with the spec's recommended chunk length (cached: the
    FLP's set-up is shared by every report of a task)."""
    return prio3_sum_vec(length, max_value, chunk_length_for(length * max_value.bit_length()))


@functools.lru_cache(maxsize=64)
def sum_vec_ranges(max_values: tuple[int, ...]) -> Prio3[Sequence[int], list[int]]:
    """Prio3 over SumVecRanges (one maximum per entry), the chunk length as for SumVec."""
    bits = max(m.bit_length() for m in max_values)
    return prio3_sum_vec_ranges(max_values, chunk_length_for(len(max_values) * bits))


@functools.lru_cache(maxsize=16)
def _skellam(variance: float) -> ExactSkellam:
    return ExactSkellam(variance)


@dataclass(frozen=True)
class TaskVdaf:
    """A secure-sum task's Prio3 parameters, from its reports' ``SumEncoding``: c entries,
    each in [0, m] once the offset is added — or, with per-entry ranges, entry i in
    [0, maxima[i]] once offsets[i] is added (``SumVecRanges``); ``noise_variance``: each
    aggregator's Skellam noise per coordinate (module docstring)."""

    task: str
    encoding: SumEncoding

    @property
    def length(self) -> int:
        return self.encoding.c

    @property
    def noise_variance(self) -> float:
        return self.encoding.noise_variance

    @property
    def max_value(self) -> int:
        """The largest entry (per-entry ranges: the largest maximum)."""
        enc = self.encoding
        return max(enc.maxima) if enc.maxima is not None else enc.m

    @property
    def offset(self) -> int:
        """The offset of every entry (0 with per-entry ranges: ``entry_offsets`` has them)."""
        return self.encoding.offset if self.encoding.offsets is None else 0

    @property
    def vdaf(self) -> Prio3[Sequence[int], list[int]]:
        if self.encoding.maxima is not None:
            return sum_vec_ranges(self.encoding.maxima)
        return sum_vec(self.length, self.encoding.m)

    @property
    def entry_offsets(self) -> list[int]:
        enc = self.encoding
        return list(enc.offsets) if enc.offsets is not None else [enc.offset] * enc.c

    @property
    def entry_maxima(self) -> list[int]:
        enc = self.encoding
        return list(enc.maxima) if enc.maxima is not None else [enc.m] * enc.c

    def noise_sampler(self, randbits: Callable[[int], int] = secrets.randbits) -> ExactSkellam:
        """An aggregator's exact Sk(μ_a) sampler drawing from ``randbits`` (its tables built
        once per variance; ``ValueError`` for a task without noise)."""
        if not self.noise_variance > 0:
            raise ValueError(f"task {self.task!r}: the aggregators add no noise")
        return _skellam(self.noise_variance).with_bits(randbits)

    def noisy_agg_share(self, agg_share: Any, noise: Sequence[int]) -> Any:
        """An aggregate share with an aggregator's noise added, coordinate by coordinate, as
        field elements."""
        field = self.vdaf.field
        return field.add(agg_share, field.vec(list(noise)))

    @property
    def ctx(self) -> bytes:
        """The application context string of every Prio3 call: the task id."""
        return self.task.encode("ascii")

    @property
    def leader_share_bytes(self) -> int:
        """The encoded leader share: measurement and proof shares in full, and its blind."""
        v = self.vdaf
        return v.field.ENCODED_SIZE * (v.flp.MEAS_LEN + v.flp.PROOF_LEN * v.PROOFS) + SEED_BYTES

    @property
    def verifier_share_bytes(self) -> int:
        v = self.vdaf
        return v.field.ENCODED_SIZE * v.flp.VERIFIER_LEN * v.PROOFS + SEED_BYTES

    @property
    def agg_share_bytes(self) -> int:
        v = self.vdaf
        return v.field.ENCODED_SIZE * v.flp.OUTPUT_LEN

    def measurement(self, values: np.ndarray | Sequence[int]) -> list[int]:
        """The Prio3 measurement of one report's values: v + O, each in [0, max_value]
        (``ValueError`` otherwise: an honest device never produces one)."""
        flat = [int(v) for v in np.asarray(values).reshape(-1)]
        if len(flat) != self.length:
            raise ValueError(f"task {self.task!r}: {len(flat)} values, not {self.length}")
        out = [v + o for v, o in zip(flat, self.entry_offsets, strict=True)]
        for i, (x, o, m) in enumerate(zip(out, self.entry_offsets, self.entry_maxima,
                                          strict=True)):
            if not 0 <= x <= m:
                raise ValueError(f"task {self.task!r}: value {i} outside [{-o}, {m - o}]")
        return out

    def statistic(self, total: Sequence[int], count: int) -> np.ndarray:
        """The batch statistic from the unsharded Σ(v + O) (+ the aggregators' noise) of
        ``count`` reports: Σ v (+ noise), read as signed where noise was added."""
        p = self.vdaf.field.MODULUS
        signed = [int(x) - p if self.noise_variance > 0 and int(x) > p // 2 else int(x)
                  for x in total]
        return np.asarray([x - count * o for x, o in zip(signed, self.entry_offsets,
                                                          strict=True)], dtype=np.int64)


class VdafTask(Protocol):
    """What ``task_vdaf`` reads of a task (``shared.settings.TaskConfig``)."""

    @property
    def id(self) -> str: ...

    def sum_encoding(self) -> SumEncoding: ...


def task_vdaf(config: VdafTask) -> TaskVdaf:
    """The ``TaskVdaf`` of a secure-sum task: its randomizer's ``SumEncoding`` — the 0/1
    randomizer's c counts of 0..m (``sblb``), ``ddp-linucb``'s c signed values in ±O, or with
    the aggregators' noise its per-entry honest ranges."""
    return TaskVdaf(config.id, config.sum_encoding())


def public_share_digest(public_share: bytes) -> bytes:
    return hashlib.sha256(b"privbandit/prio3-public-share|" + public_share).digest()


def seal_helper(
    public_key: bytes | X25519PublicKey, key_id: int, task: str, nonce: bytes,
    public_share: bytes, helper_share: bytes,
) -> EncryptedReport:
    """The helper share of the report ``nonce`` sealed to the analyzer (module docstring)."""
    if len(nonce) != NONCE_SIZE or len(helper_share) != HELPER_SHARE_BYTES:
        raise ValueError("a nonce is 16 bytes, a helper share 64")
    plaintext = nonce + public_share_digest(public_share) + helper_share
    return seal(public_key, key_id, task, plaintext, HELPER_PURPOSE)


def open_helper(
    private_key: X25519PrivateKey, key_id: int, task: str, nonce: bytes, public_share: bytes,
    sealed: EncryptedReport,
) -> HelperShare:
    """The helper share sealed for this nonce and public share; ``CryptoError`` if it does not
    open, or was made for another nonce or public share."""
    plaintext = open_report(private_key, key_id, task, sealed, HELPER_PURPOSE)
    if len(plaintext) != HELPER_PLAINTEXT_BYTES:
        raise CryptoError(f"a sealed helper share holds {HELPER_PLAINTEXT_BYTES} bytes")
    if not hmac.compare_digest(plaintext[:NONCE_SIZE], nonce):
        raise CryptoError("the helper share was sealed for another nonce")
    digest = plaintext[NONCE_SIZE : NONCE_SIZE + DIGEST_BYTES]
    if not hmac.compare_digest(digest, public_share_digest(public_share)):
        raise CryptoError("the helper share was sealed with another public share")
    share = plaintext[NONCE_SIZE + DIGEST_BYTES :]
    return HelperShare(share[:SEED_BYTES], share[SEED_BYTES:])


def verify_key(shuffler_token: str, task: str) -> bytes:
    """The task's Prio3 verification key, known to the shuffler and the analyzer only."""
    if not shuffler_token:
        raise ValueError("the prio3 transport needs the shuffler token (no default)")
    return hmac.new(shuffler_token.encode("utf-8"),
                    b"privbandit/prio3-verify-key|" + task.encode("ascii"),
                    hashlib.sha256).digest()


def continuation_key(private_key: X25519PrivateKey) -> bytes:
    """The analyzer's key for its continuations (derived from its HPKE private key: no other
    party holds it, and it survives restarts with the key file)."""
    return hmac.new(private_key.private_bytes_raw(), b"privbandit/prio3-continuation",
                    hashlib.sha256).digest()


def nonces_digest(nonces: Sequence[bytes]) -> bytes:
    """SHA-256 over the accepted nonces, in order."""
    h = hashlib.sha256(b"privbandit/prio3-accepted|")
    for n in nonces:
        h.update(n)
    return h.digest()


def _aad(task: str, batch_id: str) -> bytes:
    return f"privbandit/prio3-continuation|{task}|{batch_id}".encode("ascii")


@dataclass(frozen=True)
class Continuation:
    """What a continuation holds: the batch length, how many reports were refused, the digest
    of the accepted nonces and the analyzer's aggregate share over them."""

    count: int
    refused: int
    accepted_digest: bytes
    agg_share: bytes


def seal_continuation(key: bytes, task: str, batch_id: str, c: Continuation) -> bytes:
    nonce = os.urandom(_GCM_NONCE)
    plaintext = struct.pack(">II", c.count, c.refused) + c.accepted_digest + c.agg_share
    return nonce + AESGCM(key).encrypt(nonce, plaintext, _aad(task, batch_id))


def open_continuation(key: bytes, task: str, batch_id: str, token: bytes) -> Continuation:
    """``CryptoError`` unless ``token`` is a continuation this analyzer sealed for this task and
    batch id."""
    if len(token) < _GCM_NONCE + 16 + 8 + DIGEST_BYTES:
        raise CryptoError("continuation too short")
    try:
        plaintext = AESGCM(key).decrypt(token[:_GCM_NONCE], token[_GCM_NONCE:],
                                        _aad(task, batch_id))
    except InvalidTag as exc:
        raise CryptoError("the continuation was not sealed by this analyzer for this batch") \
            from exc
    count, refused = struct.unpack(">II", plaintext[:8])
    return Continuation(count, refused, plaintext[8 : 8 + DIGEST_BYTES],
                        plaintext[8 + DIGEST_BYTES :])
