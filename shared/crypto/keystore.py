"""The analyzer's two private keys (HPKE X25519 and Paillier), each in one file of its data
directory, created exactly once, durably, readable only by its owner, and fingerprinted when made
so that a changed file is refused rather than loaded as another key (``shared.crypto.key_files``:
``KeyFile``, the protocol both use).

``load_hpke_key`` and ``load_paillier_key`` check an existing key file without creating one: the
data directory's start-up check (``services.common.datadir``) runs them before the service opens
anything.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from phe import paillier

from privbandit.shared.crypto.hpke import CryptoError, open_report
from privbandit.shared.crypto.key_files import KeyFile, KeyFileError
from privbandit.shared.crypto.paillier import (
    DEFAULT_KEY_BITS,
    PaillierKeyError,
    check_key_bits,
    generate_keypair,
    key_from_json,
    key_numbers,
    key_to_json,
    open_batch_sum,
    paillier_key_id,
)
from privbandit.shared.crypto.slots import SlotLayout, layout
from privbandit.shared.protocol.messages import EncryptedReport, HpkeConfig, b64encode
from privbandit.shared.protocol.paillier import PaillierConfig, paillier_config

log = logging.getLogger(__name__)

HPKE_KEY_FILE = "hpke_x25519.pem"
PAILLIER_KEY_FILE = "paillier.json"


class HpkeKeyStore:
    """The analyzer's X25519 key pair, created on first start and persisted as PEM (mode 0600).

    The key id is derived from the public key (first byte of its SHA-256), so it needs no extra
    file and changes exactly when the key does.
    """

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self.path = self.directory / HPKE_KEY_FILE
        try:
            self.private_key = KeyFile(self.path, "HPKE").load(parse_x25519_pem, _new_x25519_pem)
        except KeyFileError as exc:
            raise CryptoError(str(exc)) from exc
        self.public_key_bytes = self.private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.key_id = hashlib.sha256(self.public_key_bytes).digest()[0]

    def hpke_config(self) -> HpkeConfig:
        return HpkeConfig(key_id=self.key_id, public_key=b64encode(self.public_key_bytes))

    def open(self, task: str, report: EncryptedReport) -> bytes:
        """``open_report`` with this store's key."""
        return open_report(self.private_key, self.key_id, task, report)


def parse_x25519_pem(pem: bytes) -> X25519PrivateKey:
    """The X25519 private key a PEM file holds (``ValueError`` if it holds none)."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (TypeError, UnsupportedAlgorithm) as exc:  # encrypted; an unknown algorithm's OID
        raise ValueError(str(exc)) from exc
    if not isinstance(key, X25519PrivateKey):
        raise ValueError("not an X25519 private key")
    return key


def load_hpke_key(path: Path) -> X25519PrivateKey:
    """The existing HPKE key file ``path``, checked (``KeyFileError`` naming it)."""
    return KeyFile(path, "HPKE").load(parse_x25519_pem)


def _new_x25519_pem() -> bytes:
    return X25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class PaillierKeyStore:
    """The analyzer's Paillier key pair, created on first start and persisted as JSON (mode 0600)
    next to the HPKE key, by the same create-once protocol (``KeyFile``).

    ``key_bits`` is only used when creating the key; a stored key is loaded as it is (and refused
    if smaller than 2048 bits unless ``allow_small``, for tests)."""

    def __init__(
        self, directory: Path | str, key_bits: int = DEFAULT_KEY_BITS, *, allow_small: bool = False
    ) -> None:
        check_key_bits(key_bits, allow_small)
        self.directory = Path(directory)
        self.path = self.directory / PAILLIER_KEY_FILE

        def make() -> bytes:
            _, private_key = generate_keypair(key_bits, allow_small=allow_small)
            return json.dumps(key_to_json(private_key), indent=1).encode("utf-8")

        try:
            self.private_key = KeyFile(self.path, "Paillier").load(
                lambda data: parse_paillier_key(data, True), make)
        except KeyFileError as exc:
            raise PaillierKeyError(str(exc)) from exc
        # The size is judged here, not in the file check: a small key is sound, only refused.
        check_key_bits(self.private_key.public_key.n.bit_length(), allow_small)
        self.public_key: paillier.PaillierPublicKey = self.private_key.public_key
        self.n = int(self.public_key.n)
        self.key_bits = self.n.bit_length()
        self.key_id = paillier_key_id(self.n)

    def layout(self, c: int, batch_size: int, m: int) -> SlotLayout:
        return layout(c, batch_size, m, self.key_bits)

    def paillier_config(self, task_layout: SlotLayout | None = None) -> PaillierConfig:
        return paillier_config(self.n, task_layout)

    def open_batch_sum(
        self, ciphertexts: Sequence[int], task_layout: SlotLayout, n_reports: int,
        bound: float | None = None,
    ) -> np.ndarray:
        """``open_batch_sum`` with this store's key."""
        return open_batch_sum(self.private_key, ciphertexts, task_layout, n_reports, bound)


def _paillier_json(data: bytes) -> dict[str, Any]:
    """A Paillier key file's JSON object (``ValueError`` if it holds none)."""
    obj = json.loads(data.decode("utf-8"))
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


def parse_paillier_key(data: bytes, allow_small: bool) -> paillier.PaillierPrivateKey:
    """The Paillier private key a JSON key file holds (``ValueError`` if it holds none, or an
    inconsistent one: ``key_numbers`` checks n = p q, so a digit changed in any of them is seen,
    and that p and q are prime; ``allow_small``: accept keys below 2048 bits)."""
    try:
        return key_from_json(_paillier_json(data), allow_small)
    except PaillierKeyError as exc:
        raise ValueError(str(exc)) from exc


def _paillier_numbers(data: bytes) -> tuple[int, int, int]:
    try:
        return key_numbers(_paillier_json(data), allow_small=True, check_primes=False)
    except PaillierKeyError as exc:
        raise ValueError(str(exc)) from exc


def load_paillier_key(path: Path) -> tuple[int, int, int]:
    """The numbers (n, p, q) of the existing Paillier key file ``path``, checked (``KeyFileError``
    naming it) as the start-up check needs: parsed, n = p q, and its fingerprint. Its size and the
    primality of p and q are ``PaillierKeyStore``'s to judge when it loads the key; so is building
    the key (phe's ``PaillierPrivateKey`` precomputes its CRT constants: most of a load's time
    besides the primality test, 30–90 ms at 2048 bits on a loaded machine)."""
    return KeyFile(path, "Paillier").load(_paillier_numbers)
