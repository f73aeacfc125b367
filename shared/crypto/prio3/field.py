"""Prime fields of the VDAF specification (draft-irtf-cfrg-vdaf-18…20, §6.1 "Finite Fields").

A field element is a Python ``int`` in [0, MODULUS); a vector of elements is a NumPy array of
``dtype=object`` holding such ints, so that every vector operation (``+``, ``*``, ``%``) runs in
NumPy's loop over exact, arbitrary-precision integers: there is no floating point anywhere, and a
product of two 128-bit elements (256 bits) is reduced exactly by ``% MODULUS``.

Why object arrays and not split 32-bit limbs in ``uint64``: the proof system's hot loops are short
(vectors of tens to a few hundred elements, NTTs of 16–128 points) so the per-call overhead of a
NumPy operation dominates, and one object-array operation costs the same for Field64 and
Field128; ``bench/prio3.py`` measures the two for Field64 multiplication (``--limbs``).

The NTT-friendly interface (§6.1.2) and the Lagrange-basis operations (§6.1.3, [Faz25]) that the
FLP of §7.3 needs are here, vectorised over the leading axes: a matrix of shape (rows, n) is n
evaluations (or coefficients) of ``rows`` polynomials, transformed together.

Parameters (§6.1.4, table "fields"):

    Field64:  p = 2^32 · 4294967295 + 1,           8 bytes, generator 7^4294967295 of order 2^32
    Field128: p = 2^66 · 4611686018427387897 + 1, 16 bytes, generator 7^4611686018427387897,
              order 2^66
"""

from __future__ import annotations

from functools import cache
from typing import Any, ClassVar, cast

import numpy as np
import numpy.typing as npt

FVec = npt.NDArray[np.object_]
_MASK64 = (1 << 64) - 1


def _any(x: object) -> Any:
    """``x`` for arithmetic on object arrays, whose results NumPy's stubs cannot type."""
    return x


def _vec(x: object) -> FVec:
    """The result of object-array arithmetic, typed as the vector it is."""
    return cast(FVec, x)
"""A vector (or matrix) of field elements: Python ints in [0, p), ``dtype=object``."""


def next_power_of_2(x: int) -> int:
    """The smallest power of two ≥ x (x ≥ 1)."""
    if x < 1:
        raise ValueError("next_power_of_2 needs x >= 1")
    return 1 << (x - 1).bit_length()


