"""Cost of the ``secure-sum`` transport (Paillier, g = n + 1): device, shuffler, analyzer.

(1) Device: one report = ``pack`` of its c = d(d+3)/2 counts and Paillier encryption of each
    plaintext, E(M) = (1 + M n) · r^n mod n². With a precomputed pool of r^n this is one
    multiplication mod n²; without it, one r^n = powmod(r, n, n²) per plaintext. Also the
    off-path cost of one pool entry and of the wire encoding.
(2) Shuffler: ``homomorphic_sum`` of l ciphertexts (E(a)E(b) = E(a + b)), as reports/s and as a
    ratio to a floor measured in the same run: the bare gmpy2 loop ``acc = acc * c % n2`` over
    the same ciphertexts (already mpz). Also decode + validation (0 < c < n², gcd(c, n) = 1) of
    the l wire reports followed by the sum, i.e. the shuffler's whole per-batch work.
(3) Analyzer: ``open_batch_sum`` = CRT decryption of each ciphertext of the batch sum plus the
    checked unpacking; per batch. And opening the l report tags that come with each sum
    (``open_tag``: one HPKE open and a digest comparison per member), per batch.

Every report also carries a tag (``shared.crypto.tags``): the device seals one per report (one
HPKE seal, off the multiplication but on the request path), timed in (1).

Timings are the minimum (sum) or median (per-report figures) over repeats, interleaved so that
frequency scaling affects floor and measurement alike.

    python bench/secure_sum.py [--d 5] [--m 1] [--l 1000] [--key-bits 2048]
                               [--json out/bench_secure_sum.json]
"""

from __future__ import annotations

import platform
import secrets
import statistics
import time

import gmpy2
import numpy as np
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from gmpy2 import mpz

from bench.args import parse, write_json
from privbandit.shared.core.randomizers.binary import BinaryRandomizer, n_coords
from privbandit.shared.crypto.paillier import (
    PaillierEncryptor,
    decode_ciphertexts,
    decrypt_sum,
    encode_ciphertexts,
    generate_keypair,
    homomorphic_sum,
    open_batch_sum,
)
from privbandit.shared.crypto.slots import layout, pack
from privbandit.shared.crypto.tags import ciphertext_digest, make_tag, open_tag
from privbandit.shared.protocol.messages import b64decode


def per_call(fn, repeats: int) -> list[float]:
    """Wall-clock seconds of each of ``repeats`` calls."""
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def floor_product(cts: list[mpz], n2: mpz) -> mpz:
    """The floor: one modular multiplication per ciphertext, nothing else."""
    acc = mpz(1)
    for c in cts:
        acc = acc * c % n2
    return acc


def batch_inputs(enc: PaillierEncryptor, counts: np.ndarray, l: int, m: int) -> list[list[int]]:
    """l valid ciphertext reports, made quickly. Benchmark inputs only: the obfuscators are
    products of two entries of a small pool, (r_a r_b)^n = r_a^n r_b^n, which are valid
    Paillier randomness but correlated; real devices draw an independent r per ciphertext."""
    base = [enc.obfuscator() for _ in range(48)]
    n, n2 = enc.n, enc.n_squared
    reports = []
    for row in counts:
        cts = []
        for p in pack(row, l, m, enc.key_bits):
            a, b = secrets.randbelow(len(base)), secrets.randbelow(len(base))
            cts.append(int((n * p + 1) * base[a] % n2 * base[b] % n2))
        reports.append(cts)
    return reports


