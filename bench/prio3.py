"""Cost of Prio3SumVec validity-checked reports (shared/crypto/prio3) next to today's Paillier
secure-sum report, for the two secure-sum policies at d = 5, in the same run.

Reports (c = d(d+3)/2 = 20 entries each, from the policies' own randomizers):
- sblb (m = 1): 20 counts in {0, 1}: Prio3SumVec(length 20, max 1);
- ddp-linucb (ε = 1, l = 1000): 20 signed values in [−O, O], sent as v + O ∈ [0, 2O]:
  Prio3SumVec(length 20, max 2O).
Each as Prio3SumVec (Field128, 1 proof, the registered variant) and as the multiproof variant
(Field64, 3 proofs: fewer bytes, soundness by repetition).

Measured, per report, medians of interleaved calls (seconds, wall clock):
(1) device: ``shard`` (encode, share, joint randomness, prove) + wire encoding, against the
    floor = today's device report: Paillier ``encrypt`` from a precomputed pool (one
    multiplication mod n² per plaintext), and the same plus the off-path refill of the r^n it
    used (what a device pays per report over time);
(2) each aggregator: decode its input share, ``verify_init``, and (leader) combining the
    verifier shares, ``verify_next``; per batch of l reports, the helper's work against today's
    analyzer batch (decrypt the batch sum and open the l report tags);
(3) bytes on the wire per report: leader share, helper share, public share, verifier share
    each way, against today's ciphertext bytes per report;
(4) field arithmetic: one Field64 vector multiplication as object-array ints against split
    32-bit limbs in uint64 (the Goldilocks reduction), both checked equal.

    python -m bench.prio3 [--l 1000 --reports 60 --key-bits 2048 --batch 1000]
                          [--json out/bench_prio3.json]
"""

from __future__ import annotations

import platform
import secrets
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from bench.args import parse, write_json
from privbandit.shared.core.policies import make_config, randomizer_for
from privbandit.shared.crypto.paillier import PaillierEncryptor, decrypt_sum, generate_keypair
from privbandit.shared.crypto.prio3.field import Field64, Field128
from privbandit.shared.crypto.prio3.prio3 import (
    Prio3,
    chunk_length_for,
    prio3_sum_vec,
    prio3_sum_vec_multiproof,
)
from privbandit.shared.crypto.slots import encoding_layout, pack, pack_signed
from privbandit.shared.crypto.tags import make_tag, open_tag

CTX = b"privbandit bench"


