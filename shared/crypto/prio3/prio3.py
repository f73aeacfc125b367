"""Prio3 (draft-irtf-cfrg-vdaf-18…20, §7.2): an FLP turned into a verifiable distributed
aggregation function for SHARES aggregators (the project uses 2: shuffler = leader, analyzer =
helper; any number in [2, 256) works and the 3-share test vectors pass too).

Sharding (client, §7.2.1): the encoded measurement x is split additively,
x = x_0 + x_1 + … + x_{S−1}, where every helper share x_j (j ≥ 1) is expanded from a 32-byte seed
and the leader's x_0 = x − Σ_j x_j is sent in full; likewise each proof π = π_0 + Σ_j π_j. Any
S − 1 shares are uniformly distributed, independent of x. When the circuit needs joint
randomness r (SumVec, Histogram, MultihotCountVec), it is derived Fiat–Shamir style from the
shares: part_j = XOF(blind_j; j ‖ nonce ‖ x_j), seed = XOF(0; part_0 ‖ … ‖ part_{S−1}),
r = XOF(seed); the parts go into the public share so that verification needs one round.

Verification (aggregators, §7.2.2), names of draft 17+ (earlier drafts: prep_init,
prep_shares_to_prep, prep_next):
- ``verify_init``: aggregator j recomputes its own joint-randomness part from its share (the
  others' parts are taken from the public share), derives r and the query randomness from the
  verification key and nonce, and runs the FLP query on (x_j, π_j): its verifier share;
- ``verifier_shares_to_message``: the sum of the verifier shares is the verifier message of the
  FLP; ``decide`` must accept every proof; the output is the joint-randomness seed recomputed
  from the parts the aggregators sent;
- ``verify_next``: each aggregator checks that this seed equals the one it used (a client that
  lied in the public share is caught here) and releases its output share truncate(x_j).

Aggregation sums output shares; unsharding sums the aggregate shares and decodes.

Any failure raises ``VerifyError`` (or ``ValueError`` for a malformed message): the report is
dropped, nothing else is affected (the spec's "remove the report from the batch").
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic

import numpy as np

from privbandit.shared.crypto.prio3.circuits import (
    Count,
    Histogram,
    MultihotCountVec,
    Sum,
    SumVec,
    SumVecRanges,
)
from privbandit.shared.crypto.prio3.field import Field, Field64, Field128, FVec
from privbandit.shared.crypto.prio3.flp import AggResult, Flp, Measurement
from privbandit.shared.crypto.prio3.xof import Xof, XofTurboShake128

VERSION = 18  # the spec's VERSION constant (drafts 18–20): the first byte of every dst
NONCE_SIZE = 16

USAGE_MEAS_SHARE = 1
USAGE_PROOF_SHARE = 2
USAGE_JOINT_RANDOMNESS = 3
USAGE_PROVE_RANDOMNESS = 4
USAGE_QUERY_RANDOMNESS = 5
USAGE_JOINT_RAND_SEED = 6
USAGE_JOINT_RAND_PART = 7


class VerifyError(ValueError):
    """A report failed verification: a proof was rejected or the joint randomness disagreed."""


def format_dst(algo_class: int, algo: int, usage: int) -> bytes:
    """Domain separation tag (§6.2.3): VERSION ‖ class ‖ be32(algo) ‖ be16(usage)."""
    return (
        VERSION.to_bytes(1, "big")
        + algo_class.to_bytes(1, "big")
        + algo.to_bytes(4, "big")
        + usage.to_bytes(2, "big")
    )


@dataclass(frozen=True)
class LeaderShare:
    """Aggregator 0's input share: its measurement share and proofs share in full."""

    meas_share: FVec
    proofs_share: FVec
    blind: bytes | None


@dataclass(frozen=True)
class HelperShare:
    """Aggregator j ≥ 1's input share: the seed its measurement and proofs shares expand from."""

    seed: bytes
    blind: bytes | None


InputShare = LeaderShare | HelperShare


@dataclass(frozen=True)
class VerifyState:
    """What an aggregator keeps between ``verify_init`` and ``verify_next``."""

    out_share: FVec
    corrected_joint_rand_seed: bytes | None


@dataclass(frozen=True)
class VerifierShare:
    """What an aggregator sends to the others after ``verify_init``."""

    verifiers_share: FVec
    joint_rand_part: bytes | None


