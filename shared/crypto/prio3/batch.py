"""Prio3 verification of a whole batch at once (issue 23 item 5): the aggregators' side of
draft-irtf-cfrg-vdaf-20 §7.2.2 and the FLP query/decide of §7.3.4–7.3.5, run on B reports as
2-D field arrays (one row per report) instead of B calls of the single-report functions.

The single-report functions (``Prio3.verify_init``, ``Flp.query``, …) stay the spec's reference
path; every function here gives, row by row, exactly what they give (same verifier shares, joint
randomness parts, seeds, output shares, verdicts), which tests/shared/crypto/prio3/test_batch.py
checks byte for byte on random reports, on the published test vectors and on invalid reports.

Where the time goes and what is batched:

- The field arithmetic of the FLP query (gadget inputs, wire polynomials, the gadget
  polynomial's extension to a power of two, Lagrange weights at each report's own test point t,
  the two evaluations at t, the output reduction) is one NumPy operation over all B rows per
  step, so the per-call overhead of NumPy is paid once per batch, not once per report.
- The XOF (TurboSHAKE128) has one instance per report and purpose — its inputs (seed, nonce,
  share) differ per report: that is inherent. The squeezed bytes of all rows are decoded in ONE
  vectorised pass; a row with a chunk ≥ p (rejection sampling, probability < 2^-58 per element
  for Field128, < 2^-31 for Field64) is recomputed by the spec's ``next_vec`` alone, so the
  stream consumed and the elements kept are the spec's.
- Joint-randomness seeds that the spec recomputes from identical inputs are reused, and a seed
  comparison of two XOF outputs over inputs that are byte-equal is decided by comparing the
  inputs (equal inputs give equal outputs; unequal inputs fall back to computing both outputs,
  so the verdict is the spec's even then).

A report that cannot be verified (wrong lengths, a missing blind, a test point that is a root of
unity, a failed proof or joint-randomness check) gets its exception in its own slot; the other
rows are unaffected — the spec's "remove the report from the batch".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from privbandit.shared.crypto.prio3.field import Field, FVec, next_power_of_2
from privbandit.shared.crypto.prio3.flp import Flp, gadget_poly_len, wire_poly_len
from privbandit.shared.crypto.prio3.prio3 import (
    USAGE_JOINT_RAND_PART,
    USAGE_JOINT_RANDOMNESS,
    USAGE_MEAS_SHARE,
    USAGE_PROOF_SHARE,
    USAGE_QUERY_RANDOMNESS,
    HelperShare,
    LeaderShare,
    Prio3,
    VerifierShare,
    VerifyError,
    VerifyState,
)
from privbandit.shared.crypto.prio3.xof import Xof

BoolVec = npt.NDArray[np.bool_]


# -- field helpers over rows --------------------------------------------------------------------


def _matrix(field: type[Field], rows: int, cols: int) -> FVec:
    """A (rows, cols) zero matrix of field elements (object ints)."""
    out = np.empty((rows, cols), dtype=object)
    out[...] = 0
    return out


def decode_rows(field: type[Field], raw: Sequence[bytes], length: int) -> tuple[FVec, BoolVec]:
    """Rows of ``length`` little-endian field elements from equal-length byte strings, decoded in
    one pass: (matrix, row_ok) with row_ok false where a row has an element ≥ p (or the wrong
    length: such a row is left zero)."""
    size = field.ENCODED_SIZE
    want = length * size
    ok = np.array([len(r) == want for r in raw], dtype=bool)
    if not ok.all():
        raw = [r if good else bytes(want) for r, good in zip(raw, ok, strict=True)]
    if not raw or length == 0:
        return _matrix(field, len(raw), length), ok
    mat = field._ints_from_le(b"".join(raw)).reshape(len(raw), length)
    ok &= ~(mat >= field.MODULUS).any(axis=1).astype(bool)
    return mat, ok


def encode_rows(field: type[Field], mat: FVec) -> list[bytes]:
    """``field.encode_vec`` of every row, from one vectorised encoding of the matrix."""
    rows = mat.shape[0]
    if rows == 0:
        return []
    data = field.encode_vec(mat)
    step = len(data) // rows
    return [data[i * step : (i + 1) * step] for i in range(rows)]


def expand_rows(
    xof: type[Xof], field: type[Field], seeds: Sequence[bytes], dst: bytes,
    binders: Sequence[bytes], length: int,
) -> tuple[FVec, list[bytes]]:
    """``xof.expand_into_vec(field, seed_i, dst, binder_i, length)`` for every row i, and each
    row's encoding. One XOF per row (inherent); the decoding of all rows is one pass; a row
    whose first length·ENCODED_SIZE bytes hold a chunk that rejection sampling discards is
    recomputed by the spec's ``next_vec``. The mask of §6.2 next_vec (next_power_of_2(p) − 1)
    keeps every bit of an ENCODED_SIZE-byte chunk for both fields of the spec (p > 2^(8·size−1)),
    so the fast path reads the chunks as they are; a field where it would not is sent to the
    spec's path whole."""
    size = field.ENCODED_SIZE
    raw = [xof(s, dst, b).next(length * size) for s, b in zip(seeds, binders, strict=True)]
    if next_power_of_2(field.MODULUS) != 1 << (8 * size):
        mat = np.array([xof.expand_into_vec(field, s, dst, b, length)
                        for s, b in zip(seeds, binders, strict=True)], dtype=object)
        return mat.reshape(len(seeds), length), encode_rows(field, mat.reshape(-1, length))
    mat, ok = decode_rows(field, raw, length)
    for i in map(int, np.flatnonzero(~ok)):
        mat[i] = xof.expand_into_vec(field, seeds[i], dst, binders[i], length)
        raw[i] = field.encode_vec(mat[i])
    return mat, raw