def log2_exact(n: int) -> int:
    """log2(n) for a positive power of two n; ValueError otherwise (spec: assert_power_of_2)."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"{n} is not a positive power of two")
    return n.bit_length() - 1


class Field:
    """An NTT-friendly prime field (§6.1, §6.1.2). Used through its subclasses as a namespace:
    ``Field128.mul(a, b)``; elements are ints, vectors are object arrays (``FVec``)."""

    MODULUS: ClassVar[int]
    ENCODED_SIZE: ClassVar[int]
    GEN_ORDER: ClassVar[int]
    # generator of the multiplicative subgroup of order GEN_ORDER (a power of two)
    GENERATOR: ClassVar[int]

    # -- vectors --------------------------------------------------------------------------------

    @classmethod
    def vec(cls, values: object) -> FVec:
        """Vector from ints, reduced into [0, p) (negative ints are negations, as Field(int))."""
        arr = np.array(values, dtype=object)
        return arr % cls.MODULUS

    @classmethod
    def zeros(cls, length: int) -> FVec:
        """The zero vector of ``length`` elements."""
        out = np.empty(length, dtype=object)
        out[:] = 0
        return out

    @classmethod
    def encode_vec(cls, vec: FVec) -> bytes:
        """Each element as ENCODED_SIZE little-endian bytes, concatenated (§6.1.1 encode_vec)."""
        flat = vec.ravel()
        words = [
            ((flat >> (64 * k)) & _MASK64).astype(np.uint64) for k in range(cls.ENCODED_SIZE // 8)
        ]
        # little-endian 64-bit words, low word first: the element's little-endian bytes
        return np.stack(words, axis=-1).astype("<u8").tobytes()

    @classmethod
    def decode_vec(cls, encoded: bytes) -> FVec:
        """Inverse of ``encode_vec``; ValueError if the length is not a multiple of the element
        size or an element is ≥ p (§6.1.1 decode_vec: "modulus overflow")."""
        size = cls.ENCODED_SIZE
        if len(encoded) % size:
            raise ValueError("input length must be a multiple of the size of an encoded element")
        out = cls._ints_from_le(encoded)
        if out.size and (out >= cls.MODULUS).any():
            raise ValueError("modulus overflow")
        return out

    @classmethod
    def _ints_from_le(cls, encoded: bytes) -> FVec:
        """The little-endian ENCODED_SIZE-byte integers of ``encoded`` as an object array
        (vectorised: 64-bit words read by NumPy, combined as exact ints)."""
        words = np.frombuffer(encoded, dtype="<u8").reshape(-1, cls.ENCODED_SIZE // 8)
        out = words[:, 0].astype(object)
        for k in range(1, words.shape[1]):
            out = out + (words[:, k].astype(object) << (64 * k))
        return out

    # -- arithmetic on vectors (exact ints, one reduction per operation) ------------------------

    @classmethod
    def add(cls, a: FVec | int, b: FVec | int) -> FVec:
        """a + b mod p, elementwise."""
        return _vec((_any(a) + b) % cls.MODULUS)

    @classmethod
    def sub(cls, a: FVec | int, b: FVec | int) -> FVec:
        """a − b mod p, elementwise."""
        return _vec((_any(a) - b) % cls.MODULUS)

    @classmethod
    def mul(cls, a: FVec | int, b: FVec | int) -> FVec:
        """a · b mod p, elementwise."""
        return _vec((_any(a) * b) % cls.MODULUS)

    @classmethod
    def dot(cls, m: FVec, v: FVec) -> FVec:
        """m @ v mod p (exact: the sum of products is a Python int before the one reduction)."""
        return np.dot(m, v) % cls.MODULUS

    @classmethod
    def total(cls, a: FVec, axis: int | None = None) -> FVec:
        """Σ a mod p along ``axis``."""
        return _vec(_any(np.sum(a, axis=axis)) % cls.MODULUS)

    @classmethod
    def inv(cls, x: int) -> int:
        """x⁻¹ mod p (x ≠ 0)."""
        return pow(int(x), -1, cls.MODULUS)

    # -- NTT-friendly interface (§6.1.2) --------------------------------------------------------

    @classmethod
    def nth_root(cls, n: int) -> int:
        """The principal n-th root of unity W_n = gen^(GEN_ORDER / n) (n a power of two)."""
        log2_exact(n)
        if n > cls.GEN_ORDER:
            raise ValueError("n exceeds the order of the generator")
        return pow(cls.GENERATOR, cls.GEN_ORDER // n, cls.MODULUS)

    @classmethod
    def nth_root_powers(cls, n: int) -> FVec:
        """[W_n^0, …, W_n^(n−1)] (read-only: cached per field and n)."""
        return _root_powers(cls, n)

    @classmethod
    def ntt(cls, coeffs: FVec, n: int, set_s: bool = False) -> FVec:
        """Evaluations v[i] = p(W_n^i) of the polynomial(s) with coefficients ``coeffs`` (last
        axis, length ≤ n, zero-padded); with ``set_s``, v[i] = p(s · W_n^i), s = W_{2n}."""
        log_n = log2_exact(n)
        p = cls.MODULUS
        length = coeffs.shape[-1]
        if length > n:
            raise ValueError("more coefficients than evaluation points")
        a = np.empty(coeffs.shape[:-1] + (n,), dtype=object)
        a[..., :length] = coeffs
        a[..., length:] = 0
        if set_s:
            # p(s x) has coefficients c_i s^i
            a = a * _root_powers(cls, 2 * n)[:n] % p
        # iterative Cooley–Tukey, decimation in time: bit-reversed input, log n butterfly stages
        a = a[..., _bit_reverse(n)]
        for stage in range(1, log_n + 1):
            m = 1 << stage
            half = m >> 1
            tw = _root_powers(cls, m)[:half]
            blocks = a.reshape(a.shape[:-1] + (n // m, m))
            u = blocks[..., :half]
            v = blocks[..., half:] * tw % p
            # lazy reduction: sums and differences are left unreduced (they grow by at most
            # one bit per stage; the product above brings them back below p); one final % p
            a = np.concatenate((u + v, u - v), axis=-1).reshape(a.shape)
        return a % p

    @classmethod
    def inv_ntt(cls, values: FVec, n: int) -> FVec:
        """Coefficients of the polynomial(s) of degree < n whose evaluations at W_n^i are
        ``values`` (last axis, length n): c[k] = n⁻¹ Σ_i v[i] W_n^(−ik)."""
        if values.shape[-1] != n:
            raise ValueError("inv_ntt needs exactly n values")
        forward = cls.ntt(values, n)
        # Σ_i v[i] W^(-ik) is the forward transform at index −k mod n
        idx = (-np.arange(n)) % n
        return forward[..., idx] * cls.inv(n) % cls.MODULUS

    # -- Lagrange basis (§6.1.3) ----------------------------------------------------------------

    @classmethod
    def double_evaluations(cls, values: FVec) -> FVec:
        """2n evaluations (at W_{2n}^k, k < 2n) of the polynomial(s) of degree < n given by their
        n evaluations at W_n^i: the even points are the inputs, the odd ones
        W_{2n}^(2i+1) = s · W_n^i come from ntt(inv_ntt(v), n, set_s=True) (spec
        Lagrange.double_evaluations)."""
        n = values.shape[-1]
        odd = cls.ntt(cls.inv_ntt(values, n), n, set_s=True)
        out = np.empty(values.shape[:-1] + (2 * n,), dtype=object)
        out[..., 0::2] = values
        out[..., 1::2] = odd
        return out

    @classmethod
    def lagrange_weights(cls, n: int, x: int) -> FVec:
        """c with p(x) = Σ_i c[i] v[i] for every polynomial p of degree < n given by its values
        v[i] = p(W_n^i). With the nodes w_i = W_n^i, the Lagrange basis is
        L_i(x) = Π_{j≠i} (x − w_j)/(w_i − w_j) = (w_i / n) Π_{j≠i} (x − w_j)
        (since Π_{j≠i}(w_i − w_j) = n / w_i); written with (w_j − x) as in spec
        Lagrange.poly_eval_batched: c[i] = (−1)^(n−1) n⁻¹ w_i Π_{j≠i} (w_j − x). No inversion of
        (x − w_j), so x may be any element."""
        p = cls.MODULUS
        nodes = _root_powers(cls, n)
        d = [(int(w) - x) % p for w in nodes]
        prefix = [1] * (n + 1)
        for i in range(n):
            prefix[i + 1] = prefix[i] * d[i] % p
        suffix = [1] * (n + 1)
        for i in range(n - 1, -1, -1):
            suffix[i] = suffix[i + 1] * d[i] % p
        factor = (p - 1 if (n - 1) % 2 else 1) * cls.inv(n) % p
        out = np.empty(n, dtype=object)
        for i in range(n):
            out[i] = factor * int(nodes[i]) % p * prefix[i] % p * suffix[i + 1] % p
        return out

    @classmethod
    def poly_eval_lagrange(cls, values: FVec, x: int) -> FVec:
        """Evaluation at x of the polynomial(s) given by n = len(last axis) values at the n-th
        roots of unity (spec Lagrange.poly_eval / poly_eval_batched)."""
        n = values.shape[-1]
        log2_exact(n)
        return cls.dot(values, cls.lagrange_weights(n, x))

    @classmethod
    def extend_values_to_power_of_2(cls, values: FVec, n: int) -> FVec:
        """Given the first L = len(values) evaluations p(W_n^0 … W_n^(L−1)) of a polynomial of
        degree < L, the n evaluations p(W_n^0 … W_n^(n−1)) (spec
        Lagrange.extend_values_to_power_of_2).

        One missing value (the case of every degree-2 gadget: L = 2(P−1)+1 = n − 1): the
        coefficient of x^(n−1) is n⁻¹ Σ_i v_i W^(−i(n−1)) = n⁻¹ Σ_i v_i W^i and is zero, so
        v_(n−1) = −W · Σ_(i<n−1) v_i W^i. Otherwise the spec's incremental algorithm."""
        log2_exact(n)
        length = values.shape[-1]
        if length > n:
            raise ValueError("more values than points")
        if length == n:
            return values.copy()
        p = cls.MODULUS
        nodes = _root_powers(cls, n)
        if length == n - 1:
            s = cls.dot(values, nodes[: n - 1])
            last = (-int(nodes[1]) * s) % p
            return np.concatenate((values, np.array([last], dtype=object)))
        x = [int(w) for w in nodes]
        vals = [int(v) for v in values]
        w = [0] * n
        for i in range(length):
            prod = 1
            for j in range(length):
                if i != j:
                    prod = prod * (x[i] - x[j]) % p
            w[i] = prod
        for k in range(length, n):
            for i in range(k):
                w[i] = w[i] * (x[i] - x[k]) % p
            y_num, y_den = 0, 1
            for i, v in enumerate(vals):
                y_num = (y_num * w[i] + y_den * v) % p
                y_den = y_den * w[i] % p
            prod = 1
            for j in range(k):
                prod = prod * (x[k] - x[j]) % p
            w[k] = prod
            vals.append(-w[k] * y_num * cls.inv(y_den) % p)
        return np.array(vals, dtype=object)