def main() -> None:
    args = parse(__doc__, {"d": 5, "m": 1, "l": 1000, "key_bits": 2048, "device_reports": 200,
                           "nopool_reports": 40, "repeats": 15}, "out/bench_secure_sum.json")
    d, m, l, kb = args.d, args.m, args.l, args.key_bits

    t0 = time.perf_counter()
    pk, sk = generate_keypair(kb, allow_small=kb < 2048)
    keygen = time.perf_counter() - t0
    n = int(pk.n)
    lay = layout(n_coords(d), l, m, kb)
    rand = BinaryRandomizer(d, eps0=4.0, m=m)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(l, d))
    x /= np.maximum(np.linalg.norm(x, axis=1), 1.0)[:, None]
    counts = rand.counts(rand.randomize(x, rng.random(l), rng))

    # (1) Device.
    enc = PaillierEncryptor(n)
    k = args.device_reports
    refill = per_call(lambda: enc.refill(1), k * lay.plaintexts)
    rows = iter(counts[np.arange(k) % l])
    pooled = per_call(lambda: enc.encrypt_counts(next(rows), l, m, fallback=False), k)
    assert enc.fallbacks == 0
    rows = iter(counts[np.arange(args.nopool_reports) % l])
    nopool = per_call(lambda: enc.encrypt_counts(next(rows), l, m), args.nopool_reports)
    assert enc.fallbacks == args.nopool_reports * lay.plaintexts
    one = enc.encrypt_counts(counts[0], l, m)
    encode = per_call(lambda: encode_ciphertexts(one, kb), k)
    packing = per_call(lambda: pack(counts[0], l, m, kb), k)
    hpke_sk = X25519PrivateKey.generate()
    hpke_pk = hpke_sk.public_key().public_bytes(serialization.Encoding.Raw,
                                                serialization.PublicFormat.Raw)
    one_wire = b64decode(encode_ciphertexts(one, kb))
    tagging = per_call(
        lambda: make_tag(hpke_pk, 1, "bench", secrets.token_bytes(16), one_wire), k)
    device = {
        "pool_entry_ms": 1e3 * statistics.median(refill),
        "report_pooled_ms": 1e3 * statistics.median(pooled),
        "report_no_pool_ms": 1e3 * statistics.median(nopool),
        "speedup": statistics.median(nopool) / statistics.median(pooled),
        "pack_ms": 1e3 * statistics.median(packing),
        "wire_encode_ms": 1e3 * statistics.median(encode),
        "tag_ms": 1e3 * statistics.median(tagging),
    }

    # (2) Shuffler.
    reports = batch_inputs(enc, counts, l, m)
    wire = [encode_ciphertexts(r, kb) for r in reports]
    n2 = mpz(n) * mpz(n)
    as_mpz = [mpz(r[0]) for r in reports]  # the floor gets its operands pre-converted
    sums, floors, decodes = [], [], []
    for _ in range(args.repeats):
        floors += per_call(lambda: floor_product(as_mpz, n2), 1)
        sums += per_call(lambda: homomorphic_sum(reports, n2), 1)
        decodes += per_call(
            lambda: homomorphic_sum([decode_ciphertexts(w, n, lay.plaintexts) for w in wire], n2),
            1,
        )
    total = homomorphic_sum(reports, n2)
    assert [int(floor_product(as_mpz, n2))] == total[:1]
    # The floor covers one plaintext position; scale it to the layout's number of plaintexts.
    floor_s = min(floors) * lay.plaintexts
    shuffler = {
        "sum_ms_per_batch": 1e3 * min(sums),
        "sum_reports_per_s": l / min(sums),
        "floor_ms_per_batch": 1e3 * floor_s,
        "floor_reports_per_s": l / floor_s,
        "ratio_to_floor": min(sums) / floor_s,
        "decode_validate_sum_ms_per_batch": 1e3 * min(decodes),
        "decode_validate_sum_reports_per_s": l / min(decodes),
    }

    # (3) Analyzer.
    opened = open_batch_sum(sk, total, lay, l)
    np.testing.assert_array_equal(opened, counts.sum(axis=0))
    dec = per_call(lambda: decrypt_sum(sk, total), args.repeats * 4)
    full = per_call(lambda: open_batch_sum(sk, total, lay, l), args.repeats * 4)
    wires = [b64decode(w) for w in wire]
    tags = [make_tag(hpke_pk, 1, "bench", secrets.token_bytes(16), w) for w in wires]
    digests = [ciphertext_digest(w) for w in wires]

    def open_tags() -> None:
        for tag, digest in zip(tags, digests, strict=True):
            assert open_tag(hpke_sk, 1, "bench", tag)[1] == digest

    tag_opens = per_call(open_tags, max(3, args.repeats // 3))
    analyzer = {
        "decrypt_ms_per_batch": 1e3 * statistics.median(dec),
        "open_batch_ms_per_batch": 1e3 * statistics.median(full),
        "open_tags_ms_per_batch": 1e3 * statistics.median(tag_opens),
    }

    summary = {
        "d": d, "m": m, "l": l, "key_bits": kb, "keygen_s": keygen,
        "layout": {
            "c": lay.c, "slot_bits": lay.slot_bits,
            "slots_per_plaintext": lay.slots_per_plaintext, "plaintexts": lay.plaintexts,
            "ciphertext_bytes_per_report": lay.ciphertext_bytes,
        },
        "device": device, "shuffler": shuffler, "analyzer": analyzer,
        "gmpy2": gmpy2.version(), "gmp": gmpy2.mp_version(),
        "machine": platform.processor() or platform.machine(),
        "python": platform.python_version(),
    }
    print(f"secure-sum  d={d} m={m} l={l} key={kb} bits  c={lay.c}  slot={lay.slot_bits} bits  "
          f"{lay.slots_per_plaintext} slots/plaintext  {lay.plaintexts} plaintext(s)  "
          f"{lay.ciphertext_bytes} B/report")
    print(f"{'device: one report, pooled r^n':44s} {device['report_pooled_ms']:10.4f} ms")
    print(f"{'device: one report, no pool (powmod)':44s} {device['report_no_pool_ms']:10.4f} ms"
          f"   ({device['speedup']:.0f}x)")
    print(f"{'device: one pool entry (off request path)':44s} {device['pool_entry_ms']:10.4f} ms")
    print(f"{'device: pack / wire encode':44s} {device['pack_ms']:10.4f} / "
          f"{device['wire_encode_ms']:.4f} ms")
    print(f"{'device: seal the report tag (HPKE)':44s} {device['tag_ms']:10.4f} ms")
    print(f"{'shuffler: homomorphic sum of l':44s} {shuffler['sum_ms_per_batch']:10.3f} ms"
          f"   {shuffler['sum_reports_per_s']:12,.0f} reports/s")
    print(f"{'shuffler: floor acc = acc * c % n2':44s} {shuffler['floor_ms_per_batch']:10.3f} ms"
          f"   {shuffler['floor_reports_per_s']:12,.0f} reports/s")
    print(f"{'shuffler: ratio sum / floor':44s} {shuffler['ratio_to_floor']:10.3f}")
    print(f"{'shuffler: decode + validate + sum of l':44s} "
          f"{shuffler['decode_validate_sum_ms_per_batch']:10.3f} ms"
          f"   {shuffler['decode_validate_sum_reports_per_s']:12,.0f} reports/s")
    print(f"{'analyzer: decrypt one batch sum':44s} {analyzer['decrypt_ms_per_batch']:10.3f} ms")
    print(f"{'analyzer: decrypt + unpack + range checks':44s} "
          f"{analyzer['open_batch_ms_per_batch']:10.3f} ms")
    print(f"{'analyzer: open and check the l report tags':44s} "
          f"{analyzer['open_tags_ms_per_batch']:10.3f} ms")
    write_json(args.json, summary)


if __name__ == "__main__":
    main()
