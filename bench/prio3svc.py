"""Cost of the services' ``prio3`` transport (issue 23 item 5) against the Paillier ``secure-sum``
transport on the same task, in the same run, at d = 5 (c = 20 values per report), for sblb
(m = 1) and ddp-linucb (ε = 1, γ = 1), with the transports' own code:

(1) device, per report: ``services.device.transports.prio3.make_report`` (shard, prove, seal the
    helper share with HPKE, JSON) against Paillier's ``encrypt_report`` from a precomputed pool
    plus the HPKE tag and JSON — and that plus the r^n refill the report used;
(2) shuffler, per batch of l: ``leader_verify`` (verify_init of every member) and
    ``leader_aggregate`` (verify_next, sum) against ``homomorphic_sum`` of the l ciphertexts;
(3) analyzer, per batch of l: ``Prio3Decoder.verify`` (open each helper share, verify_init,
    decide, both joint-randomness checks, seal the continuation) + ``accept`` + ``decode``
    (unshard) against Paillier's: open the l tags and decrypt the sum;
    Where the analyzer's time goes (``analyzer_*_share``): the l HPKE opens of the helper
    shares alone, and the l × 6 TurboSHAKE128 instances a helper's verification of an honest
    report squeezes (measurement and proof shares, its joint-randomness part, the corrected
    seed, the joint and the query randomness; the verifier message is the corrected seed then)
    alone, as fractions of the analyzer's batch;
    the rest is the field arithmetic of the batched FLP query (``shared.crypto.prio3.batch``);
    and the speed-up of the batch path: the spec's single-report path (``_verify_one`` per
    report; ``verify_init`` per member for the leader) over the batch path, in the same run;
(4) bytes per report on the device → shuffler wire (JSON), and the verification request and
    aggregate per report on the shuffler → analyzer wire, against Paillier's.

Wall-clock medians of ``--repeats`` interleaved runs; ratios are to the Paillier figure of the
same run (no HTTP: the exchange's bodies are built but not posted).

    python -m bench.prio3svc [--batch 1000 --reports 40 --repeats 3 --key-bits 2048]
                             [--json out/bench_prio3svc.json]
"""

from __future__ import annotations

import platform
import secrets
import tempfile
from typing import Any

import numpy as np

from bench.args import parse, write_json
from bench.prio3 import med, timed
from privbandit.services.analyzer.transports.prio3 import Prio3Decoder
from privbandit.services.device.transports.prio3 import make_report
from privbandit.services.shuffler.transports.prio3 import leader_aggregate, leader_verify
from privbandit.shared.crypto.keystore import HpkeKeyStore
from privbandit.shared.crypto.paillier import (
    PaillierEncryptor,
    decrypt_sum,
    encode_ciphertexts,
    generate_keypair,
    homomorphic_sum,
)
from privbandit.shared.crypto.prio3.xof import XofTurboShake128
from privbandit.shared.crypto.prio3_task import open_helper, task_vdaf, verify_key
from privbandit.shared.crypto.slots import layout_for
from privbandit.shared.crypto.tags import make_tag, open_tag
from privbandit.shared.protocol.messages import b64decode
from privbandit.shared.protocol.paillier import EncryptedCounts
from privbandit.shared.settings import TaskConfig

TOKEN = secrets.token_urlsafe(32)


def task(algo: str, l: int) -> TaskConfig:
    policy: dict[str, Any] = {"algo": algo, "d": 5, "batch_size": l}
    if algo == "ddp-linucb":
        policy.update(epsilon=1.0, honest_fraction=1.0)
    else:
        policy.update(eps0=1.0, m=1)
    return TaskConfig.model_validate({"id": "bench", "threat_model": "shuffle", "K": 5,
                                      "aggregation": "secure-sum", "policy": policy})