def lagrange_weights_rows(field: type[Field], n: int, xs: FVec) -> FVec:
    """Row i: ``field.lagrange_weights(n, xs[i])`` — c[i, k] = (−1)^(n−1) n⁻¹ w_k Π_{j≠k}
    (w_j − x_i) with w_k = W_n^k (spec Lagrange.poly_eval_batched) — by prefix and suffix
    products over the n columns, each step one operation over all rows."""
    p = field.MODULUS
    nodes = field.nth_root_powers(n)
    rows = xs.shape[0]
    d = (nodes[None, :] - xs[:, None]) % p
    prefix = np.empty((rows, n + 1), dtype=object)
    suffix = np.empty((rows, n + 1), dtype=object)
    prefix[:, 0] = 1
    suffix[:, n] = 1
    for i in range(n):
        prefix[:, i + 1] = prefix[:, i] * d[:, i] % p
    for i in range(n - 1, -1, -1):
        suffix[:, i] = suffix[:, i + 1] * d[:, i] % p
    factor = (p - 1 if (n - 1) % 2 else 1) * field.inv(n) % p
    scaled = nodes * factor % p
    return prefix[:, :n] * suffix[:, 1:] % p * scaled[None, :] % p


def extend_rows(field: type[Field], values: FVec, n: int) -> FVec:
    """``field.extend_values_to_power_of_2`` of every row (shape (rows, L) → (rows, n)). The one
    missing value of a degree-2 gadget (L = n − 1) is v_(n−1) = −W_n · Σ_(i<n−1) v_i W_n^i (see
    there), vectorised; any other L goes row by row through the spec's algorithm."""
    rows, length = values.shape
    if length == n:
        return values.copy()
    if length == n - 1:
        p = field.MODULUS
        nodes = field.nth_root_powers(n)
        s = np.dot(values, nodes[: n - 1]) % p
        last = (-int(nodes[1]) * s) % p
        return np.concatenate((values, last.reshape(rows, 1)), axis=1)
    out = _matrix(field, rows, n)
    for i in range(rows):
        out[i] = field.extend_values_to_power_of_2(values[i], n)
    return out


