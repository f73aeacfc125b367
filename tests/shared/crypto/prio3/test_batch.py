"""The batch verification path (shared/crypto/prio3/batch.py) against the spec's single-report
path, byte for byte: on random reports of every variant (valid ones and invalid ones mixed in
one batch, each refused alone, at the step the single path refuses it), on the published test
vectors' reports, and the building blocks (rejection sampling, Lagrange weights, extension)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from privbandit.shared.crypto.prio3 import batch as B
from privbandit.shared.crypto.prio3 import prio3 as P
from privbandit.shared.crypto.prio3.field import Field, Field64, Field128
from privbandit.shared.crypto.prio3.xof import XofTurboShake128
from privbandit.shared.crypto.prio3_task import sum_vec

from .test_vectors import VDAF_FILES, instantiate, load

CTX = b"privbandit batch test"

Gen = Callable[[np.random.Generator], Any]

# (name, vdaf, an honest measurement, an invalid encoded measurement)
VARIANTS: list[tuple[str, P.Prio3[Any, Any], Gen, Gen]] = [
    ("ddp-linucb SumVec", sum_vec(20, 1310),
     lambda g: [int(x) for x in g.integers(0, 1311, 20)],
     lambda g: [int(x) for x in g.integers(0, 3, 220)]),
    ("sblb SumVec", sum_vec(20, 1),
     lambda g: [int(x) for x in g.integers(0, 2, 20)],
     lambda g: [20] + [0] * 19),
    ("Count", P.prio3_count(), lambda g: int(g.integers(0, 2)), lambda g: [2]),
    ("Sum", P.prio3_sum(100), lambda g: int(g.integers(0, 101)),
     lambda g: [2] + [0] * 6),
    ("SumVec 3 shares", P.prio3_sum_vec(5, 7, 4, shares=3),
     lambda g: [int(x) for x in g.integers(0, 8, 5)], lambda g: [1] * 14 + [5]),
    ("Histogram", P.prio3_histogram(7, 3), lambda g: int(g.integers(0, 7)),
     lambda g: [1, 1, 0, 0, 0, 0, 0]),
    ("MultihotCountVec", P.prio3_multihot_count_vec(6, 3, 2),
     lambda g: [bool(x) for x in g.permutation([1, 1, 0, 0, 0, 0])],
     lambda g: [1, 1, 1, 1, 0, 0, 0, 0]),
    ("SumVecWithMultiproof Field64", P.prio3_sum_vec_multiproof(Field64, 3, 10, 3, 4),
     lambda g: [int(x) for x in g.integers(0, 4, 10)], lambda g: [3] + [0] * 19),
]


def single(vdaf: P.Prio3[Any, Any], key: bytes, agg: int, nonce: bytes, public: Any,
           share: P.InputShare) -> Any:
    try:
        return vdaf.verify_init(key, CTX, agg, nonce, public, share)
    except ValueError as exc:
        return exc


@pytest.mark.parametrize("case", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_batch_equals_single_on_random_reports(
        case: tuple[str, P.Prio3[Any, Any], Gen, Gen]) -> None:
    """A batch of 24 reports: 18 honest, 3 proving an invalid measurement, 2 with a tampered
    leader proof share, 1 with a public share whose helper part is wrong. Every aggregator's
    verify_init rows, and the combined messages, equal the single path's report by report;
    exactly the 6 bad ones are refused, each at the step the single path refuses it."""
    _, vdaf, honest, invalid = case
    rng = np.random.default_rng(np.random.SeedSequence(2305))
    key = secrets.token_bytes(vdaf.VERIFY_KEY_SIZE)
    f = vdaf.field
    reports = []
    kinds = ["honest"] * 18 + ["invalid"] * 3 + ["tampered"] * 2 + ["bad_public"]
    for kind in kinds:
        nonce = secrets.token_bytes(16)
        if kind == "invalid":
            public, shares = vdaf.shard_encoded(CTX, f.vec(invalid(rng)), nonce)
        else:
            public, shares = vdaf.shard(CTX, honest(rng), nonce)
        if kind == "tampered":
            leader = shares[0]
            assert isinstance(leader, P.LeaderShare)
            proofs = leader.proofs_share.copy()
            proofs[-1] = (proofs[-1] + 1) % f.MODULUS
            shares = [P.LeaderShare(leader.meas_share, proofs, leader.blind), *shares[1:]]
        if kind == "bad_public" and public is not None:
            public = [public[0], secrets.token_bytes(32), *public[2:]]
        reports.append((nonce, public, shares))
    order = rng.permutation(len(reports))
    reports = [reports[i] for i in order]
    kinds = [kinds[i] for i in order]
    nonces = [r[0] for r in reports]
    publics = [r[1] for r in reports]

    ref = [[single(vdaf, key, a, n, p, s[a]) for n, p, s in reports]
           for a in range(vdaf.SHARES)]
    rows = [B.leader_verify_init_rows(vdaf, key, CTX, nonces, publics,
                                      [vdaf.encode_input_share(s[0]) for _, _, s in reports])]
    rows += [B.helper_verify_init_rows(vdaf, key, CTX, a, nonces, publics,
                                       [s[a] for _, _, s in reports])
             for a in range(1, vdaf.SHARES)]
    for a in range(vdaf.SHARES):
        for i, r in enumerate(ref[a]):
            assert rows[a].errors[i] is None and not isinstance(r, ValueError)
            state, vshare = r
            assert (vdaf.encode_verifier_share(rows[a].verifier_share(i))
                    == vdaf.encode_verifier_share(vshare))
            assert rows[a].state(i).corrected_joint_rand_seed == state.corrected_joint_rand_seed
            assert f.encode_vec(rows[a].out_shares[i]) == f.encode_vec(state.out_share)

    messages = B.verifier_shares_to_message_rows(
        vdaf, CTX, [r.verifiers for r in rows], [r.parts for r in rows])
    refused = []
    for i in range(len(reports)):
        try:
            expected = vdaf.verifier_shares_to_message(CTX, [ref[a][i][1]
                                                             for a in range(vdaf.SHARES)])
            for a in range(vdaf.SHARES):
                vdaf.verify_next(ref[a][i][0], expected)
        except P.VerifyError as exc:
            got = messages[i]
            if isinstance(exc, P.VerifyError) and "proof" in str(exc):
                assert isinstance(got, P.VerifyError)
            else:  # the joint randomness check of verify_next
                assert isinstance(got, bytes)
                assert any(rows[a].state(i).corrected_joint_rand_seed != got
                           for a in range(vdaf.SHARES))
            refused.append(kinds[i])
            continue
        assert messages[i] == expected
    expected_refused = ["invalid"] * 3 + ["tampered"] * 2
    if vdaf.uses_joint_rand:
        expected_refused.append("bad_public")
    assert sorted(refused) == sorted(expected_refused)


@pytest.mark.parametrize("name", VDAF_FILES)
def test_batch_on_test_vectors(name: str) -> None:
    """The published vectors' reports as one batch per aggregator: the verifier shares, the
    verifier messages and the output shares the vector lists (those of the single path, which
    test_vectors checks), and a negative vector's report refused at its step."""
    tv = load(name)
    vdaf = instantiate(name, tv)
    ctx = bytes.fromhex(tv["ctx"])
    key = bytes.fromhex(tv["verify_key"])
    reports = tv["reports"]
    nonces = [bytes.fromhex(r["nonce"]) for r in reports]
    publics = [vdaf.decode_public_share(bytes.fromhex(r["public_share"])) for r in reports]
    rows = [B.leader_verify_init_rows(vdaf, key, ctx, nonces, publics,
                                      [bytes.fromhex(r["input_shares"][0]) for r in reports])]
    for a in range(1, vdaf.SHARES):
        shares = [vdaf.decode_input_share(a, bytes.fromhex(r["input_shares"][a]))
                  for r in reports]
        rows.append(B.helper_verify_init_rows(vdaf, key, ctx, a, nonces, publics, shares))
    inits = [op for op in tv["operations"] if op["operation"] == "verify_init"]
    assert inits
    for op in inits:
        i, a = op["report_index"], op["aggregator_id"]
        if not op["success"]:
            assert rows[a].errors[i] is not None
            continue
        assert rows[a].errors[i] is None
        assert (vdaf.encode_verifier_share(rows[a].verifier_share(i)).hex()
                == reports[i]["verifier_shares"][0][a])
    if not any(op["operation"] == "verifier_shares_to_message" for op in tv["operations"]):
        return
    published = [[vdaf.decode_verifier_share(bytes.fromhex(h)) for h in r["verifier_shares"][0]]
                 for r in reports]
    mats = [np.stack([published[i][a].verifiers_share for i in range(len(reports))])
            for a in range(vdaf.SHARES)]
    parts = [[published[i][a].joint_rand_part for i in range(len(reports))]
             for a in range(vdaf.SHARES)]
    messages = B.verifier_shares_to_message_rows(vdaf, ctx, mats, parts)
    for op in tv["operations"]:
        i = op.get("report_index")
        if op["operation"] == "verifier_shares_to_message":
            if op["success"]:
                assert (vdaf.encode_verifier_message(messages[i]).hex()  # type: ignore[arg-type]
                        == reports[i]["verifier_messages"][0])
            else:
                assert isinstance(messages[i], P.VerifyError)
        elif op["operation"] == "verify_next":
            a = op["aggregator_id"]
            message = vdaf.decode_verifier_message(bytes.fromhex(
                reports[i]["verifier_messages"][0]))
            if op["success"]:
                out = vdaf.verify_next(rows[a].state(i), message)
                assert vdaf.field.encode_vec(out).hex() == reports[i]["out_shares"][a]
            else:
                with pytest.raises(P.VerifyError):
                    vdaf.verify_next(rows[a].state(i), message)
        elif op["operation"] == "aggregate" and op["success"]:
            a = op["aggregator_id"]
            agg = B.aggregate_rows(vdaf, rows[a].out_shares, np.ones(len(reports), dtype=bool))
            assert vdaf.encode_agg_share(agg).hex() == tv["agg_shares"][a]


