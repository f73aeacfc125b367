"""The analyzer's two private keys (HPKE X25519 and Paillier), each in one file of its data
directory, created exactly once, durably, readable only by its owner.

``KeyFile`` is the one create-once protocol both use: write to a fresh temporary file with mode
0600, fsync it, then ``link()`` it into place — ``link`` fails if the key already exists, so two
processes starting at once agree on one key — and fsync the directory so the new name survives a
crash. A key file readable by others is tightened to 0600 with a warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from phe import paillier

from privbandit.shared.crypto.hpke import CryptoError, open_report
from privbandit.shared.crypto.paillier import (
    DEFAULT_KEY_BITS,
    PaillierKeyError,
    check_key_bits,
    generate_keypair,
    key_from_json,
    key_to_json,
    open_batch_sum,
    paillier_key_id,
)
from privbandit.shared.crypto.slots import SlotLayout, layout
from privbandit.shared.protocol.messages import EncryptedReport, HpkeConfig, b64encode
from privbandit.shared.protocol.secure_sum import PaillierConfig, paillier_config

log = logging.getLogger(__name__)

HPKE_KEY_FILE = "hpke_x25519.pem"
PAILLIER_KEY_FILE = "paillier.json"


def create_private_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (mode 0600) unless ``path`` already exists."""
    directory = path.parent
    tmp = directory / f".{path.name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class KeyFile:
    """One private key file: ``read()`` its bytes, creating it first with ``make()`` if absent."""

    def __init__(self, path: Path, kind: str) -> None:
        self.path = path
        self.kind = kind

    def read(self, make: Callable[[], bytes]) -> bytes:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            create_private_file(self.path, make())
        mode = stat.S_IMODE(self.path.stat().st_mode)
        if mode & 0o077:
            # A key readable by others is a misconfiguration; tighten it rather than refuse.
            log.warning("%s key %s had mode %o; setting 0600", self.kind, self.path, mode)
            os.chmod(self.path, 0o600)
        return self.path.read_bytes()


class HpkeKeyStore:
    """The analyzer's X25519 key pair, created on first start and persisted as PEM (mode 0600).

    The key id is derived from the public key (first byte of its SHA-256), so it needs no extra
    file and changes exactly when the key does.
    """

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self.path = self.directory / HPKE_KEY_FILE
        pem = KeyFile(self.path, "HPKE").read(_new_x25519_pem)
        key = serialization.load_pem_private_key(pem, password=None)
        if not isinstance(key, X25519PrivateKey):
            raise CryptoError(f"{self.path} does not hold an X25519 private key")
        self.private_key = key
        self.public_key_bytes = key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.key_id = hashlib.sha256(self.public_key_bytes).digest()[0]

    def hpke_config(self) -> HpkeConfig:
        return HpkeConfig(key_id=self.key_id, public_key=b64encode(self.public_key_bytes))

    def open(self, task: str, report: EncryptedReport) -> bytes:
        """``open_report`` with this store's key."""
        return open_report(self.private_key, self.key_id, task, report)


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
            data = json.loads(KeyFile(self.path, "Paillier").read(make).decode("utf-8"))
        except (OSError, ValueError) as exc:
            raise PaillierKeyError(f"cannot read {self.path}: {exc}") from exc
        if not isinstance(data, dict):
            raise PaillierKeyError(f"{self.path} does not hold a Paillier key")
        self.private_key = key_from_json(data, allow_small)
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
