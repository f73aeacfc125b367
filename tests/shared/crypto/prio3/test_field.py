"""Field64 / Field128 against plain modular arithmetic: the NTT and its inverse against the
O(n²) definition, the coset NTT, doubling of evaluations, evaluation in the Lagrange basis,
completion of missing evaluations, the vector encoding, and the XOF's rejection sampling
(a chunk ≥ p is skipped and the next one taken, in stream order). Seeded generators."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.shared.crypto.prio3.circuits import SumVec
from privbandit.shared.crypto.prio3.field import Field, Field64, Field128
from privbandit.shared.crypto.prio3.flp import Flp
from privbandit.shared.crypto.prio3.xof import Xof

FIELDS = [Field64, Field128]


def rand_ints(field: type[Field], n: int, seed: int) -> list[int]:
    """n uniform-ish elements from a seeded generator (three 63-bit words folded)."""
    gen = np.random.default_rng(np.random.SeedSequence(seed))
    words = gen.integers(0, 2**63, size=(n, 3), dtype=np.int64).tolist()
    return [((a << 70) ^ (b << 35) ^ c) % field.MODULUS for a, b, c in words]


def naive_eval(field: type[Field], coeffs: list[int], x: int) -> int:
    p = field.MODULUS
    return sum(c * pow(x, i, p) for i, c in enumerate(coeffs)) % p


@pytest.mark.parametrize("field", FIELDS)
def test_parameters(field: type[Field]) -> None:
    p = field.MODULUS
    assert pow(field.GENERATOR, field.GEN_ORDER, p) == 1
    assert pow(field.GENERATOR, field.GEN_ORDER // 2, p) == p - 1  # order exactly GEN_ORDER
    assert (p - 1) % field.GEN_ORDER == 0
    assert p < 2 ** (8 * field.ENCODED_SIZE)


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("n", [1, 2, 8, 32])
def test_ntt_matches_definition(field: type[Field], n: int) -> None:
    p = field.MODULUS
    coeffs = rand_ints(field, max(1, n - 1), 11 + n)
    w, s = field.nth_root(n), field.nth_root(2 * n)
    got = field.ntt(field.vec(coeffs), n)
    assert list(got) == [naive_eval(field, coeffs, pow(w, k, p)) for k in range(n)]
    coset = field.ntt(field.vec(coeffs), n, set_s=True)
    assert list(coset) == [naive_eval(field, coeffs, s * pow(w, k, p) % p) for k in range(n)]
    back = field.inv_ntt(got, n)
    assert list(back) == coeffs + [0] * (n - len(coeffs))
    # rows of a matrix are transformed independently
    m = field.vec([coeffs, coeffs[::-1]])
    assert list(field.ntt(m, n)[1]) == list(field.ntt(field.vec(coeffs[::-1]), n))


@pytest.mark.parametrize("field", FIELDS)
def test_lagrange_operations(field: type[Field]) -> None:
    p = field.MODULUS
    n = 16
    coeffs = rand_ints(field, n, 5)
    values = field.ntt(field.vec(coeffs), n)
    assert list(field.double_evaluations(values)) == list(field.ntt(field.vec(coeffs), 2 * n))
    for x in rand_ints(field, 4, 6) + [1, 0]:
        assert field.poly_eval_lagrange(values, x) == naive_eval(field, coeffs, x)
    # degree < L polynomials: the missing n − L evaluations are recovered (L = n − 1 fast path
    # and the general algorithm)
    for length in (n - 1, n - 3, 9):
        low = rand_ints(field, length, length)
        vals = field.ntt(field.vec(low), n)
        assert list(field.extend_values_to_power_of_2(vals[:length], n)) == list(vals)
    assert field.inv(7) * 7 % p == 1


@pytest.mark.parametrize("field", FIELDS)
def test_encoding(field: type[Field]) -> None:
    vals = rand_ints(field, 9, 3) + [0, field.MODULUS - 1]
    enc = field.encode_vec(field.vec(vals))
    assert enc == b"".join(v.to_bytes(field.ENCODED_SIZE, "little") for v in vals)
    assert list(field.decode_vec(enc)) == vals
    with pytest.raises(ValueError):
        field.decode_vec(enc[:-1])
    with pytest.raises(ValueError, match="modulus overflow"):
        field.decode_vec(field.MODULUS.to_bytes(field.ENCODED_SIZE, "little"))


class _Scripted(Xof):
    """A stream of fixed bytes: to drive rejection sampling deterministically."""

    SEED_SIZE = 0

    def __init__(self, seed: bytes, dst: bytes, binder: bytes) -> None:
        self.data, self.pos = seed, 0

    def next(self, length: int) -> bytes:
        out = self.data[self.pos : self.pos + length]
        self.pos += length
        return out


def test_next_vec_rejects_chunks_at_or_above_p_in_order() -> None:
    p = Field64.MODULUS
    chunks = [5, p, 2**64 - 1, 6, p + 1, 7]
    stream = b"".join(c.to_bytes(8, "little") for c in chunks)
    assert list(_Scripted(stream, b"", b"").next_vec(Field64, 3)) == [5, 6, 7]


@pytest.mark.parametrize("field", FIELDS)
def test_flp_alone_accepts_valid_and_rejects_invalid(field: type[Field]) -> None:
    """The FLP without sharing (num_shares = 1), as the spec's run_flp."""
    flp = Flp(SumVec(field, 6, 5, 3))
    gen = np.random.default_rng(np.random.SeedSequence(99))

    def run(meas: object) -> bool:
        prove_rand = field.vec(rand_ints(field, flp.PROVE_RAND_LEN, int(gen.integers(1e9))))
        joint_rand = field.vec(rand_ints(field, flp.JOINT_RAND_LEN, int(gen.integers(1e9))))
        query_rand = field.vec(rand_ints(field, flp.QUERY_RAND_LEN, int(gen.integers(1e9))))
        m = field.vec(meas)
        proof = flp.prove(m, prove_rand, joint_rand)
        assert len(proof) == flp.PROOF_LEN
        verifier = flp.query(m, proof, query_rand, joint_rand, 1)
        assert len(verifier) == flp.VERIFIER_LEN
        return flp.decide(verifier)

    valid = flp.encode([0, 1, 2, 3, 4, 5])
    assert run(valid)
    for i in range(flp.MEAS_LEN):
        bad = valid.copy()
        bad[i] = 2
        assert not run(bad)