def _is_prime(n: int) -> bool:
    """Deterministic Miller–Rabin for n < 3.3·10^24 (these bases suffice)."""
    if n < 2:
        return False
    bases = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
    if n in bases:
        return True
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in bases:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


class _HalfField(Field):
    """A prime just above 2^63 in 8-byte chunks: about half of all chunks are ≥ p, so
    rejection sampling discards often (the spec's fields almost never do)."""

    MODULUS = next(q for q in range(2**63 + 1, 2**63 + 10_000, 2) if _is_prime(q))
    ENCODED_SIZE = 8
    GEN_ORDER = 2
    GENERATOR = MODULUS - 1


@pytest.mark.parametrize("field", [Field64, Field128, _HalfField])
def test_expand_rows_is_expand_into_vec(field: type[Field]) -> None:
    """``expand_rows`` equals the spec's ``expand_into_vec`` row by row, also where rejection
    sampling discards chunks (rows recomputed by the spec's path) — and the rows' encodings."""
    seeds = [secrets.token_bytes(32) for _ in range(40)]
    binders = [secrets.token_bytes(i % 5) for i in range(40)]
    mat, raw = B.expand_rows(XofTurboShake128, field, seeds, b"dst", binders, 9)
    for i in range(40):
        ref = XofTurboShake128.expand_into_vec(field, seeds[i], b"dst", binders[i], 9)
        assert field.encode_vec(mat[i]) == field.encode_vec(ref) == raw[i]


