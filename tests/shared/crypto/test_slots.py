"""Slot packing of secure-sum reports: round trips at the slot limits and refusal of overflow."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.shared.core.randomizers.base import SumEncoding
from privbandit.shared.core.randomizers.binary import n_coords
from privbandit.shared.crypto.slots import (
    GUARD_BITS,
    SlotRangeError,
    layout,
    pack,
    slot_bits,
    slots_per_plaintext,
    unpack,
)

# (c, l, m, key_bits): one plaintext at 2048 bits; several plaintexts with a tiny "key".
CASES = [
    (n_coords(5), 1000, 1, 2048),
    (n_coords(10), 1000, 1, 2048),
    (n_coords(10), 50, 3, 128),  # 8-bit slots, 14 per plaintext → 5 plaintexts
    (n_coords(4), 7, 1, 64),  # 3-bit slots, 18 per plaintext → 1 plaintext
    (n_coords(64), 1000, 1, 2048),  # the largest d: 11 plaintexts
]


def batch_sum(reports: list[list[int]]) -> list[int]:
    """Plain integer sum of packed reports, position by position (what decryption yields)."""
    return [sum(col) for col in zip(*reports, strict=True)]


def test_slot_bits_is_the_bit_length_of_l_m() -> None:
    assert slot_bits(1000, 1) == 10  # 1000 < 1024
    assert slot_bits(1023, 1) == 10 and slot_bits(1024, 1) == 11
    assert slot_bits(1, 1) == 1
    assert slot_bits(50, 3) == 8  # 150 < 256
    for l, m in [(1, 1), (7, 3), (1000, 1), (4096, 2), (100_000, 64)]:
        s = slot_bits(l, m)
        assert 2 ** (s - 1) <= l * m < 2**s


def test_slots_leave_guard_bits_below_the_modulus() -> None:
    for key_bits in (64, 1024, 2048, 4096):
        for s in (1, 3, 10, 17):
            k = slots_per_plaintext(key_bits, s)
            assert k * s <= key_bits - 1 - GUARD_BITS < (k + 1) * s
    with pytest.raises(ValueError):
        slots_per_plaintext(16, 10)


@pytest.mark.parametrize("c,l,m,key_bits", CASES)
def test_round_trip_single_report_at_limits(c: int, l: int, m: int, key_bits: int) -> None:
    lay = layout(c, l, m, key_bits)
    for counts in (np.zeros(c, np.int64), np.full(c, m, np.int64)):
        packed = pack(counts, l, m, key_bits)
        assert len(packed) == lay.plaintexts
        # Every plaintext stays below 2^(key_bits - 1), hence below any key_bits-bit modulus.
        assert all(0 <= p < 2 ** (key_bits - 1 - GUARD_BITS) for p in packed)
        np.testing.assert_array_equal(unpack(packed, c, l, m, key_bits, n_reports=1), counts)


@pytest.mark.parametrize("c,l,m,key_bits", CASES)
def test_full_batch_of_maximal_reports_sums_to_l_m_in_every_slot(
    c: int, l: int, m: int, key_bits: int
) -> None:
    """l reports all at m: every slot reaches exactly l·m, the largest legal value, and does not
    carry; the plaintext sum stays below 2^(key_bits − 1) ≤ n, so it cannot wrap modulo n."""
    one = pack(np.full(c, m, np.int64), l, m, key_bits)
    total = [p * l for p in one]
    assert all(t < 2 ** (key_bits - 1) for t in total)
    np.testing.assert_array_equal(unpack(total, c, l, m, key_bits), np.full(c, l * m))


@pytest.mark.parametrize("c,l,m,key_bits", CASES[:3])
def test_random_batch_round_trip(c: int, l: int, m: int, key_bits: int) -> None:
    rng = np.random.default_rng(3)
    counts = rng.integers(0, m + 1, size=(l, c))
    counts[0] = m  # make sure both extremes occur
    counts[1] = 0
    total = batch_sum([pack(row, l, m, key_bits) for row in counts])
    np.testing.assert_array_equal(unpack(total, c, l, m, key_bits), counts.sum(axis=0))
    # A partial batch (fewer reports than l) unpacks against its own bound n·m.
    part = batch_sum([pack(row, l, m, key_bits) for row in counts[:5]])
    np.testing.assert_array_equal(
        unpack(part, c, l, m, key_bits, n_reports=5), counts[:5].sum(axis=0)
    )


def test_slot_above_l_m_is_refused() -> None:
    c, l, m, kb = 20, 50, 1, 1024
    s = slot_bits(l, m)  # 6 bits: 51..63 fit in the slot but exceed l·m = 50
    good = pack(np.zeros(c, np.int64), l, m, kb)[0]
    for slot in (0, 7, c - 1):
        bad = good + ((l * m + 1) << (slot * s))
        with pytest.raises(SlotRangeError, match=f"slot {slot}"):
            unpack([bad], c, l, m, kb)
        # Exactly l·m is fine.
        ok = good + ((l * m) << (slot * s))
        assert unpack([ok], c, l, m, kb)[slot] == l * m


def test_partial_batch_bound_is_n_reports_times_m() -> None:
    c, l, m, kb = 20, 50, 2, 1024
    packed = pack(np.full(c, m, np.int64), l, m, kb)
    three = [3 * p for p in packed]
    np.testing.assert_array_equal(unpack(three, c, l, m, kb, n_reports=3), np.full(c, 3 * m))
    with pytest.raises(SlotRangeError):
        unpack(three, c, l, m, kb, n_reports=2)  # 3·m in a sum claimed to hold 2 reports


def test_more_reports_than_l_overflowing_every_slot_is_refused() -> None:
    """l' > l reports all at m: each slot carries into the next, so the slots themselves look in
    range (0 and 1), but the top slot's carry lands above the last slot and is caught."""
    c, l, m, kb = 20, 50, 1, 1024
    s = slot_bits(l, m)
    over = 2**s  # 64 reports of 1 in every slot: each slot holds exactly 2^s
    total = [p * over for p in pack(np.ones(c, np.int64), l, m, kb)]
    with pytest.raises(SlotRangeError, match="above its last slot"):
        unpack(total, c, l, m, kb)
    with pytest.raises(SlotRangeError, match="1..50"):
        unpack(total, c, l, m, kb, n_reports=over)