def values_of(config: TaskConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    vd = task_vdaf(config)
    lo, hi = -vd.offset, vd.max_value - vd.offset
    return rng.integers(lo, hi + 1, size=(n, vd.length))


def bench_task(algo: str, args: Any, hpke: HpkeKeyStore, enc: PaillierEncryptor, private: Any,
               rng: np.random.Generator) -> dict[str, Any]:
    config = task(algo, args.batch)
    vd = task_vdaf(config)
    lay = layout_for(config, enc.key_bits)
    pk, kid = hpke.public_key_bytes, hpke.key_id
    l = args.batch

    # (1) device, per report, interleaved with the Paillier floor.
    dev, floor, refill = [], [], []
    sample = values_of(config, args.reports, rng)
    enc.refill(2 * args.reports * lay.plaintexts)
    last: dict[str, Any] = {}

    def paillier_report(v: np.ndarray) -> None:
        cts = enc.encrypt_report(v, lay, fallback=False)
        ct = encode_ciphertexts(cts, enc.key_bits)
        tag = make_tag(pk, kid, "bench", secrets.token_bytes(16), b64decode(ct))
        last["paillier"] = EncryptedCounts(key_id=1, ct=ct, tag=tag).model_dump_json()

    def prio3_report(v: np.ndarray) -> None:
        last["prio3"] = make_report(vd, v, kid, pk).model_dump_json(exclude_none=True)

    for v in sample:
        floor.append(timed(lambda v=v: paillier_report(v)))
        refill.append(timed(lambda: enc.refill(1)))
        dev.append(timed(lambda v=v: prio3_report(v)))
    pooled = med(floor)
    with_refill = pooled + lay.plaintexts * med(refill)

    # A batch of l reports of each kind.
    values = values_of(config, l, rng)
    reports = [make_report(vd, v, kid, pk) for v in values]
    enc.refill(l * lay.plaintexts)
    cts = [enc.encrypt_report(v, lay, fallback=True) for v in values]
    tags = [make_tag(pk, kid, "bench", secrets.token_bytes(16),
                     b64decode(encode_ciphertexts(c, enc.key_bits))) for c in cts]
    n2 = enc.n * enc.n
    decoder = Prio3Decoder(config, vd, hpke)
    key = verify_key(TOKEN, config.id)

    shuf, shuf_floor, ana, ana_floor = [], [], [], []
    out: dict[str, Any] = {}

    def leader_verify_batch() -> None:
        out["request"], out["states"] = leader_verify(vd, key, "00" * 16, reports)

    def analyzer_batch() -> None:
        answer = decoder.verify(out["request"], set(), TOKEN)
        out["answer"] = answer
        agg = leader_aggregate(vd, "00" * 16, l, reports, out["states"], answer)
        out["aggregate"] = agg
        # The analyzer's ingest of the aggregate (the leader's sum above is shuffler work:
        # timed apart below).
        job = decoder.accept(agg)
        decoded = decoder.decode(job)
        assert decoded.stat is not None and decoded.count == l

    def leader_aggregate_batch() -> None:
        leader_aggregate(vd, "00" * 16, l, reports, out["states"], out["answer"])

    def paillier_shuffler() -> None:
        out["sum"] = homomorphic_sum(cts, n2)

    def paillier_analyzer() -> None:
        for tag in tags:
            open_tag(hpke.private_key, kid, "bench", tag)
        decrypt_sum(private, out["sum"])

    v, ctx = vd.vdaf, vd.ctx
    meas_bytes = v.field.ENCODED_SIZE * v.flp.MEAS_LEN
    proof_bytes = v.field.ENCODED_SIZE * v.flp.PROOF_LEN * v.PROOFS
    jr_bytes = v.field.ENCODED_SIZE * v.flp.JOINT_RAND_LEN * v.PROOFS
    qr_bytes = v.field.ENCODED_SIZE * v.flp.QUERY_RAND_LEN * v.PROOFS
    opens, xofs = [], []

    def helper_opens() -> None:
        for item in out["request"].reports:
            public = b64decode(item.public_share)
            open_helper(hpke.private_key, kid, config.id, b64decode(item.nonce), public,
                        item.helper_share)

    def helper_xofs() -> None:
        # the squeezes of one helper verification, on inputs of the real lengths
        seed, blob = bytes(32), bytes(16 + meas_bytes)
        for _ in range(l):
            for length in (meas_bytes, proof_bytes):
                XofTurboShake128(seed, v.dst(1, ctx), b"\x01").next(length)
            XofTurboShake128(seed, v.dst(7, ctx), blob).next(32)
            XofTurboShake128(seed, v.dst(6, ctx), bytes(64)).next(32)
            XofTurboShake128(seed, v.dst(3, ctx), b"\x01").next(jr_bytes)
            XofTurboShake128(seed, v.dst(5, ctx), bytes(17)).next(qr_bytes)

    single_ana, single_leader, verifies = [], [], []

    def analyzer_single() -> None:
        # the spec's single-report path the batch path replaced (same verdicts): per report
        agg = v.agg_init()
        for item in out["request"].reports:
            share, _ = decoder._verify_one(key, b64decode(item.nonce), item)
            agg = v.agg_update(agg, share)

    def leader_single() -> None:
        for r in reports:
            v.verify_init(key, ctx, 0, b64decode(r.nonce),
                          v.decode_public_share(b64decode(r.public_share)),
                          v.decode_input_share(0, b64decode(r.leader_share)))

    for _ in range(args.repeats):
        shuf_floor.append(timed(paillier_shuffler))
        ana_floor.append(timed(paillier_analyzer))
        t_verify = timed(leader_verify_batch)
        verifies.append(t_verify)
        ana_t = timed(analyzer_batch)
        t_agg = timed(leader_aggregate_batch)
        shuf.append(t_verify + t_agg)
        # analyzer_batch ran leader_aggregate once inside: take it out.
        ana.append(ana_t - t_agg)
        opens.append(timed(helper_opens))
        single_ana.append(timed(analyzer_single))
        single_leader.append(timed(leader_single))
        xofs.append(timed(helper_xofs))
    # Decoded sum is the plain sum of the values.
    assert np.array_equal(decoder.decode(decoder.accept(out["aggregate"])).stat,
                          values.sum(axis=0))

    request_bytes = len(out["request"].model_dump_json()) / l
    aggregate_bytes = len(out["aggregate"].model_dump_json()) / l
    return {
        "c": vd.length, "max_value": vd.max_value, "batch": l,
        "device_prio3_ms": 1e3 * med(dev),
        "device_paillier_pooled_ms": 1e3 * pooled,
        "device_paillier_with_refill_ms": 1e3 * with_refill,
        "device_over_paillier_pooled": med(dev) / pooled,
        "device_over_paillier_with_refill": med(dev) / with_refill,
        "shuffler_prio3_s": med(shuf), "shuffler_paillier_s": med(shuf_floor),
        "shuffler_over_paillier": med(shuf) / med(shuf_floor),
        "analyzer_prio3_s": med(ana), "analyzer_paillier_s": med(ana_floor),
        "analyzer_over_paillier": med(ana) / med(ana_floor),
        "analyzer_single_over_batch": med(single_ana) / med(ana),
        "leader_verify_single_over_batch": med(single_leader) / med(verifies),
        "analyzer_hpke_share": med(opens) / med(ana),
        "analyzer_xof_share": med(xofs) / med(ana),
        "analyzer_hpke_over_paillier": med(opens) / med(ana_floor),
        "device_report_json_bytes": len(last["prio3"]),
        "device_report_json_bytes_paillier": len(last["paillier"]),
        "bytes_over_paillier": len(last["prio3"]) / len(last["paillier"]),
        "verify_request_json_bytes_per_report": request_bytes,
        "aggregate_json_bytes_per_report": aggregate_bytes,
    }


def main() -> None:
    args = parse(__doc__, {"batch": 1000, "reports": 40, "repeats": 3, "key_bits": 2048},
                 "out/bench_prio3svc.json")
    rng = np.random.default_rng(np.random.SeedSequence(2323))
    public, private = generate_keypair(args.key_bits, allow_small=args.key_bits < 2048)
    enc = PaillierEncryptor(public.n)
    with tempfile.TemporaryDirectory() as tmp:
        hpke = HpkeKeyStore(tmp)
        cases = {algo: bench_task(algo, args, hpke, enc, private, rng)
                 for algo in ("sblb", "ddp-linucb")}
    for algo, r in cases.items():
        print(f"{algo}: c={r['c']} M={r['max_value']} l={r['batch']}")
        print(f"  device   prio3 {r['device_prio3_ms']:.2f} ms/report = "
              f"{r['device_over_paillier_pooled']:.2f}x Paillier pooled, "
              f"{r['device_over_paillier_with_refill']:.2f}x with refill")
        print(f"  shuffler prio3 {r['shuffler_prio3_s']:.3f} s/batch = "
              f"{r['shuffler_over_paillier']:.1f}x Paillier's product")
        print(f"  analyzer prio3 {r['analyzer_prio3_s']:.3f} s/batch = "
              f"{r['analyzer_over_paillier']:.1f}x Paillier's decrypt + tags; of it HPKE "
              f"opens {r['analyzer_hpke_share']:.0%} ({r['analyzer_hpke_over_paillier']:.2f}x "
              f"Paillier's), TurboSHAKE {r['analyzer_xof_share']:.0%}")
        print(f"  batch path speed-up (single-report path / batch path, same run): analyzer "
              f"{r['analyzer_single_over_batch']:.1f}x, leader verify_init "
              f"{r['leader_verify_single_over_batch']:.1f}x")
        print(f"  bytes    {r['device_report_json_bytes']} B/report JSON = "
              f"{r['bytes_over_paillier']:.2f}x Paillier's; shuffler->analyzer "
              f"{r['verify_request_json_bytes_per_report']:.0f} + "
              f"{r['aggregate_json_bytes_per_report']:.0f} B/report")
    write_json(args.json, {"python": platform.python_version(), "args": vars(args) | {
        "json": str(args.json)}, "cases": cases})


if __name__ == "__main__":
    main()
