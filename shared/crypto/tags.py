"""Report tags of the ``secure-sum`` transport: a device's report id bound to its ciphertext.

Paillier ciphertexts are malleable: anyone holding c can submit c·rⁿ mod n², a different
ciphertext of the same counts, and a shuffler that de-duplicates by ciphertext bytes would count
it again. So every secure-sum report carries a tag,

    tag = HPKE-seal(report_id ‖ SHA-256("privbandit/paillier-ct|" ‖ ct bytes))

sealed to the analyzer's HPKE key with ``info`` purpose ``tag`` (so it can never be opened as a
report). Only the analyzer can open it; the shuffler refuses a tag it already holds, and forwards
with each batch sum every member's tag and the digest of the ciphertext it actually multiplied.
The analyzer opens each tag, checks that the digest inside matches, and that the report id was
never counted: a re-randomised copy that reuses the victim's tag fails the digest check (or is a
duplicate tag at the shuffler), and the whole batch sum is quarantined, since one report cannot
be taken out of a sum. What a tag cannot stop — a device sealing a fresh id for a re-randomised
copy it observed — needs the copy to be observed first (TLS to the shuffler) or a proof of
plaintext knowledge; docs/services.md (*Secure summation*) says so.
"""

from __future__ import annotations

import hashlib

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from privbandit.shared.crypto.hpke import CryptoError, ciphertext_length, open_report, seal
from privbandit.shared.protocol.messages import REPORT_ID_BYTES, EncryptedReport

TAG_PURPOSE = "tag"
DIGEST_BYTES = 32
# Length of a tag's AEAD ciphertext (report id ‖ digest, plus the AEAD tag): public and fixed.
TAG_CIPHERTEXT_BYTES = ciphertext_length(DIGEST_BYTES)


def ciphertext_digest(ct: bytes) -> bytes:
    """SHA-256 of a report's ciphertext bytes (its wire form, before base64), domain-separated."""
    return hashlib.sha256(b"privbandit/paillier-ct|" + ct).digest()


def make_tag(
    public_key: bytes | X25519PublicKey, key_id: int, task: str, report_id: bytes, ct: bytes
) -> EncryptedReport:
    """The tag of the report ``report_id`` whose ciphertext bytes are ``ct``."""
    if len(report_id) != REPORT_ID_BYTES:
        raise ValueError(f"a report id is {REPORT_ID_BYTES} bytes")
    return seal(public_key, key_id, task, report_id + ciphertext_digest(ct), TAG_PURPOSE)


def open_tag(
    private_key: X25519PrivateKey, key_id: int, task: str, tag: EncryptedReport
) -> tuple[bytes, bytes]:
    """(report id, ciphertext digest) of a tag; ``CryptoError`` if it does not open or is not
    exactly an id and a digest."""
    plaintext = open_report(private_key, key_id, task, tag, TAG_PURPOSE)
    if len(plaintext) != REPORT_ID_BYTES + DIGEST_BYTES:
        raise CryptoError(f"a tag holds {REPORT_ID_BYTES + DIGEST_BYTES} bytes")
    return plaintext[:REPORT_ID_BYTES], plaintext[REPORT_ID_BYTES:]