class Field64(Field):
    """GF(p), p = 2^32 · (2^32 − 1) + 1 = 2^64 − 2^32 + 1 (§6.1.4)."""

    MODULUS = 2**32 * 4294967295 + 1
    ENCODED_SIZE = 8
    GEN_ORDER = 2**32
    GENERATOR = pow(7, 4294967295, MODULUS)


class Field128(Field):
    """GF(p), p = 2^66 · 4611686018427387897 + 1 (§6.1.4)."""

    MODULUS = 2**66 * 4611686018427387897 + 1
    ENCODED_SIZE = 16
    GEN_ORDER = 2**66
    GENERATOR = pow(7, 4611686018427387897, MODULUS)


def _root_powers(field: type[Field], n: int) -> FVec:
    """[W_n^i for i < n], computed once per field and n (read-only array)."""
    return _root_powers_of(field.MODULUS, field.nth_root(n), n)


@cache
def _root_powers_of(modulus: int, w: int, n: int) -> FVec:
    out = np.empty(n, dtype=object)
    acc = 1
    for i in range(n):
        out[i] = acc
        acc = acc * w % modulus
    out.setflags(write=False)
    return out


@cache
def _bit_reverse(n: int) -> npt.NDArray[np.intp]:
    """The bit-reversal permutation of range(n) (n a power of two)."""
    bits = log2_exact(n)
    idx = np.arange(n)
    rev = np.zeros(n, dtype=np.intp)
    for b in range(bits):
        rev |= ((idx >> b) & 1) << (bits - 1 - b)
    rev.setflags(write=False)
    return rev