def test_bits_above_last_slot_and_negative_values_are_refused() -> None:
    c, l, m, kb = 65, 1000, 1, 2048
    lay = layout(c, l, m, kb)
    packed = pack(np.ones(c, np.int64), l, m, kb)
    with pytest.raises(SlotRangeError, match="above its last slot"):
        unpack([packed[0] | (1 << (c * lay.slot_bits))], c, l, m, kb)
    with pytest.raises(SlotRangeError, match="above its last slot"):
        unpack([packed[0] | (1 << (kb - 1))], c, l, m, kb)
    with pytest.raises(SlotRangeError):
        unpack([-1], c, l, m, kb)
    with pytest.raises(SlotRangeError, match="plaintexts"):
        unpack(packed + [0], c, l, m, kb)


def test_partly_filled_last_plaintext_checks_its_unused_slots() -> None:
    c, l, m, kb = 20, 50, 3, 128  # 8-bit slots, 14 per plaintext: the 2nd holds 6 slots
    lay = layout(c, l, m, kb)
    assert lay.plaintexts == 2 and lay.slots_in(1) == 6
    packed = pack(np.zeros(c, np.int64), l, m, kb)
    with pytest.raises(SlotRangeError, match="plaintext 1"):
        unpack([packed[0], 1 << (6 * lay.slot_bits)], c, l, m, kb)


def test_pack_rejects_bad_counts() -> None:
    with pytest.raises(ValueError, match="0..1"):
        pack(np.array([0, 2, 1]), 10, 1, 1024)
    with pytest.raises(ValueError, match="0..1"):
        pack(np.array([0, -1, 1]), 10, 1, 1024)
    with pytest.raises(ValueError, match="integers"):
        pack(np.array([0.0, 1.0]), 10, 1, 1024)
    with pytest.raises(ValueError, match="vector"):
        pack(np.zeros((2, 2), np.int64), 10, 1, 1024)