# -- the FLP query and decision over rows (§7.3.4–7.3.5) ----------------------------------------


def query_rows(
    flp: Flp[Any, Any], meas: FVec, proof: FVec, query_rand: FVec, joint_rand: FVec,
    num_shares: int,
) -> tuple[FVec, BoolVec]:
    """Row i: ``flp.query(meas[i], proof[i], query_rand[i], joint_rand[i], num_shares)``, and a
    flag per row that is False where that call raises (a test point t is a root of unity of a
    wire polynomial's domain: t^P = 1); those rows hold zeros."""
    f = flp.field
    p = f.MODULUS
    v = flp.valid
    rows = meas.shape[0]
    outputs: list[FVec] = []
    polys: list[FVec] = []
    seeds: list[FVec] = []
    wire_lens: list[int] = []
    offset = 0
    for g, calls in zip(v.GADGETS, v.GADGET_CALLS, strict=True):
        plen = wire_poly_len(calls)
        glen = gadget_poly_len(g.DEGREE, plen)
        seeds.append(proof[:, offset : offset + g.ARITY])
        gpoly = proof[:, offset + g.ARITY : offset + g.ARITY + glen]
        offset += g.ARITY + glen
        n = next_power_of_2(glen)
        poly = extend_rows(f, gpoly, n)
        step = n // plen
        # the k-th call's output is g(α^k) = g(W_N^(k·N/P))
        outputs.append(poly[:, step : step * (calls + 1) : step])
        polys.append(poly)
        wire_lens.append(plen)
    out = v.eval_with_rows(meas, joint_rand, num_shares, outputs)
    qr = query_rand
    if v.EVAL_OUTPUT_LEN > 1:
        reduced = (qr[:, : v.EVAL_OUTPUT_LEN] * out).sum(axis=1) % p
        qr = qr[:, v.EVAL_OUTPUT_LEN :]
    else:
        reduced = out[:, 0]
    ok = np.ones(rows, dtype=bool)
    wire_weights: list[FVec] = []
    poly_evals: list[FVec] = []
    for k, (plen, poly) in enumerate(zip(wire_lens, polys, strict=True)):
        t = qr[:, k]
        ok &= np.array([pow(int(x), plen, p) != 1 for x in t], dtype=bool)
        wire_weights.append(lagrange_weights_rows(f, plen, t))
        w_poly = lagrange_weights_rows(f, poly.shape[1], t)
        poly_evals.append(((poly * w_poly).sum(axis=1) % p).reshape(rows, 1))
    wire_evals = v.wire_evals_rows(meas, joint_rand, num_shares, seeds, wire_weights)
    cols: list[FVec] = [reduced.reshape(rows, 1)]
    for we, pe in zip(wire_evals, poly_evals, strict=True):
        cols += [we, pe]
    verifiers = np.concatenate(cols, axis=1)
    verifiers[~ok] = 0
    return verifiers, ok


def decide_rows(flp: Flp[Any, Any], verifiers: FVec) -> BoolVec:
    """Row i: ``flp.decide(verifiers[i])`` — the reduced output is 0 and every gadget test
    G(f_0(t), …) = g(t) holds — as one operation per gadget over all rows."""
    rows = verifiers.shape[0]
    if verifiers.shape[1] != flp.VERIFIER_LEN:
        return np.zeros(rows, dtype=bool)
    ok = verifiers[:, 0] == 0
    offset = 1
    for g in flp.valid.GADGETS:
        wire_checks = verifiers[:, offset : offset + g.ARITY]
        gadget_check = verifiers[:, offset + g.ARITY]
        offset += g.ARITY + 1
        ok &= g.eval(flp.field, wire_checks) == gadget_check
    return np.asarray(ok, dtype=bool)


# -- Prio3 verification over rows (§7.2.2) ------------------------------------------------------