class Prio3(Generic[Measurement, AggResult]):
    """Prio3 over an FLP, with TurboSHAKE128 as the XOF, ``proofs`` independent proofs."""

    def __init__(
        self,
        flp: Flp[Measurement, AggResult],
        vdaf_id: int,
        shares: int,
        proofs: int = 1,
        xof: type[Xof] = XofTurboShake128,
    ) -> None:
        if not 2 <= shares < 256:
            raise ValueError("shares must be in [2, 256)")
        if not 1 <= proofs < 256:
            raise ValueError("proofs must be in [1, 256)")
        self.flp = flp
        self.ID = vdaf_id
        self.SHARES = shares
        self.PROOFS = proofs
        self.xof = xof
        self.VERIFY_KEY_SIZE = xof.SEED_SIZE
        self.NONCE_SIZE = NONCE_SIZE
        self.uses_joint_rand = flp.JOINT_RAND_LEN > 0
        self.RAND_SIZE = xof.SEED_SIZE * shares * (2 if self.uses_joint_rand else 1)

    @property
    def field(self) -> type[Field]:
        return self.flp.field

    # -- auxiliary functions (§7.2.4) -----------------------------------------------------------

    def dst(self, usage: int, ctx: bytes) -> bytes:
        """format_dst(0 = VDAF, ID, usage) ‖ ctx."""
        return format_dst(0, self.ID, usage) + ctx

    def helper_meas_share(self, ctx: bytes, agg_id: int, seed: bytes) -> FVec:
        return self.xof.expand_into_vec(
            self.field, seed, self.dst(USAGE_MEAS_SHARE, ctx), bytes([agg_id]),
            self.flp.MEAS_LEN,
        )

    def helper_proofs_share(self, ctx: bytes, agg_id: int, seed: bytes) -> FVec:
        return self.xof.expand_into_vec(
            self.field, seed, self.dst(USAGE_PROOF_SHARE, ctx),
            bytes([self.PROOFS, agg_id]), self.flp.PROOF_LEN * self.PROOFS,
        )

    def prove_rands(self, ctx: bytes, prove_seed: bytes) -> FVec:
        return self.xof.expand_into_vec(
            self.field, prove_seed, self.dst(USAGE_PROVE_RANDOMNESS, ctx),
            bytes([self.PROOFS]), self.flp.PROVE_RAND_LEN * self.PROOFS,
        )

    def query_rands(self, verify_key: bytes, ctx: bytes, nonce: bytes) -> FVec:
        return self.xof.expand_into_vec(
            self.field, verify_key, self.dst(USAGE_QUERY_RANDOMNESS, ctx),
            bytes([self.PROOFS]) + nonce, self.flp.QUERY_RAND_LEN * self.PROOFS,
        )

    def joint_rand_part(
        self, ctx: bytes, agg_id: int, blind: bytes, meas_share: FVec, nonce: bytes
    ) -> bytes:
        return self.xof.derive_seed(
            blind, self.dst(USAGE_JOINT_RAND_PART, ctx),
            bytes([agg_id]) + nonce + self.field.encode_vec(meas_share),
        )

    def joint_rand_seed(self, ctx: bytes, parts: Sequence[bytes]) -> bytes:
        return self.xof.derive_seed(
            bytes(self.xof.SEED_SIZE), self.dst(USAGE_JOINT_RAND_SEED, ctx), b"".join(parts)
        )

    def joint_rands(self, ctx: bytes, seed: bytes) -> FVec:
        return self.xof.expand_into_vec(
            self.field, seed, self.dst(USAGE_JOINT_RANDOMNESS, ctx), bytes([self.PROOFS]),
            self.flp.JOINT_RAND_LEN * self.PROOFS,
        )

    # -- sharding (§7.2.1) ----------------------------------------------------------------------

    def shard(
        self, ctx: bytes, measurement: Measurement, nonce: bytes, rand: bytes | None = None
    ) -> tuple[list[bytes] | None, list[InputShare]]:
        """Public share and the SHARES input shares of ``measurement``. ``rand`` (RAND_SIZE
        bytes) is drawn from the OS CSPRNG unless given (test vectors)."""
        return self.shard_encoded(ctx, self.flp.encode(measurement), nonce, rand)

    def shard_encoded(
        self, ctx: bytes, meas: FVec, nonce: bytes, rand: bytes | None = None
    ) -> tuple[list[bytes] | None, list[InputShare]]:
        """``shard`` of an already encoded measurement, valid or not: what a hostile client can
        send (the tests' forged reports); an honest client calls ``shard``."""
        if len(nonce) != self.NONCE_SIZE:
            raise ValueError("incorrect nonce size")
        if len(meas) != self.flp.MEAS_LEN:
            raise ValueError("encoded measurement of the wrong length")
        if rand is None:
            rand = secrets.token_bytes(self.RAND_SIZE)
        if len(rand) != self.RAND_SIZE:
            raise ValueError("incorrect size of random bytes argument")
        size = self.xof.SEED_SIZE
        seeds = [rand[i : i + size] for i in range(0, self.RAND_SIZE, size)]
        f = self.field
        meas = f.vec(meas)
        s = self.SHARES
        if self.uses_joint_rand:
            helper_seeds = seeds[: 2 * (s - 1)]
            helper_shares, helper_blinds = helper_seeds[0::2], helper_seeds[1::2]
            leader_blind, prove_seed = seeds[2 * (s - 1)], seeds[2 * (s - 1) + 1]
        else:
            helper_shares, helper_blinds = seeds[: s - 1], []
            leader_blind, prove_seed = b"", seeds[s - 1]

        leader_meas = meas
        parts: list[bytes] = []
        for j in range(s - 1):
            share = self.helper_meas_share(ctx, j + 1, helper_shares[j])
            leader_meas = f.sub(leader_meas, share)
            if self.uses_joint_rand:
                parts.append(self.joint_rand_part(ctx, j + 1, helper_blinds[j], share, nonce))
        if self.uses_joint_rand:
            parts.insert(0, self.joint_rand_part(ctx, 0, leader_blind, leader_meas, nonce))

        prove_rands = self.prove_rands(ctx, prove_seed)
        joint_rands = (
            self.joint_rands(ctx, self.joint_rand_seed(ctx, parts))
            if self.uses_joint_rand
            else f.zeros(0)
        )
        prl, jrl = self.flp.PROVE_RAND_LEN, self.flp.JOINT_RAND_LEN
        proofs = [
            self.flp.prove(
                meas, prove_rands[k * prl : (k + 1) * prl], joint_rands[k * jrl : (k + 1) * jrl]
            )
            for k in range(self.PROOFS)
        ]
        leader_proofs = np.concatenate(proofs)
        for j in range(s - 1):
            leader_proofs = f.sub(leader_proofs, self.helper_proofs_share(ctx, j + 1,
                                                                          helper_shares[j]))
        blind = leader_blind if self.uses_joint_rand else None
        input_shares: list[InputShare] = [LeaderShare(leader_meas, leader_proofs, blind)]
        for j in range(s - 1):
            input_shares.append(
                HelperShare(helper_shares[j], helper_blinds[j] if self.uses_joint_rand else None)
            )
        return (parts if self.uses_joint_rand else None), input_shares

    # -- verification (§7.2.2) ------------------------------------------------------------------

    def expand_input_share(
        self, ctx: bytes, agg_id: int, share: InputShare
    ) -> tuple[FVec, FVec, bytes | None]:
        if agg_id == 0:
            if not isinstance(share, LeaderShare):
                raise ValueError("aggregator 0 needs a leader share")
            return share.meas_share, share.proofs_share, share.blind
        if not isinstance(share, HelperShare):
            raise ValueError("a helper needs a helper share")
        return (
            self.helper_meas_share(ctx, agg_id, share.seed),
            self.helper_proofs_share(ctx, agg_id, share.seed),
            share.blind,
        )

    def verify_init(
        self,
        verify_key: bytes,
        ctx: bytes,
        agg_id: int,
        nonce: bytes,
        public_share: Sequence[bytes] | None,
        input_share: InputShare,
    ) -> tuple[VerifyState, VerifierShare]:
        """Aggregator ``agg_id``'s query of its shares: its state and its verifier share."""
        if len(verify_key) != self.VERIFY_KEY_SIZE:
            raise ValueError("incorrect verify key size")
        if len(nonce) != self.NONCE_SIZE:
            raise ValueError("incorrect nonce size")
        if not 0 <= agg_id < self.SHARES:
            raise ValueError("aggregator id out of range")
        meas_share, proofs_share, blind = self.expand_input_share(ctx, agg_id, input_share)
        flp = self.flp
        if len(meas_share) != flp.MEAS_LEN or len(proofs_share) != flp.PROOF_LEN * self.PROOFS:
            raise ValueError("input share of the wrong length")
        out_share = flp.truncate(meas_share)

        joint_rands = self.field.zeros(0)
        corrected_seed: bytes | None = None
        part: bytes | None = None
        if self.uses_joint_rand:
            if blind is None or public_share is None or len(public_share) != self.SHARES:
                raise ValueError("joint randomness parts or blind missing")
            part = self.joint_rand_part(ctx, agg_id, blind, meas_share, nonce)
            parts = list(public_share)
            parts[agg_id] = part
            corrected_seed = self.joint_rand_seed(ctx, parts)
            joint_rands = self.joint_rands(ctx, corrected_seed)

        query_rands = self.query_rands(verify_key, ctx, nonce)
        pl, qrl, jrl = flp.PROOF_LEN, flp.QUERY_RAND_LEN, flp.JOINT_RAND_LEN
        verifiers = [
            flp.query(
                meas_share,
                proofs_share[k * pl : (k + 1) * pl],
                query_rands[k * qrl : (k + 1) * qrl],
                joint_rands[k * jrl : (k + 1) * jrl],
                self.SHARES,
            )
            for k in range(self.PROOFS)
        ]
        return (
            VerifyState(out_share, corrected_seed),
            VerifierShare(np.concatenate(verifiers), part),
        )

    def verifier_shares_to_message(
        self, ctx: bytes, verifier_shares: Sequence[VerifierShare]
    ) -> bytes | None:
        """Combine the verifier shares; VerifyError unless every proof is accepted. Returns the
        joint-randomness seed from the aggregators' parts (None without joint randomness)."""
        if len(verifier_shares) != self.SHARES:
            raise ValueError("one verifier share per aggregator needed")
        vlen = self.flp.VERIFIER_LEN * self.PROOFS
        total = self.field.zeros(vlen)
        parts: list[bytes] = []
        for vs in verifier_shares:
            if len(vs.verifiers_share) != vlen:
                raise ValueError("verifier share of the wrong length")
            total = self.field.add(total, vs.verifiers_share)
            if self.uses_joint_rand:
                if vs.joint_rand_part is None:
                    raise ValueError("joint randomness part missing")
                parts.append(vs.joint_rand_part)
        vl = self.flp.VERIFIER_LEN
        for k in range(self.PROOFS):
            if not self.flp.decide(total[k * vl : (k + 1) * vl]):
                raise VerifyError("proof verifier check failed")
        return self.joint_rand_seed(ctx, parts) if self.uses_joint_rand else None

    def verify_next(self, state: VerifyState, message: bytes | None) -> FVec:
        """The output share, once the joint randomness is confirmed (VerifyError otherwise)."""
        if message != state.corrected_joint_rand_seed:
            raise VerifyError("joint randomness check failed")
        return state.out_share

    # -- aggregation and unsharding (§7.2.4–7.2.5) ----------------------------------------------

    def agg_init(self) -> FVec:
        return self.field.zeros(self.flp.OUTPUT_LEN)

    def agg_update(self, agg_share: FVec, out_share: FVec) -> FVec:
        return self.field.add(agg_share, out_share)

    def aggregate(self, out_shares: Sequence[FVec]) -> FVec:
        """Σ of an aggregator's output shares (one vectorised sum)."""
        if not out_shares:
            return self.agg_init()
        return self.field.total(np.stack(out_shares), axis=0)

    def merge(self, agg_shares: Sequence[FVec]) -> FVec:
        return self.aggregate(agg_shares)

    def unshard(self, agg_shares: Sequence[FVec], num_measurements: int) -> AggResult:
        return self.flp.decode(self.merge(agg_shares), num_measurements)

    # -- message encodings (§7.2.6) -------------------------------------------------------------

    def encode_public_share(self, public_share: Sequence[bytes] | None) -> bytes:
        return b"".join(public_share) if public_share is not None else b""

    def decode_public_share(self, data: bytes) -> list[bytes] | None:
        size = self.xof.SEED_SIZE
        if not self.uses_joint_rand:
            if data:
                raise ValueError("public share must be empty")
            return None
        if len(data) != size * self.SHARES:
            raise ValueError("public share of the wrong length")
        return [data[i : i + size] for i in range(0, len(data), size)]

    def encode_input_share(self, share: InputShare) -> bytes:
        blind = share.blind or b""
        if isinstance(share, LeaderShare):
            f = self.field
            return f.encode_vec(share.meas_share) + f.encode_vec(share.proofs_share) + blind
        return share.seed + blind

    def decode_input_share(self, agg_id: int, data: bytes) -> InputShare:
        """Parse aggregator ``agg_id``'s input share; ValueError on any length or value error."""
        size = self.xof.SEED_SIZE
        blind_len = size if self.uses_joint_rand else 0
        if agg_id == 0:
            es = self.field.ENCODED_SIZE
            meas_len = es * self.flp.MEAS_LEN
            proofs_len = es * self.flp.PROOF_LEN * self.PROOFS
            if len(data) != meas_len + proofs_len + blind_len:
                raise ValueError("leader share of the wrong length")
            return LeaderShare(
                self.field.decode_vec(data[:meas_len]),
                self.field.decode_vec(data[meas_len : meas_len + proofs_len]),
                data[meas_len + proofs_len :] if blind_len else None,
            )
        if not 0 < agg_id < self.SHARES:
            raise ValueError("aggregator id out of range")
        if len(data) != size + blind_len:
            raise ValueError("helper share of the wrong length")
        return HelperShare(data[:size], data[size:] if blind_len else None)

    def encode_verifier_share(self, share: VerifierShare) -> bytes:
        return self.field.encode_vec(share.verifiers_share) + (share.joint_rand_part or b"")

    def decode_verifier_share(self, data: bytes) -> VerifierShare:
        vlen = self.field.ENCODED_SIZE * self.flp.VERIFIER_LEN * self.PROOFS
        part_len = self.xof.SEED_SIZE if self.uses_joint_rand else 0
        if len(data) != vlen + part_len:
            raise ValueError("verifier share of the wrong length")
        return VerifierShare(
            self.field.decode_vec(data[:vlen]), data[vlen:] if part_len else None
        )

    def encode_verifier_message(self, message: bytes | None) -> bytes:
        return message or b""

    def decode_verifier_message(self, data: bytes) -> bytes | None:
        if not self.uses_joint_rand:
            if data:
                raise ValueError("verifier message must be empty")
            return None
        if len(data) != self.xof.SEED_SIZE:
            raise ValueError("verifier message of the wrong length")
        return data

    def encode_agg_share(self, agg_share: FVec) -> bytes:
        return self.field.encode_vec(agg_share)

    def decode_agg_share(self, data: bytes) -> FVec:
        out = self.field.decode_vec(data)
        if len(out) != self.flp.OUTPUT_LEN:
            raise ValueError("aggregate share of the wrong length")
        return out


