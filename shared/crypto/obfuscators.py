"""Paillier obfuscators r^n mod n², the expensive, message-independent part of an encryption
(``shared.crypto.paillier``).

This module imports nothing but ``gmpy2`` and ``secrets``, so that ``obfuscators`` can run in a
small worker process of its own (the device's refill of its precomputed pool,
``services.device.transports.refiller``), away from the interpreter serving requests.
"""

from __future__ import annotations

import secrets

import gmpy2
from gmpy2 import mpz


def random_unit(n: int) -> int:
    """r uniform in Z*_n from the OS CSPRNG (rejection: r ∈ [1, n), retry while gcd(r, n) ≠ 1,
    which for an RSA modulus happens with probability ≈ 2/√n)."""
    while True:
        r = secrets.randbelow(n - 1) + 1
        if gmpy2.gcd(r, n) == 1:
            return r


def obfuscators(n: int, k: int) -> list[int]:
    """``k`` fresh obfuscators r^n mod n² (each from its own uniform r ∈ Z*_n): secret values,
    each to be used for exactly one encryption under the modulus ``n``."""
    modulus = mpz(n)
    square = modulus * modulus
    with gmpy2.context(allow_release_gil=True):
        return [int(gmpy2.powmod(mpz(random_unit(n)), modulus, square)) for _ in range(k)]