# -- signed layouts (ddp-linucb) ---------------------------------------------------------------


class _DDPTask:
    """What ``layout_for`` reads of a task (TaskConfig refuses ddp-linucb until the services
    serve it)."""

    def __init__(self, l: int, eps: float = 1.0, gamma: float = 1.0) -> None:
        from privbandit.shared.core.policies import make_config

        self.id, self.batch_size, self.max_batch = "ddp", l, l
        self.policy = make_config("ddp-linucb", d=5, batch_size=l, epsilon=eps,
                                  honest_fraction=gamma, noise="devices")

    def sum_encoding(self) -> SumEncoding:
        from privbandit.shared.core.policies import randomizer_for

        return randomizer_for(self.policy).sum_encoding()  # type: ignore[attr-defined,no-any-return]


_ddp_task = _DDPTask


def test_signed_round_trip_with_negative_and_extreme_values() -> None:
    from privbandit.shared.crypto.slots import layout_for, pack_signed, unpack_signed

    lay = layout_for(_ddp_task(8), 512)
    o = lay.offset
    reports = [
        np.full(lay.c, -o), np.full(lay.c, o), np.arange(lay.c) - lay.c // 2,
        np.array([(-o if i % 2 else o) for i in range(lay.c)]),
        np.zeros(lay.c, dtype=int), np.full(lay.c, -1), np.full(lay.c, 1), np.full(lay.c, -o + 1),
    ]
    total = [sum(col) % (1 << 4096) for col in zip(*(pack_signed(np.asarray(r), lay)
                                                  for r in reports), strict=True)]
    expected = np.sum(reports, axis=0)
    got = unpack_signed(total, lay, bound=8 * o)
    assert np.array_equal(got, expected)
    # A single report decodes too (n_reports = 1).
    one = unpack_signed(pack_signed(np.asarray(reports[0]), lay), lay, bound=o, n_reports=1)
    assert np.array_equal(one, reports[0])


def test_signed_pack_refuses_values_beyond_the_offset() -> None:
    from privbandit.shared.crypto.slots import layout_for, pack_signed

    lay = layout_for(_ddp_task(8), 512)
    with pytest.raises(SlotRangeError):
        pack_signed(np.full(lay.c, lay.offset + 1), lay)
    with pytest.raises(SlotRangeError):
        pack_signed(np.full(lay.c, -lay.offset - 1), lay)


def test_signed_unpack_refuses_sums_beyond_the_honest_bound() -> None:
    from privbandit.shared.crypto.slots import layout_for, pack_signed, unpack_signed

    lay = layout_for(_ddp_task(8), 512)
    values = np.zeros(lay.c, dtype=np.int64)
    values[3] = lay.offset
    packed = pack_signed(values, lay)
    assert unpack_signed(packed, lay, bound=lay.offset, n_reports=1)[3] == lay.offset
    with pytest.raises(SlotRangeError):
        unpack_signed(packed, lay, bound=lay.offset - 1, n_reports=1)


def test_signed_slots_hold_every_honest_batch() -> None:
    """Slot width from l, s, the clip and the noise tail: the largest honest slot sum l·2O fits,
    and the analyzer's refusal bound lies inside the slot range."""
    from privbandit.shared.core.policies import randomizer_for
    from privbandit.shared.crypto.slots import layout_for

    for l, eps, gamma in [(100, 0.5, 0.5), (1000, 1.0, 1.0), (10000, 4.0, 0.5)]:
        task = _ddp_task(l, eps, gamma)
        lay = layout_for(task, 2048)
        rz = randomizer_for(task.policy)
        assert lay.max_slot == 2 * l * lay.offset < 1 << lay.slot_bits
        assert rz.sum_bound(l) <= l * lay.offset
        assert lay.offset >= rz.norm_bound