# -- the variants (§7.4) and their codepoints (§10) -------------------------------------------


def prio3_count(shares: int = 2) -> Prio3[int, int]:
    """Prio3Count: Field64, one proof, ID 1."""
    return Prio3(Flp(Count(Field64)), 0x00000001, shares)


def prio3_sum(max_measurement: int, shares: int = 2) -> Prio3[int, int]:
    """Prio3Sum: Field64, one proof, ID 2."""
    return Prio3(Flp(Sum(Field64, max_measurement)), 0x00000002, shares)


def prio3_sum_vec(
    length: int, max_measurement: int, chunk_length: int, shares: int = 2
) -> Prio3[Sequence[int], list[int]]:
    """Prio3SumVec: Field128, one proof, ID 3."""
    return Prio3(Flp(SumVec(Field128, length, max_measurement, chunk_length)), 0x00000003, shares)


# A private-use codepoint (draft-irtf-cfrg-vdaf §10: 0xFFFF0000 and above are not registered).
SUM_VEC_RANGES_ID = 0xFFFF5253


def prio3_sum_vec_ranges(
    max_values: Sequence[int], chunk_length: int, shares: int = 2
) -> Prio3[Sequence[int], list[int]]:
    """Prio3 over ``SumVecRanges`` (one maximum per entry): Field128, one proof, a private
    codepoint (``SUM_VEC_RANGES_ID``)."""
    return Prio3(Flp(SumVecRanges(Field128, max_values, chunk_length)), SUM_VEC_RANGES_ID,
                 shares)


