"""Extendable output functions of the VDAF specification (draft-irtf-cfrg-vdaf-18…20, §6.2).

An XOF is built from a seed, a domain separation tag ``dst`` and a binder string, and squeezes
a stream of bytes (``next``). Prio3 uses it to derive seeds (``derive_seed``) and to expand seeds
into vectors of field elements by rejection sampling (``next_vec``: each ENCODED_SIZE-byte
little-endian chunk, masked to the bit length of p, is kept iff it is < p; kept in stream order).

- XofTurboShake128 (§6.2.1): TurboSHAKE128(M, D = 1) (RFC 9861) of
  M = le16(len(dst)) ‖ dst ‖ le8(len(seed)) ‖ seed ‖ binder, absorbed once and squeezed as a
  stream (pycryptodome's TurboSHAKE128).
- XofFixedKeyAes128 (§6.2.2, the IDPF's XOF; Prio3 does not use it): the fixed AES-128 key is
  TurboSHAKE128(le16(len(dst)) ‖ dst ‖ binder, D = 2, 16 bytes); block i of the stream is
  σ(b) ⊕ AES_k(σ(b)) with b = seed ⊕ le128(i), σ(lo ‖ hi) = hi ‖ (hi ⊕ lo) ([GKWWY20] §4.2).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
from Crypto.Cipher import AES
from Crypto.Hash import TurboSHAKE128

from privbandit.shared.crypto.prio3.field import Field, FVec, next_power_of_2


class Xof(ABC):
    """The XOF interface of §6.2: construct from (seed, dst, binder), squeeze with ``next``."""

    SEED_SIZE: ClassVar[int]

    @abstractmethod
    def __init__(self, seed: bytes, dst: bytes, binder: bytes) -> None: ...

    @abstractmethod
    def next(self, length: int) -> bytes:
        """The next ``length`` bytes of the output stream."""

    @classmethod
    def derive_seed(cls, seed: bytes, dst: bytes, binder: bytes) -> bytes:
        """A fresh SEED_SIZE-byte seed: the first SEED_SIZE output bytes."""
        return cls(seed, dst, binder).next(cls.SEED_SIZE)

    def next_vec(self, field: type[Field], length: int) -> FVec:
        """The next ``length`` field elements by rejection sampling (§6.2 next_vec): chunks are
        read in stream order, masked with next_power_of_2(p) − 1, kept iff < p. Whole runs of
        chunks are read and filtered at once; the order and the stream consumed are the
        spec's (a rejected chunk is replaced by the next one in the stream)."""
        size = field.ENCODED_SIZE
        mask = next_power_of_2(field.MODULUS) - 1
        parts: list[FVec] = []
        have = 0
        while have < length:
            want = length - have
            chunk = field._ints_from_le(self.next(want * size)) & mask
            kept = chunk[chunk < field.MODULUS]
            parts.append(kept)
            have += kept.size
        out = np.concatenate(parts) if len(parts) > 1 else parts[0]
        return out

    @classmethod
    def expand_into_vec(
        cls, field: type[Field], seed: bytes, dst: bytes, binder: bytes, length: int
    ) -> FVec:
        """``length`` field elements expanded from ``seed`` (§6.2 expand_into_vec)."""
        return cls(seed, dst, binder).next_vec(field, length)


class XofTurboShake128(Xof):
    """TurboSHAKE128 with domain byte 1 over le16(|dst|) ‖ dst ‖ le8(|seed|) ‖ seed ‖ binder."""

    SEED_SIZE = 32

    def __init__(self, seed: bytes, dst: bytes, binder: bytes) -> None:
        if len(seed) > 255:
            raise ValueError("seed longer than 255 bytes")
        if len(dst) > 65535:
            raise ValueError("dst longer than 65535 bytes")
        # one absorb of the whole message (the same sponge input as three updates; each
        # update costs a wrapper call that dominates for these short inputs)
        self._h = TurboSHAKE128.new(
            domain=1,
            data=len(dst).to_bytes(2, "little") + dst + len(seed).to_bytes(1, "little") + seed
            + binder,
        )

    def next(self, length: int) -> bytes:
        return self._h.read(length)


class XofFixedKeyAes128(Xof):
    """Fixed-key AES-128 in the circular correlation-robust hash mode of [GKWWY20] (§6.2.2)."""

    SEED_SIZE = 16

    def __init__(self, seed: bytes, dst: bytes, binder: bytes) -> None:
        if len(seed) != self.SEED_SIZE:
            raise ValueError("incorrect seed size")
        if len(dst) > 65535:
            raise ValueError("dst longer than 65535 bytes")
        h = TurboSHAKE128.new(domain=2)
        h.update(len(dst).to_bytes(2, "little") + dst + binder)
        self._aes = AES.new(h.read(16), AES.MODE_ECB)
        self._seed = int.from_bytes(seed, "little")
        self._consumed = 0

    def next(self, length: int) -> bytes:
        offset = self._consumed % 16
        first = self._consumed // 16
        end = self._consumed + length
        self._consumed = end
        blocks = []
        for i in range(first, end // 16 + 1):
            b = (self._seed ^ i).to_bytes(16, "little")
            lo, hi = b[:8], b[8:]
            sigma = hi + bytes(x ^ y for x, y in zip(hi, lo, strict=True))
            enc = self._aes.encrypt(sigma)
            blocks.append(bytes(x ^ y for x, y in zip(enc, sigma, strict=True)))
        return b"".join(blocks)[offset : offset + length]