@dataclass
class BatchVerify:
    """What ``verify_init_rows`` gives for B reports: row i's state and verifier share are the
    spec's ``verify_init`` results, or ``errors[i]`` holds the exception that call raises."""

    out_shares: FVec  # (B, OUTPUT_LEN)
    verifiers: FVec  # (B, VERIFIER_LEN · PROOFS)
    parts: list[bytes | None]  # this aggregator's joint-randomness part, per row
    corrected_seeds: list[bytes | None]
    errors: list[ValueError | None]
    # the parts each corrected seed was derived from (the public share, this part in its slot)
    seed_parts: list[list[bytes] | None]

    def state(self, i: int) -> VerifyState:
        return VerifyState(self.out_shares[i], self.corrected_seeds[i])

    def verifier_share(self, i: int) -> VerifierShare:
        return VerifierShare(self.verifiers[i], self.parts[i])


def verify_init_rows(
    vdaf: Prio3[Any, Any],
    verify_key: bytes,
    ctx: bytes,
    agg_id: int,
    nonces: Sequence[bytes],
    public_shares: Sequence[Sequence[bytes] | None],
    meas: FVec,
    proofs: FVec,
    blinds: Sequence[bytes | None],
    meas_bytes: Sequence[bytes] | None = None,
    bad: Sequence[ValueError | None] | None = None,
) -> BatchVerify:
    """``vdaf.verify_init`` of aggregator ``agg_id`` on B reports whose expanded shares are the
    rows of ``meas`` (B, MEAS_LEN) and ``proofs`` (B, PROOF_LEN · PROOFS); ``meas_bytes``, if
    given, the rows' encodings (they enter the joint-randomness part); ``bad[i]``, if set, an
    error already found for row i (it is kept and the row skipped)."""
    if len(verify_key) != vdaf.VERIFY_KEY_SIZE:
        raise ValueError("incorrect verify key size")
    if not 0 <= agg_id < vdaf.SHARES:
        raise ValueError("aggregator id out of range")
    flp = vdaf.flp
    f = vdaf.field
    rows = len(nonces)
    errors: list[ValueError | None] = list(bad) if bad is not None else [None] * rows
    for i, nonce in enumerate(nonces):
        if errors[i] is None and len(nonce) != vdaf.NONCE_SIZE:
            errors[i] = ValueError("incorrect nonce size")
    if meas.shape != (rows, flp.MEAS_LEN) or proofs.shape != (rows, flp.PROOF_LEN * vdaf.PROOFS):
        raise ValueError("input shares of the wrong shape")
    out_shares = flp.valid.truncate_rows(meas)
    parts: list[bytes | None] = [None] * rows
    seeds: list[bytes | None] = [None] * rows
    seed_parts: list[list[bytes] | None] = [None] * rows
    jrl, qrl, pl = flp.JOINT_RAND_LEN, flp.QUERY_RAND_LEN, flp.PROOF_LEN
    joint = _matrix(f, rows, jrl * vdaf.PROOFS)
    if vdaf.uses_joint_rand:
        encoded = list(meas_bytes) if meas_bytes is not None else encode_rows(f, meas)
        for i in range(rows):
            blind, public = blinds[i], public_shares[i]
            if errors[i] is None and (blind is None or public is None
                                      or len(public) != vdaf.SHARES):
                errors[i] = ValueError("joint randomness parts or blind missing")
            if errors[i] is not None:
                continue
            assert blind is not None and public is not None
            part = vdaf.xof.derive_seed(
                blind, vdaf.dst(USAGE_JOINT_RAND_PART, ctx),
                bytes([agg_id]) + nonces[i] + encoded[i])
            parts[i] = part
            all_parts = list(public)
            all_parts[agg_id] = part
            seeds[i] = vdaf.joint_rand_seed(ctx, all_parts)
            seed_parts[i] = all_parts
        live = [i for i in range(rows) if errors[i] is None]
        if live:
            jr, _ = expand_rows(
                vdaf.xof, f, [seeds[i] or b"" for i in live],
                vdaf.dst(USAGE_JOINT_RANDOMNESS, ctx), [bytes([vdaf.PROOFS])] * len(live),
                jrl * vdaf.PROOFS)
            joint[live] = jr
    qdst = vdaf.dst(USAGE_QUERY_RANDOMNESS, ctx)
    query, _ = expand_rows(vdaf.xof, f, [verify_key] * rows, qdst,
                           [bytes([vdaf.PROOFS]) + n for n in nonces], qrl * vdaf.PROOFS)
    verifiers: list[FVec] = []
    ok = np.array([e is None for e in errors], dtype=bool)
    for k in range(vdaf.PROOFS):
        ver, good = query_rows(
            flp, meas, proofs[:, k * pl : (k + 1) * pl], query[:, k * qrl : (k + 1) * qrl],
            joint[:, k * jrl : (k + 1) * jrl], vdaf.SHARES)
        verifiers.append(ver)
        for i in map(int, np.flatnonzero(ok & ~good)):
            errors[i] = ValueError("test point is a root of unity")
        ok &= good
    return BatchVerify(out_shares, np.concatenate(verifiers, axis=1), parts, seeds, errors,
                       seed_parts)


