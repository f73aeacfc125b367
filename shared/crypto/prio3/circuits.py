"""Validity circuits of the Prio3 variants (draft-irtf-cfrg-vdaf-18…20, §7.4), in the two-phase
form of ``shared.crypto.prio3.flp.Valid``.

Range-checked integers (§7.4.2, ``encode_range_checked_int``): an integer v ∈ [0, B] with
b = bit_length(B) is encoded as b field elements e_0 … e_{b−1} ∈ {0, 1} with weights
1, 2, …, 2^(b−2) and w_last = B − (2^(b−1) − 1), so Σ weights = B; v = Σ_l w_l e_l. Every 0/1
vector decodes into [0, B] and every v ∈ [0, B] has such an encoding, so "each e_l is a bit"
is exactly "v ∈ [0, B]". Decoding is linear, so it maps additive shares to additive shares.

Bit checks with joint randomness (SumVec, Histogram, MultihotCountVec; [BBCGGI19] Thm 5.2): the
encoded vector x (zero-padded to calls · chunk) is cut into ``calls`` chunks; call i of the
ParallelSum(Mul, chunk) gadget gets the pairs (r_i^(j+1) x_{ij}, x_{ij} − 1/num_shares), so its
output is Σ_j r_i^(j+1) x_{ij}(x_{ij} − 1) and the circuit's output Σ_i of those. It is 0 when
every x is a bit; otherwise it is a non-zero polynomial in r_i of degree ≤ chunk, zero with
probability ≤ chunk/|F| over the joint randomness.
"""

from __future__ import annotations

from collections.abc import Sequence, Sized

import numpy as np

from privbandit.shared.crypto.prio3.field import Field, FVec
from privbandit.shared.crypto.prio3.flp import Gadget, Mul, ParallelSum, PolyEval, Valid