def med(samples: list[float]) -> float:
    return statistics.median(samples)


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def mul_limbs64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a · b mod p for p = 2^64 − 2^32 + 1 on uint64 arrays: 32-bit limbs give the 128-bit
    product hi·2^64 + lo; with 2^64 ≡ 2^32 − 1 and 2^96 ≡ −1 (mod p),
    hi·2^64 + lo ≡ lo − h1 + h0·(2^32 − 1) for hi = h1·2^32 + h0."""
    m32 = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    p = np.uint64(Field64.MODULUS)
    a0, a1, b0, b1 = a & m32, a >> s32, b & m32, b >> s32
    ll, lh, hl, hh = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = lh + hl
    mid_carry = (mid < lh).astype(np.uint64)
    lo = ll + (mid << s32)
    lo_carry = (lo < ll).astype(np.uint64)
    hi = hh + (mid >> s32) + (mid_carry << s32) + lo_carry
    h0, h1 = hi & m32, hi >> s32
    # t = lo − h1 (mod p): borrow adds p (as 2^64 − (2^32 − 1) wraps)
    t = lo - h1
    t = np.where(lo < h1, t - np.uint64(0xFFFFFFFF), t)
    u = h0 * m32  # < 2^64
    r = t + u
    r = np.where(r < t, r + np.uint64(0xFFFFFFFF), r)  # overflow: add 2^64 mod p
    return np.where(r >= p, r - p, r)  # type: ignore[no-any-return]  # numpy stubs: where → Any


def field_arithmetic(n: int, repeats: int) -> dict[str, float]:
    rng = np.random.default_rng(5)
    a64 = rng.integers(0, Field64.MODULUS, size=n, dtype=np.uint64)
    b64 = rng.integers(0, Field64.MODULUS, size=n, dtype=np.uint64)
    ao, bo = a64.astype(object), b64.astype(object)
    assert (mul_limbs64(a64, b64).astype(object) == Field64.mul(ao, bo)).all()
    a128 = Field128.vec([int(x) << 60 | int(y) for x, y in zip(a64, b64, strict=True)])
    obj64, limbs, obj128 = [], [], []
    for _ in range(repeats):
        obj64.append(timed(lambda: Field64.mul(ao, bo)))
        limbs.append(timed(lambda: mul_limbs64(a64, b64)))
        obj128.append(timed(lambda: Field128.mul(a128, a128)))
    return {
        "n": n,
        "object64_us": 1e6 * med(obj64),
        "limbs64_us": 1e6 * med(limbs),
        "object128_us": 1e6 * med(obj128),
        "object64_over_limbs64": med(obj64) / med(limbs),
        "object128_over_object64": med(obj128) / med(obj64),
    }


def _device(vdaf: Prio3[Any, Any], meas: list[int], nonce: bytes, wire: dict[str, Any]) -> None:
    public, shares = vdaf.shard(CTX, meas, nonce)
    wire["public"] = vdaf.encode_public_share(public)
    wire["shares"] = [vdaf.encode_input_share(s) for s in shares]


def _aggregator(
    vdaf: Prio3[Any, Any], key: bytes, agg_id: int, nonce: bytes, wire: dict[str, Any],
    out: dict[Any, Any],
) -> None:
    pub = vdaf.decode_public_share(wire["public"])
    share = vdaf.decode_input_share(agg_id, wire["shares"][agg_id])
    state, vshare = vdaf.verify_init(key, CTX, agg_id, nonce, pub, share)
    out[agg_id] = (state, vdaf.encode_verifier_share(vshare))


def _combine(vdaf: Prio3[Any, Any], out: dict[Any, Any]) -> None:
    vs = [vdaf.decode_verifier_share(out[j][1]) for j in range(2)]
    out["msg"] = vdaf.encode_verifier_message(vdaf.verifier_shares_to_message(CTX, vs))


def _next(vdaf: Prio3[Any, Any], out: dict[Any, Any]) -> None:
    vdaf.verify_next(out[1][0], vdaf.decode_verifier_message(out["msg"]))


def bench_variant(
    vdaf: Prio3[Any, Any],
    measurements: list[list[int]],
    key: bytes,
    paillier_report: Callable[[int], Any],
    paillier_refill: Callable[[], Any],
    plaintexts: int,
) -> dict[str, Any]:
    """Per-report device and aggregator costs of one variant, interleaved with the floor."""
    shard_t, floor_t, floor_refill_t = [], [], []
    init0_t, init1_t, combine_t, next_t = [], [], [], []
    sizes: dict[str, int] = {}
    for i, meas in enumerate(measurements):
        floor_t.append(timed(partial(paillier_report, i)))
        floor_refill_t.append(timed(paillier_refill))
        nonce = secrets.token_bytes(16)
        wire: dict[str, Any] = {}
        out: dict[Any, Any] = {}
        shard_t.append(timed(partial(_device, vdaf, meas, nonce, wire)))
        init0_t.append(timed(partial(_aggregator, vdaf, key, 0, nonce, wire, out)))
        init1_t.append(timed(partial(_aggregator, vdaf, key, 1, nonce, wire, out)))
        combine_t.append(timed(partial(_combine, vdaf, out)))
        next_t.append(timed(partial(_next, vdaf, out)))
        if not sizes:
            sizes = {
                "leader_share": len(wire["shares"][0]),
                "helper_share": len(wire["shares"][1]),
                "public_share": len(wire["public"]),
                "verifier_share": len(out[0][1]),
                "verifier_message": len(out["msg"]),
            }
    floor = med(floor_t)
    floor_total = floor + plaintexts * med(floor_refill_t)
    return {
        "meas_len": vdaf.flp.MEAS_LEN,
        "proof_len": vdaf.flp.PROOF_LEN,
        "proofs": vdaf.PROOFS,
        "field": vdaf.field.__name__,
        "shard_ms": 1e3 * med(shard_t),
        "paillier_pooled_ms": 1e3 * floor,
        "paillier_with_refill_ms": 1e3 * floor_total,
        "shard_over_paillier_pooled": med(shard_t) / floor,
        "shard_over_paillier_with_refill": med(shard_t) / floor_total,
        "leader_verify_init_ms": 1e3 * med(init0_t),
        "helper_verify_init_ms": 1e3 * med(init1_t),
        "combine_ms": 1e3 * med(combine_t),
        "verify_next_ms": 1e3 * med(next_t),
        "bytes": sizes,
    }


def main() -> None:
    args = parse(__doc__, {"l": 1000, "reports": 60, "key_bits": 2048, "batch": 1000,
                           "repeats": 15}, "out/bench_prio3.json")
    rng = np.random.default_rng(np.random.SeedSequence(23))
    public, private = generate_keypair(args.key_bits, allow_small=args.key_bits < 2048)
    enc = PaillierEncryptor(public.n)
    key = secrets.token_bytes(32)

    ddp = make_config("ddp-linucb", d=5, batch_size=args.l, epsilon=1.0, honest_fraction=1.0,
                      noise="devices")
    sblb = make_config("sblb", d=5, batch_size=args.l, epsilon=1.0)
    ddp_rz, sblb_rz = randomizer_for(ddp), randomizer_for(sblb)
    o = ddp_rz.offset
    ddp_lay = encoding_layout(ddp_rz.sum_encoding(), args.l, enc.key_bits)
    sblb_lay = encoding_layout(sblb_rz.sum_encoding(), args.l, enc.key_bits)
    n = args.reports
    ddp_vals = rng.integers(-o, o + 1, size=(n, ddp_rz.n))
    sblb_counts = rng.integers(0, sblb_rz.m + 1, size=(n, sblb_rz.c))
    enc.refill(4 * n * max(ddp_lay.plaintexts, sblb_lay.plaintexts))

    cases: dict[str, dict[str, Any]] = {}
    for name, length, max_m, meas, paillier in (
        ("sblb", sblb_rz.c, sblb_rz.m, sblb_counts.tolist(),
         lambda i: enc.encrypt(pack(sblb_counts[i], args.l, sblb_rz.m, enc.key_bits),
                               fallback=False)),
        ("ddp-linucb", ddp_rz.n, 2 * o, (ddp_vals + o).tolist(),
         lambda i: enc.encrypt(pack_signed(ddp_vals[i], ddp_lay), fallback=False)),
    ):
        lay = sblb_lay if name == "sblb" else ddp_lay
        bits = max_m.bit_length()
        chunk = chunk_length_for(length * bits)
        for variant, vdaf in (
            ("Prio3SumVec", prio3_sum_vec(length, max_m, chunk)),
            ("Field64x3", prio3_sum_vec_multiproof(Field64, 3, length, max_m, chunk)),
        ):
            res = bench_variant(vdaf, meas, key, paillier, lambda: enc.refill(1),
                                lay.plaintexts)
            res["paillier_ciphertext_bytes"] = lay.ciphertext_bytes
            res["chunk_length"] = chunk
            res["max_measurement"] = max_m
            cases[f"{name} {variant}"] = res

    # (2) a helper's batch of l reports against today's analyzer batch, same run
    batch = args.batch
    vdaf = prio3_sum_vec(ddp_rz.n, 2 * o, chunk_length_for(ddp_rz.n * (2 * o).bit_length()))
    reports = []
    for _ in range(batch):
        nonce = secrets.token_bytes(16)
        meas = [int(x) + o for x in rng.integers(-o, o + 1, size=ddp_rz.n)]
        pub, shares = vdaf.shard(CTX, meas, nonce)
        reports.append((nonce, vdaf.encode_public_share(pub), vdaf.encode_input_share(shares[1])))

    def helper_batch() -> None:
        outs = []
        for nonce, pub, share in reports:
            state, _ = vdaf.verify_init(key, CTX, 1, nonce, vdaf.decode_public_share(pub),
                                        vdaf.decode_input_share(1, share))
            outs.append(state.out_share)  # verify_next is a seed comparison
        vdaf.aggregate(outs)

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    hpke_sk = X25519PrivateKey.generate()
    hpke_pk = hpke_sk.public_key().public_bytes(serialization.Encoding.Raw,
                                                serialization.PublicFormat.Raw)
    total = [int(c) for c in enc.encrypt(pack_signed(ddp_vals[0], ddp_lay), fallback=True)]
    tags = [make_tag(hpke_pk, 1, "bench", secrets.token_bytes(16), b"x" * 64)
            for _ in range(batch)]

    def analyzer_today() -> None:
        decrypt_sum(private, total)
        for tag in tags:
            open_tag(hpke_sk, 1, "bench", tag)

    helper_s = min(timed(helper_batch) for _ in range(2))
    today_s = min(timed(analyzer_today) for _ in range(3))
    batch_res = {
        "l": batch,
        "helper_batch_s": helper_s,
        "analyzer_today_batch_s": today_s,
        "helper_over_today": helper_s / today_s,
    }
    arith = field_arithmetic(256, args.repeats * 20)
    summary = {
        "cases": cases, "batch": batch_res, "field_mul_256": arith, "key_bits": args.key_bits,
        "machine": platform.processor() or platform.machine(),
        "python": platform.python_version(),
    }
    print(f"{'case':28s} {'shard/Paillier':>15s} {'(+refill)':>10s} {'leader':>8s} "
          f"{'helper':>8s}  bytes leader/helper/public/verifier (Paillier ct)")
    for name, r in cases.items():
        b = r["bytes"]
        print(f"{name:28s} {r['shard_over_paillier_pooled']:15.2f} "
              f"{r['shard_over_paillier_with_refill']:10.3f} "
              f"{r['leader_verify_init_ms'] / r['paillier_with_refill_ms']:8.3f} "
              f"{r['helper_verify_init_ms'] / r['paillier_with_refill_ms']:8.3f}  "
              f"{b['leader_share']}/{b['helper_share']}/{b['public_share']}/"
              f"{b['verifier_share']} ({r['paillier_ciphertext_bytes']})")
    print("(leader, helper: verify_init per report as a ratio to the Paillier report with refill)")
    print(f"helper batch of l={batch} (ddp-linucb) / today's analyzer batch "
          f"(decrypt + open l tags): {batch_res['helper_over_today']:.2f}")
    print(f"Field64 mul of 256: object ints / uint64 limbs = "
          f"{arith['object64_over_limbs64']:.1f}; Field128 object / Field64 object = "
          f"{arith['object128_over_object64']:.2f}")
    write_json(args.json, summary)


if __name__ == "__main__":
    main()