def expand_helper_rows(
    vdaf: Prio3[Any, Any], ctx: bytes, agg_id: int, shares: Sequence[HelperShare]
) -> tuple[FVec, FVec, list[bytes]]:
    """``vdaf.expand_input_share`` of helper shares, as rows: (meas, proofs, meas encodings)."""
    seeds = [s.seed for s in shares]
    meas, meas_raw = expand_rows(
        vdaf.xof, vdaf.field, seeds, vdaf.dst(USAGE_MEAS_SHARE, ctx), [bytes([agg_id])] * len(
            seeds), vdaf.flp.MEAS_LEN)
    proofs, _ = expand_rows(
        vdaf.xof, vdaf.field, seeds, vdaf.dst(USAGE_PROOF_SHARE, ctx),
        [bytes([vdaf.PROOFS, agg_id])] * len(seeds), vdaf.flp.PROOF_LEN * vdaf.PROOFS)
    return meas, proofs, meas_raw


def helper_verify_init_rows(
    vdaf: Prio3[Any, Any], verify_key: bytes, ctx: bytes, agg_id: int,
    nonces: Sequence[bytes], public_shares: Sequence[Sequence[bytes] | None],
    shares: Sequence[HelperShare],
) -> BatchVerify:
    """``vdaf.verify_init`` of helper ``agg_id`` ≥ 1 on B reports' helper shares."""
    if agg_id == 0:
        raise ValueError("a helper needs a helper share")
    meas, proofs, raw = expand_helper_rows(vdaf, ctx, agg_id, shares)
    return verify_init_rows(vdaf, verify_key, ctx, agg_id, nonces, public_shares, meas, proofs,
                            [s.blind for s in shares], raw)


def decode_leader_rows(
    vdaf: Prio3[Any, Any], encoded: Sequence[bytes]
) -> tuple[FVec, FVec, list[bytes | None], list[bytes], list[ValueError | None]]:
    """``vdaf.decode_input_share(0, ·)`` of B encoded leader shares in one pass: (meas, proofs,
    blinds, meas encodings, errors); a row that does not decode has its ValueError and zeros."""
    f, flp = vdaf.field, vdaf.flp
    es = f.ENCODED_SIZE
    meas_len = es * flp.MEAS_LEN
    elems = flp.MEAS_LEN + flp.PROOF_LEN * vdaf.PROOFS
    body = es * elems
    blind_len = vdaf.xof.SEED_SIZE if vdaf.uses_joint_rand else 0
    errors: list[ValueError | None] = [
        None if len(e) == body + blind_len else ValueError("leader share of the wrong length")
        for e in encoded]
    mat, ok = decode_rows(f, [e[:body] for e in encoded], elems)
    for i in map(int, np.flatnonzero(~ok)):
        if errors[i] is None:
            errors[i] = ValueError("modulus overflow")
        mat[i] = 0
    blinds = [e[body:] if blind_len else None for e in encoded]
    return (mat[:, : flp.MEAS_LEN], mat[:, flp.MEAS_LEN :], blinds,
            [e[:meas_len] for e in encoded], errors)


