"""Report encryption: HPKE (RFC 9180) base mode, DHKEM(X25519, HKDF-SHA256) / HKDF-SHA256 /
AES-128-GCM, from ``cryptography.hazmat.primitives.hpke`` (spec §4).

The HPKE ``info`` binds the protocol version, the task id and the key id, so a report sealed for
one task (or key) cannot be replayed into another: decryption fails. The shuffler only ever sees
``EncryptedReport`` objects; only the analyzer holds the private key
(``shared.crypto.keystore.HpkeKeyStore``).

Report plaintext: a 16-byte random report id (OS CSPRNG) ‖ ``Randomizer.to_bytes(row)``. Nothing
else — no device id, no timestamp, no decision id.
"""

from __future__ import annotations

import logging
import secrets

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.hpke import AEAD, KDF, KEM, Suite

from privbandit.shared.core.randomizers.base import Randomizer
from privbandit.shared.protocol.messages import (
    PROTOCOL_VERSION,
    REPORT_ID_BYTES,
    EncryptedReport,
    b64decode,
    b64encode,
)

log = logging.getLogger(__name__)

SUITE = Suite(KEM.X25519, KDF.HKDF_SHA256, AEAD.AES_128_GCM)
# X25519 encapsulated keys are the ephemeral public key: 32 bytes (RFC 9180 §7.1, Nenc).
ENC_BYTES = KEM.X25519.enc_length()
# AES-128-GCM tag length (RFC 9180 §7.3, Nt): the ciphertext is the plaintext plus this.
TAG_BYTES = 16


class CryptoError(Exception):
    """A report could not be opened: wrong key id, malformed fields or failed authentication."""


_P25519 = 2**255 - 19
# u-coordinates (mod p) of the X25519 points of small order, on the curve or its twist
# (RFC 7748 §7; the list libsodium refuses): a DH with one of them gives the all-zero secret.
LOW_ORDER_U = frozenset({
    0, 1, _P25519 - 1,
    325606250916557431795983626356110631294008115727848805560023387167927233504,
    39382357235489614581723060781553021112529911719440698176882885853963445705823,
})


def check_encapsulated_key(enc: bytes) -> None:
    """``CryptoError`` unless ``enc`` can be an honest X25519 encapsulated key: 32 bytes whose
    point (high bit masked and reduced mod p, as RFC 7748 §5 decodes it) is not of small order.
    Costs no curve operation: the shuffler runs it on every report."""
    if len(enc) != ENC_BYTES:
        raise CryptoError(f"an encapsulated key is {ENC_BYTES} bytes, got {len(enc)}")
    u = (int.from_bytes(enc, "little") & ((1 << 255) - 1)) % _P25519
    if u in LOW_ORDER_U:
        raise CryptoError("the encapsulated key is a point of small order")


def hpke_info(task: str, key_id: int, purpose: str = "") -> bytes:
    """The HPKE ``info`` string: binds protocol version, task id and key id, and for anything
    but a report a ``purpose`` (``tag`` for secure-sum report tags), so that one kind of sealed
    message can never be opened as another."""
    info = f"privbandit/{PROTOCOL_VERSION}|task={task}|key={key_id}"
    return (info + (f"|{purpose}" if purpose else "")).encode("ascii")


def ciphertext_length(row_bytes: int) -> int:
    """Length of the AEAD ciphertext (without the encapsulated key) of a report whose randomizer
    row is ``row_bytes`` long. All reports of a task have this length, which is public."""
    return REPORT_ID_BYTES + row_bytes + TAG_BYTES


def row_length(randomizer: Randomizer) -> int:
    """Length of one report row's wire form (``Randomizer.to_bytes``); an all-zero row is a
    valid row for every randomizer (all-zero bits, zero floats, x = 0 and r = 0)."""
    return len(randomizer.to_bytes(np.zeros(randomizer.width)))


def _public_key(public_key: bytes | X25519PublicKey) -> X25519PublicKey:
    if isinstance(public_key, X25519PublicKey):
        return public_key
    if len(public_key) != 32:
        raise CryptoError(f"an X25519 public key is 32 bytes, got {len(public_key)}")
    return X25519PublicKey.from_public_bytes(public_key)


def seal(
    public_key: bytes | X25519PublicKey, key_id: int, task: str, plaintext: bytes,
    purpose: str = "",
) -> EncryptedReport:
    """Encrypt ``plaintext`` to the analyzer's public key for ``task`` (single-shot HPKE)."""
    blob = SUITE.encrypt(plaintext, _public_key(public_key), info=hpke_info(task, key_id, purpose))
    # The single-shot API returns enc ‖ ct; the wire format carries them as separate fields.
    return EncryptedReport(
        key_id=key_id, enc=b64encode(blob[:ENC_BYTES]), ct=b64encode(blob[ENC_BYTES:])
    )


def open_report(
    private_key: X25519PrivateKey, key_id: int, task: str, report: EncryptedReport,
    purpose: str = "",
) -> bytes:
    """Decrypt one report sealed for (``task``, ``key_id``); raises ``CryptoError`` on any failure
    (unknown key id, malformed base64 or lengths, tampered ciphertext, other task or key)."""
    if report.key_id != key_id:
        raise CryptoError(f"report is for key id {report.key_id}, this analyzer holds {key_id}")
    try:
        enc = b64decode(report.enc)
        ct = b64decode(report.ct)
    except ValueError as exc:
        raise CryptoError(f"malformed report encoding: {exc}") from exc
    if len(enc) != ENC_BYTES:
        raise CryptoError(f"encapsulated key must be {ENC_BYTES} bytes, got {len(enc)}")
    if len(ct) < TAG_BYTES:
        raise CryptoError("ciphertext shorter than the AEAD tag")
    try:
        return SUITE.decrypt(enc + ct, private_key, info=hpke_info(task, key_id, purpose))
    except (InvalidTag, ValueError) as exc:
        raise CryptoError(
            "report failed HPKE authentication (tampered, or sealed for another task/key)"
        ) from exc


def pack_report(row_bytes: bytes) -> tuple[bytes, bytes]:
    """(report id, plaintext) for one randomized row: a fresh 16-byte id from the OS CSPRNG."""
    report_id = secrets.token_bytes(REPORT_ID_BYTES)
    return report_id, report_id + bytes(row_bytes)


def unpack_report(plaintext: bytes, expected_len: int) -> tuple[bytes, bytes]:
    """Split a plaintext into (report id, row bytes); ``expected_len`` is the row's wire length."""
    if len(plaintext) != REPORT_ID_BYTES + expected_len:
        raise CryptoError(
            f"report plaintext must be {REPORT_ID_BYTES + expected_len} bytes, got {len(plaintext)}"
        )
    return plaintext[:REPORT_ID_BYTES], plaintext[REPORT_ID_BYTES:]