@pytest.mark.parametrize("field", [Field64, Field128])
@pytest.mark.parametrize("n", [2, 8, 32])
def test_lagrange_and_extend_rows(field: type[Field], n: int) -> None:
    rng = np.random.default_rng(np.random.SeedSequence(n))
    xs = field.vec([int(x) for x in rng.integers(0, 2**62, 12)] + [0, 1])
    weights = B.lagrange_weights_rows(field, n, xs)
    for i, x in enumerate(xs):
        assert list(weights[i]) == list(field.lagrange_weights(n, int(x)))
    values = field.vec([[int(x) for x in rng.integers(0, 2**62, n - 1)] for _ in range(5)])
    ext = B.extend_rows(field, values, n)
    for i in range(5):
        assert list(ext[i]) == list(field.extend_values_to_power_of_2(values[i], n))


def test_undecodable_leader_share_is_refused_alone() -> None:
    """A leader share of the wrong length, or with an element ≥ p, is that row's error (as
    ``decode_input_share`` raises it); the other rows verify as alone."""
    vdaf = sum_vec(20, 1)
    key = secrets.token_bytes(32)
    nonces = [secrets.token_bytes(16) for _ in range(4)]
    sharded = [vdaf.shard(CTX, [1] * 20, n) for n in nonces]
    encoded = [vdaf.encode_input_share(s[0]) for _, s in sharded]
    encoded[1] = encoded[1][:-1]
    encoded[2] = b"\xff" * 16 + encoded[2][16:]
    bv = B.leader_verify_init_rows(vdaf, key, CTX, nonces, [p for p, _ in sharded], encoded)
    assert [e is None for e in bv.errors] == [True, False, False, True]
    for i in (1, 2):
        with pytest.raises(ValueError):
            vdaf.decode_input_share(0, encoded[i])
    for i in (0, 3):
        _, share = vdaf.verify_init(key, CTX, 0, nonces[i], sharded[i][0], sharded[i][1][0])
        assert (vdaf.encode_verifier_share(share)
                == vdaf.encode_verifier_share(bv.verifier_share(i)))
    assert Field128.ENCODED_SIZE == 16