def leader_verify_init_rows(
    vdaf: Prio3[Any, Any], verify_key: bytes, ctx: bytes, nonces: Sequence[bytes],
    public_shares: Sequence[Sequence[bytes] | None], encoded_shares: Sequence[bytes],
) -> BatchVerify:
    """``vdaf.verify_init`` of the leader on B reports given as their encoded leader shares
    (a share that does not decode is that row's error, as ``decode_input_share`` raises it)."""
    meas, proofs, blinds, raw, errors = decode_leader_rows(vdaf, encoded_shares)
    return verify_init_rows(vdaf, verify_key, ctx, 0, nonces, public_shares, meas, proofs,
                            blinds, raw, errors)


def leader_shares_rows(shares: Sequence[LeaderShare]) -> tuple[FVec, FVec, list[bytes | None]]:
    """Decoded leader shares as rows (meas, proofs, blinds)."""
    return (np.stack([s.meas_share for s in shares]), np.stack([s.proofs_share for s in shares]),
            [s.blind for s in shares])


def verifier_shares_to_message_rows(
    vdaf: Prio3[Any, Any], ctx: bytes, verifiers: Sequence[FVec],
    parts: Sequence[Sequence[bytes | None]],
    known: Sequence[tuple[Sequence[bytes], bytes] | None] | None = None,
) -> list[bytes | None | ValueError]:
    """Row i: ``vdaf.verifier_shares_to_message(ctx, [share of aggregator j for row i])`` —
    its verifier message, or the error it raises (VerifyError for a rejected proof).
    ``known[i]``, if given, is a (parts, joint_rand_seed(ctx, parts)) pair the caller already
    computed for row i: when the row's parts are those, the seed is reused (same inputs, same
    output) instead of computed again. ``verifiers[j]`` is aggregator j's
    (B, VERIFIER_LEN · PROOFS) matrix, ``parts[j]`` its joint-randomness parts."""
    if len(verifiers) != vdaf.SHARES or len(parts) != vdaf.SHARES:
        raise ValueError("one verifier share per aggregator needed")
    f, flp = vdaf.field, vdaf.flp
    total = verifiers[0]
    for other in verifiers[1:]:
        total = total + other
    total = total % f.MODULUS
    rows = total.shape[0]
    vl = flp.VERIFIER_LEN
    ok = np.ones(rows, dtype=bool)
    for k in range(vdaf.PROOFS):
        ok &= decide_rows(flp, total[:, k * vl : (k + 1) * vl])
    out: list[bytes | None | ValueError] = []
    for i in range(rows):
        if not ok[i]:
            out.append(VerifyError("proof verifier check failed"))
        elif vdaf.uses_joint_rand:
            row_parts = [p[i] for p in parts]
            if any(x is None for x in row_parts):
                out.append(ValueError("joint randomness part missing"))
            else:
                have = known[i] if known is not None else None
                if have is not None and list(have[0]) == row_parts:
                    out.append(have[1])
                else:
                    out.append(vdaf.joint_rand_seed(ctx, [x or b"" for x in row_parts]))
        else:
            out.append(None)
    return out


def aggregate_rows(vdaf: Prio3[Any, Any], out_shares: FVec, accepted: BoolVec) -> FVec:
    """``vdaf.aggregate`` of the accepted rows' output shares (Σ mod p)."""
    if not accepted.any():
        return vdaf.agg_init()
    return vdaf.field.total(out_shares[accepted], axis=0)