def prio3_histogram(length: int, chunk_length: int, shares: int = 2) -> Prio3[int, list[int]]:
    """Prio3Histogram: Field128, one proof, ID 4."""
    return Prio3(Flp(Histogram(Field128, length, chunk_length)), 0x00000004, shares)


def prio3_multihot_count_vec(
    length: int, max_weight: int, chunk_length: int, shares: int = 2
) -> Prio3[Sequence[bool], list[int]]:
    """Prio3MultihotCountVec: Field128, one proof, ID 5."""
    return Prio3(
        Flp(MultihotCountVec(Field128, length, max_weight, chunk_length)), 0x00000005, shares
    )


def prio3_sum_vec_multiproof(
    field: type[Field],
    proofs: int,
    length: int,
    max_measurement: int,
    chunk_length: int,
    shares: int = 2,
) -> Prio3[Sequence[int], list[int]]:
    """SumVec with a chosen field and several proofs: the reference implementation's
    experimental "Prio3SumVecWithMultiproof" (ID 0xFFFFFFFF, not a registered codepoint), e.g.
    Field64 with 3 proofs (§9.7: soundness from repetition instead of a larger field)."""
    return Prio3(
        Flp(SumVec(field, length, max_measurement, chunk_length)), 0xFFFFFFFF, shares, proofs
    )


def chunk_length_for(meas_len: int) -> int:
    """A ParallelSum chunk length near √(encoded length) (§7.4.3.1's recommendation)."""
    return max(1, round(meas_len**0.5))