def _check_int(value: object, max_measurement: int) -> int:
    """``value`` as an int in [0, max_measurement]; ValueError otherwise (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"measurement entry {value!r} is not an integer")
    v = int(value)
    if not 0 <= v <= max_measurement:
        raise ValueError(f"measurement entry {v} outside [0, {max_measurement}]")
    return v


def range_check_weights(max_measurement: int) -> list[int]:
    """The weights 1, 2, …, 2^(b−2), B − (2^(b−1) − 1) of the modified bit decomposition."""
    if max_measurement < 1:
        raise ValueError("max_measurement must be positive")
    bits = max_measurement.bit_length()
    rest = 2 ** (bits - 1) - 1
    return [1 << l for l in range(bits - 1)] + [max_measurement - rest]


def encode_range_checked_int(value: int, max_measurement: int) -> list[int]:
    """The 0/1 encoding of v ∈ [0, B] (§7.4.2): if v ≤ 2^(b−1) − 1 its b − 1 low bits and a last
    bit 0, else the b − 1 low bits of v − w_last and a last bit 1."""
    bits = max_measurement.bit_length()
    rest_all_ones = 2 ** (bits - 1) - 1
    last_weight = max_measurement - rest_all_ones
    if value <= rest_all_ones:
        rest, last = value, 0
    else:
        rest, last = value - last_weight, 1
    return [(rest >> l) & 1 for l in range(bits - 1)] + [last]


def _bit_check_inputs(
    field: type[Field], bits: FVec, joint_rand: FVec, chunk: int, calls: int, num_shares: int
) -> FVec:
    """Inputs (calls, 2 · chunk) of the ParallelSum(Mul, chunk) calls that check ``bits``:
    pair j of call i is (r_i^(j+1) x_{ij}, x_{ij} − 1/num_shares), x zero-padded."""
    padded = field.zeros(calls * chunk)
    padded[: len(bits)] = bits
    x = padded.reshape(calls, chunk)
    shares_inv = field.inv(num_shares)
    r = np.asarray(joint_rand[:calls], dtype=object).reshape(calls, 1)
    # r_i^(j+1) for j < chunk: exact products along the row, one reduction at the end
    powers = np.multiply.accumulate(np.repeat(r, chunk, axis=1), axis=1) % field.MODULUS
    out = np.empty((calls, 2 * chunk), dtype=object)
    out[:, 0::2] = field.mul(powers, x)
    out[:, 1::2] = field.sub(x, shares_inv)
    return out


def _chunked_rows(bits: FVec, calls: int, chunk: int) -> FVec:
    """Each row of ``bits`` (rows, len) zero-padded to calls · chunk and cut into its ``calls``
    chunks: shape (rows, calls, chunk)."""
    rows = bits.shape[0]
    padded = np.empty((rows, calls * chunk), dtype=object)
    padded[:, : bits.shape[1]] = bits
    padded[:, bits.shape[1] :] = 0
    return padded.reshape(rows, calls, chunk)


def _bit_check_inputs_rows(
    field: type[Field], bits: FVec, joint_rand: FVec, chunk: int, calls: int, num_shares: int
) -> FVec:
    """``_bit_check_inputs`` of every row of ``bits`` (rows, len) with its own joint randomness
    (rows, ≥ calls): shape (rows, calls, 2 · chunk). The powers r_i^(j+1) are built column by
    column, reduced at each step (the same values mod p)."""
    p = field.MODULUS
    rows = bits.shape[0]
    x = _chunked_rows(bits, calls, chunk)
    shares_inv = field.inv(num_shares)
    r = joint_rand[:, :calls]
    powers = np.empty((rows, calls, chunk), dtype=object)
    powers[:, :, 0] = r
    for j in range(1, chunk):
        powers[:, :, j] = powers[:, :, j - 1] * r % p
    out = np.empty((rows, calls, 2 * chunk), dtype=object)
    out[:, :, 0::2] = powers * x % p
    out[:, :, 1::2] = (x - shares_inv) % p
    return out


def _bit_check_wire_evals(
    field: type[Field], bits: FVec, joint_rand: FVec, chunk: int, calls: int, num_shares: int,
    seeds: FVec, weights: FVec,
) -> FVec:
    """``Valid.wire_evals_rows`` of the ParallelSum(Mul, chunk) bit check, without forming the
    inputs: with c_k the Lagrange weights at t and x_(kj) the padded bits,
    f_(2j)(t) = c_0 s_(2j) + Σ_k (c_(k+1) r_k^(j+1)) x_(kj) and
    f_(2j+1)(t) = c_0 s_(2j+1) + Σ_k c_(k+1) x_(kj) − (1/num_shares) Σ_k c_(k+1); the factors
    c_(k+1) r_k^(j+1) are built column by column (reduced at each step), the sums of products
    reduced once. The same values as the generic evaluation."""
    p = field.MODULUS
    rows = bits.shape[0]
    x = _chunked_rows(bits, calls, chunk)
    r = joint_rand[:, :calls]
    ck = weights[:, 1 : calls + 1]
    factor = ck
    even = np.empty((rows, chunk), dtype=object)
    for j in range(chunk):
        factor = factor * r % p
        even[:, j] = (factor * x[:, :, j]).sum(axis=1)
    odd = (ck[:, :, None] * x).sum(axis=1) - (ck.sum(axis=1) * field.inv(num_shares))[:, None]
    c0 = weights[:, :1]
    out = np.empty((rows, 2 * chunk), dtype=object)
    out[:, 0::2] = (seeds[:, 0::2] * c0 + even) % p
    out[:, 1::2] = (seeds[:, 1::2] * c0 + odd) % p
    return out


class Count(Valid[int, int]):
    """x ∈ {0, 1}: C(x) = Mul(x, x) − x (§7.4.1)."""

    JOINT_RAND_LEN = 0
    MEAS_LEN = 1
    OUTPUT_LEN = 1
    EVAL_OUTPUT_LEN = 1

    def __init__(self, field: type[Field]) -> None:
        self.field = field
        self.GADGETS: list[Gadget] = [Mul()]
        self.GADGET_CALLS = [1]

    def encode(self, measurement: int) -> FVec:
        return self.field.vec([_check_int(measurement, 1)])

    def gadget_inputs(self, meas: FVec, joint_rand: FVec, num_shares: int) -> list[FVec]:
        return [np.array([[meas[0], meas[0]]], dtype=object)]

    def eval_with(
        self, meas: FVec, joint_rand: FVec, num_shares: int, gadget_outputs: list[FVec]
    ) -> FVec:
        return self.field.vec([int(gadget_outputs[0][0]) - int(meas[0])])

    def truncate(self, meas: FVec) -> FVec:
        return meas

    def decode(self, output: FVec, num_measurements: int) -> int:
        return int(output[0])


class Sum(Valid[int, int]):
    """v ∈ [0, max_measurement] as range-checked bits, each checked by PolyEval(x² − x); one
    output per bit (§7.4.2)."""

    JOINT_RAND_LEN = 0
    OUTPUT_LEN = 1

    def __init__(self, field: type[Field], max_measurement: int) -> None:
        self.field = field
        self.max_measurement = max_measurement
        self.weights = field.vec(range_check_weights(max_measurement))
        self.bits = max_measurement.bit_length()
        self.GADGETS: list[Gadget] = [PolyEval([0, -1, 1], self.bits)]
        self.GADGET_CALLS = [self.bits]
        self.MEAS_LEN = self.bits
        self.EVAL_OUTPUT_LEN = self.bits

    def encode(self, measurement: int) -> FVec:
        v = _check_int(measurement, self.max_measurement)
        return self.field.vec(encode_range_checked_int(v, self.max_measurement))

    def gadget_inputs(self, meas: FVec, joint_rand: FVec, num_shares: int) -> list[FVec]:
        return [np.asarray(meas, dtype=object).reshape(-1, 1)]

    def eval_with(
        self, meas: FVec, joint_rand: FVec, num_shares: int, gadget_outputs: list[FVec]
    ) -> FVec:
        return gadget_outputs[0]

    def truncate(self, meas: FVec) -> FVec:
        return self.field.vec([int(self.field.dot(meas, self.weights))])

    def decode(self, output: FVec, num_measurements: int) -> int:
        return int(output[0])


class _ChunkedBitCheck:
    """What SumVec, Histogram and MultihotCountVec share: every entry of the encoded measurement
    is a bit, checked by ParallelSum(Mul, chunk_length) with joint randomness (§7.4.3), one call
    per chunk; an output of ``length`` integers. Their encodings and ``eval_with`` differ."""

    field: type[Field]
    length: int
    chunk_length: int
    MEAS_LEN: int
    GADGETS: list[Gadget]
    GADGET_CALLS: list[int]
    OUTPUT_LEN: int
    JOINT_RAND_LEN: int

    def _init_bit_check(
        self, field: type[Field], length: int, chunk_length: int, meas_len: int
    ) -> None:
        """The sizes of a check of ``meas_len`` encoded bits with an output of ``length``
        entries: one ParallelSum(Mul, chunk_length) call, and one joint random value, per chunk
        of the bits."""
        self.field = field
        self.length = length
        self.chunk_length = chunk_length
        self.MEAS_LEN = meas_len
        self.GADGETS = [ParallelSum(Mul(), chunk_length)]
        self.GADGET_CALLS = [(meas_len + chunk_length - 1) // chunk_length]
        self.OUTPUT_LEN = length
        self.JOINT_RAND_LEN = self.GADGET_CALLS[0]

    def _check_length(self, measurement: Sized) -> None:
        if len(measurement) != self.length:
            raise ValueError(f"measurement has {len(measurement)} entries, not {self.length}")

    def decode(self, output: FVec, num_measurements: int) -> list[int]:
        """The aggregate: one integer per output entry."""
        return [int(x) for x in output]

    def gadget_inputs(self, meas: FVec, joint_rand: FVec, num_shares: int) -> list[FVec]:
        return [
            _bit_check_inputs(
                self.field, meas, joint_rand, self.chunk_length, self.GADGET_CALLS[0], num_shares
            )
        ]

    def gadget_inputs_rows(self, meas: FVec, joint_rand: FVec, num_shares: int) -> list[FVec]:
        return [
            _bit_check_inputs_rows(
                self.field, meas, joint_rand, self.chunk_length, self.GADGET_CALLS[0], num_shares
            )
        ]

    def wire_evals_rows(
        self, meas: FVec, joint_rand: FVec, num_shares: int, seeds: list[FVec],
        weights: list[FVec],
    ) -> list[FVec]:
        return [
            _bit_check_wire_evals(
                self.field, meas, joint_rand, self.chunk_length, self.GADGET_CALLS[0],
                num_shares, seeds[0], weights[0],
            )
        ]


class SumVec(_ChunkedBitCheck, Valid[Sequence[int], list[int]]):
    """A vector of ``length`` integers, each in [0, max_measurement], as concatenated
    range-checked bits, checked with joint randomness by ParallelSum(Mul, chunk_length)
    (§7.4.3). One output: Σ over calls."""

    EVAL_OUTPUT_LEN = 1

    def __init__(
        self, field: type[Field], length: int, max_measurement: int, chunk_length: int
    ) -> None:
        if length < 1 or chunk_length < 1:
            raise ValueError("length and chunk_length must be positive")
        self.max_measurement = max_measurement
        self.weights = field.vec(range_check_weights(max_measurement))
        self.bits = max_measurement.bit_length()
        self._init_bit_check(field, length, chunk_length, length * self.bits)

    def encode(self, measurement: Sequence[int]) -> FVec:
        self._check_length(measurement)
        out: list[int] = []
        for x in measurement:
            out += encode_range_checked_int(_check_int(x, self.max_measurement),
                                            self.max_measurement)
        return self.field.vec(out)

    def eval_with(
        self, meas: FVec, joint_rand: FVec, num_shares: int, gadget_outputs: list[FVec]
    ) -> FVec:
        return self.field.vec([int(self.field.total(gadget_outputs[0]))])

    def truncate(self, meas: FVec) -> FVec:
        return self.field.dot(meas.reshape(self.length, self.bits), self.weights)

    def eval_with_rows(
        self, meas: FVec, joint_rand: FVec, num_shares: int, gadget_outputs: list[FVec]
    ) -> FVec:
        return self.field.total(gadget_outputs[0], axis=1).reshape(-1, 1)

    def truncate_rows(self, meas: FVec) -> FVec:
        rows = meas.shape[0]
        return self.field.dot(meas.reshape(rows, self.length, self.bits), self.weights)


class SumVecRanges(SumVec):
    """SumVec with one maximum per entry (privbandit's generalisation, not a draft variant):
    entry i in [0, M_i]. Every entry gets b = max_i bitlen(M_i) encoded elements: the draft's
    range-checked encoding of v_i ∈ [0, M_i] (§7.4.2: weights 1, 2, …, 2^(b_i−2),
    M_i − (2^(b_i−1) − 1), b_i = bitlen(M_i)) followed by b − b_i zero-weight elements, which an
    honest client sets to 0. The bit checks are SumVec's (§7.4.3): every encoded element is a
    bit, so entry i decodes to Σ_l w_il e_il ∈ [0, M_i] whatever the zero-weight bits hold —
    the validity predicate is exactly "v_i ∈ [0, M_i] for every i". With equal maxima it is
    SumVec, element for element."""

    def __init__(  # SumVec's check and outputs; its own maxima, encoding and decoding
        self, field: type[Field], max_values: Sequence[int], chunk_length: int
    ) -> None:
        maxima = [int(m) for m in max_values]
        if not maxima or chunk_length < 1 or min(maxima) < 1:
            raise ValueError("need at least one entry, each maximum >= 1, chunk_length >= 1")
        self.max_values = maxima
        self.bits = max(m.bit_length() for m in maxima)
        self.weights = np.array(
            [range_check_weights(m) + [0] * (self.bits - m.bit_length()) for m in maxima],
            dtype=object) % field.MODULUS
        self._init_bit_check(field, len(maxima), chunk_length, len(maxima) * self.bits)

    def encode(self, measurement: Sequence[int]) -> FVec:
        self._check_length(measurement)
        out: list[int] = []
        for x, m in zip(measurement, self.max_values, strict=True):
            out += encode_range_checked_int(_check_int(x, m), m)
            out += [0] * (self.bits - m.bit_length())
        return self.field.vec(out)

    def truncate(self, meas: FVec) -> FVec:
        return self.field.total(meas.reshape(self.length, self.bits) * self.weights, axis=1)

    def truncate_rows(self, meas: FVec) -> FVec:
        rows = meas.shape[0]
        return self.field.total(
            meas.reshape(rows, self.length, self.bits) * self.weights[None], axis=2)


class Histogram(_ChunkedBitCheck, Valid[int, list[int]]):
    """A one-hot vector of ``length`` buckets (§7.4.4): bits checked as in SumVec, plus
    Σ x − 1 = 0 (the constant scaled by 1/num_shares). Two outputs."""

    EVAL_OUTPUT_LEN = 2

    def __init__(self, field: type[Field], length: int, chunk_length: int) -> None:
        if length < 1 or chunk_length < 1:
            raise ValueError("length and chunk_length must be positive")
        self._init_bit_check(field, length, chunk_length, length)

    def encode(self, measurement: int) -> FVec:
        out = [0] * self.length
        out[_check_int(measurement, self.length - 1)] = 1
        return self.field.vec(out)

    def eval_with(
        self, meas: FVec, joint_rand: FVec, num_shares: int, gadget_outputs: list[FVec]
    ) -> FVec:
        f = self.field
        range_check = int(f.total(gadget_outputs[0]))
        sum_check = (int(f.total(meas)) - f.inv(num_shares)) % f.MODULUS
        return f.vec([range_check, sum_check])

    def truncate(self, meas: FVec) -> FVec:
        return meas


class MultihotCountVec(_ChunkedBitCheck, Valid[Sequence[bool], list[int]]):
    """A 0/1 vector of ``length`` entries with at most ``max_weight`` ones (§7.4.5): the
    vector followed by its weight as a range-checked integer; all bits checked as in SumVec,
    plus Σ x − decode(weight bits) = 0. Two outputs."""

    EVAL_OUTPUT_LEN = 2

    def __init__(
        self, field: type[Field], length: int, max_weight: int, chunk_length: int
    ) -> None:
        if length < 1 or chunk_length < 1 or not 0 < max_weight <= length:
            raise ValueError("need length, chunk_length > 0 and 0 < max_weight <= length")
        self.max_weight = max_weight
        self.weights = field.vec(range_check_weights(max_weight))
        self.bits_for_weight = max_weight.bit_length()
        self._init_bit_check(field, length, chunk_length, length + self.bits_for_weight)

    def encode(self, measurement: Sequence[bool]) -> FVec:
        self._check_length(measurement)
        if not all(isinstance(x, bool | np.bool_) for x in measurement):
            raise ValueError("measurement entries must be booleans")
        counts = [int(x) for x in measurement]
        weight = sum(counts)
        if weight > self.max_weight:
            raise ValueError(f"weight {weight} exceeds {self.max_weight}")
        return self.field.vec(counts + encode_range_checked_int(weight, self.max_weight))

    def eval_with(
        self, meas: FVec, joint_rand: FVec, num_shares: int, gadget_outputs: list[FVec]
    ) -> FVec:
        f = self.field
        range_check = int(f.total(gadget_outputs[0]))
        weight = int(f.total(meas[: self.length]))
        reported = int(f.dot(meas[self.length :], self.weights))
        return f.vec([range_check, weight - reported])

    def truncate(self, meas: FVec) -> FVec:
        return meas[: self.length]
