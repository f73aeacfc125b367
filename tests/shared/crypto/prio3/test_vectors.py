"""The published test vectors of draft-irtf-cfrg-vdaf (vectors/README.md: source and licence),
byte for byte: XOF outputs, and for every Prio3 variant the operations each vector lists —
shard (public share and input shares), verify_init (verifier shares), verifier_shares_to_message
(verifier message), verify_next (output shares), aggregate (aggregate shares), unshard (result) —
including the negative vectors (a tampered gadget polynomial, wire seed, measurement share,
helper seed, joint-randomness blind, public share or verifier message must be rejected at the
step the vector names)."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest

from privbandit.shared.crypto.prio3.field import Field64, Field128
from privbandit.shared.crypto.prio3.prio3 import (
    Prio3,
    VerifierShare,
    VerifyState,
    prio3_count,
    prio3_histogram,
    prio3_multihot_count_vec,
    prio3_sum,
    prio3_sum_vec,
    prio3_sum_vec_multiproof,
)
from privbandit.shared.crypto.prio3.xof import XofFixedKeyAes128, XofTurboShake128

VECTORS = Path(__file__).parent / "vectors"
T = TypeVar("T")


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((VECTORS / name).read_text())
    return data


def instantiate(name: str, tv: dict[str, Any]) -> Prio3[Any, Any]:
    shares = tv["shares"]
    kind = name.split("_")[0]
    if kind == "Prio3Count":
        return prio3_count(shares)
    if kind == "Prio3Sum":
        return prio3_sum(tv["max_measurement"], shares)
    if kind == "Prio3SumVec":
        return prio3_sum_vec(tv["length"], tv["max_measurement"], tv["chunk_length"], shares)
    if kind == "Prio3SumVecWithMultiproof":
        # poc/gen_test_vec.py: Prio3SumVecWithMultiproof(shares, Field64, 3, ...)
        return prio3_sum_vec_multiproof(
            Field64, 3, tv["length"], tv["max_measurement"], tv["chunk_length"], shares
        )
    if kind == "Prio3Histogram":
        return prio3_histogram(tv["length"], tv["chunk_length"], shares)
    if kind == "Prio3MultihotCountVec":
        return prio3_multihot_count_vec(
            tv["length"], tv["max_weight"], tv["chunk_length"], shares
        )
    raise AssertionError(name)


VDAF_FILES = sorted(p.name for p in VECTORS.glob("Prio3*.json"))


def test_every_variant_has_vectors() -> None:
    kinds = {n.rsplit("_", 1)[0] for n in VDAF_FILES if "_bad_" not in n}
    assert kinds == {
        "Prio3Count", "Prio3Sum", "Prio3SumVec", "Prio3SumVecWithMultiproof", "Prio3Histogram",
        "Prio3MultihotCountVec",
    }
    assert sum("_bad_" in n for n in VDAF_FILES) == 8


def outcome(ok: bool, step: Callable[[], T]) -> tuple[T] | None:
    """``(what step returns,)`` where the vector marks the operation a success (it must not
    raise ``ValueError``), or None where it marks it a failure (it must raise ``ValueError``).
    (A step may succeed with None: a verifier message without joint randomness.)"""
    try:
        result = step()
    except ValueError:
        assert not ok
        return None
    assert ok
    return (result,)


def decode_and_verify_init(
    vdaf: Prio3[Any, Any], verify_key: bytes, ctx: bytes, agg: int, nonce: bytes,
    report: dict[str, Any],
) -> tuple[VerifyState, VerifierShare]:
    """verify_init of aggregator ``agg`` on a vector's report, after decoding its public share
    and the aggregator's input share (a share that does not decode fails the operation)."""
    public = vdaf.decode_public_share(bytes.fromhex(report["public_share"]))
    share = vdaf.decode_input_share(agg, bytes.fromhex(report["input_shares"][agg]))
    return vdaf.verify_init(verify_key, ctx, agg, nonce, public, share)


