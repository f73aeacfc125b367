"""Slot packing of the ``secure-sum`` transport: one function pair, used by device and analyzer.

With counts in 0..m and at most l reports per batch, every slot of a batch sum lies in
0..l·m, which needs ``slot_bits = ⌈log2(l·m + 1)⌉`` bits. Slot i of a plaintext sits at bits
[i·s, (i+1)·s). The slots of one plaintext end at least ``GUARD_BITS + 1`` bits below the top
bit of n, so an honest batch sum is < 2^(|n|−1) ≤ n and never wraps modulo n; bits set above the
last slot or a slot above l·m therefore prove a malformed batch (an out-of-range or negative
plaintext from some device, too many reports, or a tampered sum), and ``unpack`` refuses it.

``layout_for(task, key_bits)`` is the one place a task's layout is derived (device, shuffler and
analyzer all call it), from the plain ``SumEncoding`` the task's randomizer describes (the wire
layer knows no policy: ``tests/test_layering.py``).

Signed values (``ddp-linucb``: rounded statistics plus Skellam noise, either sign). A layout with
``offset`` O > 0 packs each report value v as the digit v + O ∈ [0, m] with m = 2O, so the same
slots hold a batch sum Σ(v + O) ∈ [0, l·m]; ``unpack_signed`` subtracts count·O and refuses a
coordinate sum beyond a caller's bound (a sum no honest batch produces). O comes from the
randomizer (``SkellamRandomizer.offset``): the per-user norm bound after rounding plus a Bernstein
tail of one noise share at probability 2⁻⁶⁴/n, so an honest digit leaves [0, 2O] — and, with it, a
batch sum its slot — with probability below 2⁻⁶⁴ per report; such a share is drawn again on the
device (a truncation of the share's law at total variation < 2⁻⁶⁴, see ``randomizers.skellam``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np

from privbandit.shared.core.randomizers.base import SumEncoding

# Free bits between the last slot and bit |n| − 1 (n ≥ 2^(|n|−1)). One bit would suffice for
# correctness; a few more make wrapped (negative) plaintexts n − k land in bits no slot uses.
GUARD_BITS = 8


class SlotRangeError(ValueError):
    """A packed plaintext (or batch sum) has a slot outside its range or bits above the last slot:
    the batch overflowed or some plaintext was out of range; refuse it."""


class SumRangeError(SlotRangeError):
    """A signed batch sum decoded within its slots but beyond the bound an honest batch stays
    within (``unpack_signed``): some device sent values outside its mechanism's range."""


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
    offset: int = 0

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


@lru_cache(maxsize=256)
def layout(c: int, batch_size: int, m: int, key_bits: int, offset: int = 0) -> SlotLayout:
    """The slot layout of a task (c = d(d+3)/2 coordinates, batch size l, digits 0..m per
    coordinate, signed values shifted by ``offset``) under a key of ``key_bits`` bits.
    Deterministic: device and analyzer derive the same one."""
    if c < 1:
        raise ValueError("need c >= 1")
    if offset < 0 or (offset and m != 2 * offset):
        raise ValueError("a signed layout has digits 0..2·offset")
    s = slot_bits(batch_size, m)
    k = slots_per_plaintext(key_bits, s)
    return SlotLayout(
        c=c, batch_size=batch_size, m=m, key_bits=key_bits, slot_bits=s,
        slots_per_plaintext=k, plaintexts=-(-c // k), offset=offset,
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


def pack_signed(values: Sequence[int] | np.ndarray, lay: SlotLayout) -> list[int]:
    """Pack one report's signed integers under a signed layout: digits v + O must lie in
    [0, 2O] (``SlotRangeError`` otherwise — the device draws such a share again)."""
    if lay.offset <= 0:
        raise ValueError("not a signed layout")
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu" or arr.shape != (lay.c,):
        raise ValueError(f"values must be {lay.c} integers")
    digits = arr.astype(np.int64) + lay.offset
    if (digits < 0).any() or (digits > lay.m).any():
        raise SlotRangeError(f"a value lies outside ±{lay.offset}")
    return pack(digits, lay.batch_size, lay.m, lay.key_bits)


def unpack_signed(
    plaintexts: Sequence[int], lay: SlotLayout, bound: float, *, n_reports: int | None = None
) -> np.ndarray:
    """Signed coordinate sums of ``n_reports`` packed reports (default l): ``unpack`` minus
    count·O. ``SlotRangeError`` if a slot is out of range, ``SumRangeError`` if a sum exceeds
    ±``bound``."""
    if lay.offset <= 0:
        raise ValueError("not a signed layout")
    count = lay.batch_size if n_reports is None else n_reports
    raw = unpack(plaintexts, lay.c, lay.batch_size, lay.m, lay.key_bits, n_reports=count)
    sums = raw - count * lay.offset
    worst = int(np.abs(sums).max())
    if worst > bound:
        raise SumRangeError(f"a decoded sum has magnitude {worst} > {bound:.0f}")
    return sums


class SummedTask(Protocol):
    """What ``layout_for`` reads of a task (``shared.settings.TaskConfig``)."""

    @property
    def max_batch(self) -> int: ...

    def sum_encoding(self) -> SumEncoding: ...


def layout_for(task: SummedTask, key_bits: int) -> SlotLayout:
    """The slot layout of a ``secure-sum`` task under a ``key_bits``-bit Paillier key
    (``encoding_layout`` of its randomizer's encoding and its longest batch)."""
    return encoding_layout(task.sum_encoding(), task.max_batch, key_bits)


def encoding_layout(encoding: SumEncoding, batch_size: int, key_bits: int) -> SlotLayout:
    """c digits of 0..m per report, batch size l: the 0/1 randomizer's counts (c = d(d+3)/2),
    or ``ddp-linucb``'s signed values in a signed layout (offset O, m = 2O). The per-entry
    ranges of an encoding are a Prio3 check only: Paillier packs every entry in [0, m].

    Raises ``ValueError`` if the slots do not fit the key."""
    return layout(encoding.c, batch_size, encoding.m, key_bits, offset=encoding.offset)
