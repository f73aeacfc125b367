"""Prio3 between two aggregators (and three), through the wire encodings: honest reports are
accepted and summed exactly; a forged report — an entry out of range, a negative entry, an
all-20 report of an sblb-like 0/1 vector — is rejected by the two aggregators' verification; a
tampered share, proof, seed, blind, public share or verifier share is rejected; a share paired
with another report's share, or replayed under another nonce, is rejected. Seeded numpy
generators choose measurements; sharding randomness comes from the OS CSPRNG (as in use)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from privbandit.shared.crypto.prio3.field import FVec
from privbandit.shared.crypto.prio3.prio3 import (
    HelperShare,
    LeaderShare,
    Prio3,
    VerifyError,
    chunk_length_for,
    prio3_count,
    prio3_histogram,
    prio3_sum,
    prio3_sum_vec,
)

CTX = b"privbandit test"


def run_report(
    vdaf: Prio3[Any, Any],
    verify_key: bytes,
    nonce: bytes,
    public: bytes,
    shares: Sequence[bytes],
    tamper_verifier: bool = False,
) -> list[FVec]:
    """Both (all) aggregators' verification of one report from its wire bytes; the output
    shares, or ValueError/VerifyError as the aggregators would see it."""
    pub = vdaf.decode_public_share(public)
    states, vshares = [], []
    for agg_id, data in enumerate(shares):
        state, vshare = vdaf.verify_init(
            verify_key, CTX, agg_id, nonce, pub, vdaf.decode_input_share(agg_id, data)
        )
        states.append(state)
        wire = vdaf.encode_verifier_share(vshare)
        if tamper_verifier and agg_id == 1:
            wire = bytes([wire[0] ^ 1]) + wire[1:]
        vshares.append(vdaf.decode_verifier_share(wire))
    msg = vdaf.decode_verifier_message(
        vdaf.encode_verifier_message(vdaf.verifier_shares_to_message(CTX, vshares))
    )
    return [vdaf.verify_next(state, msg) for state in states]


def wire_report(
    vdaf: Prio3[Any, Any], measurement: Any = None, encoded: FVec | None = None
) -> tuple[bytes, bytes, list[bytes]]:
    nonce = secrets.token_bytes(16)
    if encoded is None:
        public, shares = vdaf.shard(CTX, measurement, nonce)
    else:
        public, shares = vdaf.shard_encoded(CTX, encoded, nonce)
    return nonce, vdaf.encode_public_share(public), [vdaf.encode_input_share(s) for s in shares]


def ddp_like(shares: int = 2) -> Prio3[Any, Any]:
    """A ddp-linucb-sized report: d(d+1)/2 + d = 20 entries for d = 5, 15-bit offsets."""
    return prio3_sum_vec(20, 2**15 - 1, chunk_length_for(20 * 15), shares)


def sblb_like() -> Prio3[Any, Any]:
    """An sblb-sized report with m = 1: K·d = 50 counts, each in {0, 1}."""
    return prio3_sum_vec(50, 1, chunk_length_for(50))


@pytest.mark.parametrize(
    ("name", "vdaf", "draw"),
    [
        ("ddp-like", ddp_like(), lambda g: [int(x) for x in g.integers(0, 2**15, 20)]),
        ("ddp-like 3 shares", ddp_like(3), lambda g: [int(x) for x in g.integers(0, 2**15, 20)]),
        ("sblb-like", sblb_like(), lambda g: [int(x) for x in g.integers(0, 2, 50)]),
        ("sum 1337", prio3_sum(1337), lambda g: int(g.integers(0, 1338))),
        ("count", prio3_count(), lambda g: int(g.integers(0, 2))),
        ("histogram", prio3_histogram(7, 3), lambda g: int(g.integers(0, 7))),
    ],
)
def test_seeded_round_trip_sums_exactly(name: str, vdaf: Prio3[Any, Any], draw: Any) -> None:
    gen = np.random.default_rng(np.random.SeedSequence(2311))
    key = secrets.token_bytes(32)
    measurements = [draw(gen) for _ in range(12)]
    per_agg: list[list[FVec]] = [[] for _ in range(vdaf.SHARES)]
    for m in measurements:
        outs = run_report(vdaf, key, *wire_report(vdaf, m))
        for agg, out in enumerate(outs):
            per_agg[agg].append(out)
    agg_shares = [
        vdaf.decode_agg_share(vdaf.encode_agg_share(vdaf.aggregate(o))) for o in per_agg
    ]
    result = vdaf.unshard(agg_shares, len(measurements))
    if name == "histogram":
        expected: Any = [sum(m == b for m in measurements) for b in range(7)]
    elif isinstance(measurements[0], list):
        expected = [int(x) for x in np.sum(measurements, axis=0)]
    else:
        expected = sum(measurements)
    assert result == expected
    # a single aggregator's aggregate share alone is not the result (it is masked)
    assert vdaf.flp.decode(agg_shares[0], len(measurements)) != expected


def test_shard_refuses_invalid_measurements() -> None:
    vdaf = ddp_like()
    nonce = secrets.token_bytes(16)
    for bad in ([2**15] + [0] * 19, [-1] + [0] * 19, [0] * 19, [True] + [0] * 19):
        with pytest.raises(ValueError):
            vdaf.shard(CTX, bad, nonce)


def forged(vdaf: Prio3[Any, Any], honest: Any, edit: dict[int, int]) -> FVec:
    """The honest encoding of ``honest`` with some encoded elements replaced (mod p)."""
    enc = vdaf.flp.encode(honest).copy()
    for i, v in edit.items():
        enc[i] = v % vdaf.field.MODULUS
    return enc


@pytest.mark.parametrize(
    "case",
    ["bit = 2", "bit = -1 (negative entry)", "bit = 20", "entry above max via last weight",
     "sblb all-20", "sblb all -1"],
)
def test_forged_measurement_rejected_by_both_aggregators(case: str) -> None:
    key = secrets.token_bytes(32)
    if case.startswith("sblb"):
        vdaf = sblb_like()
        value = 20 if case == "sblb all-20" else -1
        enc = vdaf.field.vec([value] * 50)
    else:
        vdaf = ddp_like()
        honest = [100] * 20
        # entry 3 occupies encoded elements 45…59 (15 bits each); element 59 is its last bit
        edits = {
            "bit = 2": {45: 2},
            "bit = -1 (negative entry)": {45: -1},
            "bit = 20": {50: 20},
            "entry above max via last weight": {59: 3},
        }[case]
        enc = forged(vdaf, honest, edits)
    # the forged report decodes to an out-of-range sum: the attack the proof must stop
    with pytest.raises(VerifyError):
        run_report(vdaf, key, *wire_report(vdaf, encoded=enc))


def test_forged_vectors_rejected_repeatedly() -> None:
    """20 random forgeries (one non-bit element each, seeded) all rejected; the honest vector
    with the same randomness source accepted every time."""
    vdaf = ddp_like()
    key = secrets.token_bytes(32)
    gen = np.random.default_rng(np.random.SeedSequence(7))
    for _ in range(20):
        honest = [int(x) for x in gen.integers(0, 2**15, 20)]
        assert len(run_report(vdaf, key, *wire_report(vdaf, honest))) == 2
        i = int(gen.integers(0, vdaf.flp.MEAS_LEN))
        bad = int(gen.integers(2, 2**62))
        with pytest.raises(VerifyError):
            run_report(vdaf, key, *wire_report(vdaf, encoded=forged(vdaf, honest, {i: bad})))


def _bump_field_element(vdaf: Prio3[Any, Any], data: bytes, index: int) -> bytes:
    """Add 1 to the index-th encoded field element of ``data`` (staying a valid encoding)."""
    f = vdaf.field
    size = f.ENCODED_SIZE
    x = int.from_bytes(data[index * size : (index + 1) * size], "little")
    new = ((x + 1) % f.MODULUS).to_bytes(size, "little")
    return data[: index * size] + new + data[(index + 1) * size :]


@pytest.mark.parametrize(
    "tamper",
    ["leader measurement share", "leader proof share", "leader wire seed", "helper seed",
     "leader blind", "helper blind", "public share", "verifier share"],
)
def test_tampered_report_rejected(tamper: str) -> None:
    vdaf = ddp_like()
    key = secrets.token_bytes(32)
    nonce, public, shares = wire_report(vdaf, [7] * 20)
    assert len(run_report(vdaf, key, nonce, public, shares)) == 2  # the untouched report passes
    meas_len, seed = vdaf.flp.MEAS_LEN, vdaf.xof.SEED_SIZE
    leader, helper = shares
    if tamper == "leader measurement share":
        leader = _bump_field_element(vdaf, leader, 17)
    elif tamper == "leader proof share":
        leader = _bump_field_element(vdaf, leader, meas_len + vdaf.flp.PROOF_LEN - 1)
    elif tamper == "leader wire seed":
        leader = _bump_field_element(vdaf, leader, meas_len)
    elif tamper == "helper seed":
        helper = secrets.token_bytes(seed) + helper[seed:]
    elif tamper == "leader blind":
        leader = leader[:-seed] + secrets.token_bytes(seed)
    elif tamper == "helper blind":
        helper = helper[:seed] + secrets.token_bytes(seed)
    elif tamper == "public share":
        public = public[:seed] + secrets.token_bytes(seed)
    with pytest.raises(VerifyError):
        run_report(vdaf, key, nonce, public, [leader, helper],
                   tamper_verifier=tamper == "verifier share")


def test_share_of_another_report_or_another_nonce_rejected() -> None:
    vdaf = ddp_like()
    key = secrets.token_bytes(32)
    nonce_a, public_a, shares_a = wire_report(vdaf, [1] * 20)
    nonce_b, public_b, shares_b = wire_report(vdaf, [1] * 20)
    # the helper's share (and its proof share) of report B with the leader's of report A
    with pytest.raises(VerifyError):
        run_report(vdaf, key, nonce_a, public_a, [shares_a[0], shares_b[1]])
    # report A replayed under another nonce
    with pytest.raises(VerifyError):
        run_report(vdaf, key, nonce_b, public_a, shares_a)
    # under another verification key (a helper that does not share the leader's key)
    with pytest.raises(VerifyError):
        pub = vdaf.decode_public_share(public_a)
        s0, v0 = vdaf.verify_init(key, CTX, 0, nonce_a, pub,
                                  vdaf.decode_input_share(0, shares_a[0]))
        s1, v1 = vdaf.verify_init(secrets.token_bytes(32), CTX, 1, nonce_a, pub,
                                  vdaf.decode_input_share(1, shares_a[1]))
        vdaf.verify_next(s0, vdaf.verifier_shares_to_message(CTX, [v0, v1]))
    # the same report and nonce verify (replay of an identical report is the services'
    # nonce bookkeeping, not the proof's)
    assert len(run_report(vdaf, key, nonce_a, public_a, shares_a)) == 2


def test_malformed_messages_refused() -> None:
    vdaf = ddp_like()
    nonce, public, (leader, helper) = wire_report(vdaf, [3] * 20)
    size = vdaf.field.ENCODED_SIZE
    for bad_leader in (leader[:-1], leader + b"\0", b""):
        with pytest.raises(ValueError):
            vdaf.decode_input_share(0, bad_leader)
    overflow = vdaf.field.MODULUS.to_bytes(size, "little") + leader[size:]
    with pytest.raises(ValueError, match="modulus overflow"):
        vdaf.decode_input_share(0, overflow)
    for bad_helper in (helper[:-1], helper + b"\0"):
        with pytest.raises(ValueError):
            vdaf.decode_input_share(1, bad_helper)
    with pytest.raises(ValueError):
        vdaf.decode_input_share(2, helper)
    with pytest.raises(ValueError):
        vdaf.decode_public_share(public[:-1])
    with pytest.raises(ValueError):
        vdaf.decode_verifier_message(b"\0" * 31)
    with pytest.raises(ValueError):
        vdaf.decode_verifier_share(b"\0" * 5)
    # a helper share handed to the leader (or the reverse) is refused, not misread
    key = secrets.token_bytes(32)
    pub = vdaf.decode_public_share(public)
    with pytest.raises(ValueError):
        vdaf.verify_init(key, CTX, 0, nonce, pub, HelperShare(helper[:32], helper[32:]))
    with pytest.raises(ValueError):
        vdaf.verify_init(key, CTX, 1, nonce, pub, vdaf.decode_input_share(0, leader))
    assert isinstance(vdaf.decode_input_share(0, leader), LeaderShare)
    with pytest.raises(ValueError):
        vdaf.verify_init(key[:-1], CTX, 0, nonce, pub, vdaf.decode_input_share(0, leader))
    with pytest.raises(ValueError):
        vdaf.verify_init(key, CTX, 0, nonce[:-1], pub, vdaf.decode_input_share(0, leader))


def test_leader_share_is_uniform_whatever_the_measurement() -> None:
    """Privacy of the shares, statistically: with sharding randomness from a seeded generator,
    the low 4 bits of every element of the leader's measurement share are uniform on 16 values
    for an all-0 and an all-1 sblb-like report alike (χ² with 15 degrees of freedom over
    600 reports × 20 elements = 12,000 draws, rejected only beyond the 1 − 10⁻⁶ quantile), and
    the two histograms do not differ beyond the same level (χ² homogeneity test)."""
    from scipy import stats

    vdaf = sblb_like()
    gen = np.random.default_rng(np.random.SeedSequence(4242))
    hists = []
    for value in (0, 1):
        counts = np.zeros(16, dtype=np.int64)
        for _ in range(600):
            rand = gen.bytes(vdaf.RAND_SIZE)
            _, shares = vdaf.shard(CTX, [value] * 50, gen.bytes(16), rand)
            leader = shares[0]
            assert isinstance(leader, LeaderShare)
            low = np.array([int(x) & 15 for x in leader.meas_share[:20]])
            counts += np.bincount(low, minlength=16)
        hists.append(counts)
        chi2 = stats.chisquare(counts).statistic
        assert chi2 < stats.chi2.ppf(1 - 1e-6, 15), (value, counts)
    homogeneity = stats.chi2_contingency(np.stack(hists)).statistic
    assert homogeneity < stats.chi2.ppf(1 - 1e-6, 15)