@pytest.mark.parametrize("name", VDAF_FILES)
def test_prio3_vector(name: str) -> None:
    tv = load(name)
    vdaf = instantiate(name, tv)
    ctx = bytes.fromhex(tv["ctx"])
    verify_key = bytes.fromhex(tv["verify_key"])
    reports = tv["reports"]
    states: dict[tuple[int, int], VerifyState] = {}
    messages: dict[int, bytes | None] = {}
    out_shares: dict[tuple[int, int], Any] = {}
    failures = 0
    for op in tv["operations"]:
        kind, ok = op["operation"], op["success"]
        if kind in ("aggregate", "unshard"):
            report = None
        else:
            report = reports[op["report_index"]]
        if kind == "shard":
            assert report is not None
            public, inputs = vdaf.shard(
                ctx, report["measurement"], bytes.fromhex(report["nonce"]),
                bytes.fromhex(report["rand"]),
            )
            assert ok
            assert vdaf.encode_public_share(public).hex() == report["public_share"]
            assert [vdaf.encode_input_share(s).hex() for s in inputs] == report["input_shares"]
        elif kind == "verify_init":
            assert report is not None
            agg = op["aggregator_id"]
            nonce = bytes.fromhex(report["nonce"])
            initialised = outcome(
                ok, partial(decode_and_verify_init, vdaf, verify_key, ctx, agg, nonce, report))
            if initialised is None:
                failures += 1
                continue
            ((state, vshare),) = initialised
            states[(op["report_index"], agg)] = state
            assert vdaf.encode_verifier_share(vshare).hex() == report["verifier_shares"][0][agg]
        elif kind == "verifier_shares_to_message":
            assert report is not None
            vshares: list[VerifierShare] = [
                vdaf.decode_verifier_share(bytes.fromhex(h)) for h in report["verifier_shares"][0]
            ]
            message = outcome(ok, partial(vdaf.verifier_shares_to_message, ctx, vshares))
            if message is None:
                failures += 1
                continue
            (msg,) = message
            messages[op["report_index"]] = msg
            assert vdaf.encode_verifier_message(msg).hex() == report["verifier_messages"][0]
        elif kind == "verify_next":
            assert report is not None
            agg = op["aggregator_id"]
            msg = vdaf.decode_verifier_message(bytes.fromhex(report["verifier_messages"][0]))
            output = outcome(ok, partial(vdaf.verify_next, states[(op["report_index"], agg)], msg))
            if output is None:
                failures += 1
                continue
            (out,) = output
            out_shares[(op["report_index"], agg)] = out
            assert vdaf.field.encode_vec(out).hex() == report["out_shares"][agg]
        elif kind == "aggregate":
            agg = op["aggregator_id"]
            mine = [out_shares[(i, agg)] for i in range(len(reports))]
            assert ok
            assert vdaf.encode_agg_share(vdaf.aggregate(mine)).hex() == tv["agg_shares"][agg]
        elif kind == "unshard":
            agg_shares = [vdaf.decode_agg_share(bytes.fromhex(h)) for h in tv["agg_shares"]]
            assert ok
            assert vdaf.unshard(agg_shares, len(reports)) == tv["agg_result"]
        else:
            raise AssertionError(kind)
    # a negative vector fails exactly once, at the operation it marks
    assert failures == sum(not op["success"] for op in tv["operations"])
    if "_bad_" in name:
        assert failures == 1


@pytest.mark.parametrize("xof", [XofTurboShake128, XofFixedKeyAes128])
def test_xof_vector(xof: type[XofTurboShake128] | type[XofFixedKeyAes128]) -> None:
    tv = load(f"{xof.__name__}.json")
    seed, dst, binder = (bytes.fromhex(tv[k]) for k in ("seed", "dst", "binder"))
    assert xof.derive_seed(seed, dst, binder).hex() == tv["derived_seed"]
    vec = xof.expand_into_vec(Field128, seed, dst, binder, tv["length"])
    assert Field128.encode_vec(vec).hex() == tv["expanded_vec_field128"]
    # the stream read in pieces equals the stream read at once
    one = xof(seed, dst, binder).next(100)
    x = xof(seed, dst, binder)
    assert x.next(7) + x.next(33) + x.next(60) == one
