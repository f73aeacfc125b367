"""docs/protocol.md stays true: its generated parts (schemas, error codes, test vectors) are what
the code generates now, and its test vector opens with the analyzer's code and is reproduced
byte for byte by pyhpke in deterministic test mode."""

from __future__ import annotations

import re

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from privbandit.protocol_doc import DOC, blocks, regenerate
from shared.crypto.hpke import open_report
from shared.protocol.messages import EncryptedReport
from tests.interop import client


def vectors() -> dict[str, str]:
    text = blocks(DOC.read_text("utf-8"))["vectors"]
    return dict(re.findall(r"^- (.+?): `(.*)`$", text, re.M))


def test_generated_parts_are_current() -> None:
    text = DOC.read_text("utf-8")
    assert set(blocks(text)) == {"errors", "schemas", "vectors"}
    assert regenerate(text) == text, "run: python -m privbandit.protocol_doc --write"


def test_vector_opens_with_the_analyzers_code() -> None:
    v = vectors()
    sk = X25519PrivateKey.from_private_bytes(
        bytes.fromhex(v["recipient private key (X25519, raw, hex)"])
    )
    report = EncryptedReport.model_validate_json(v["EncryptedReport (JSON)"])
    plaintext = open_report(sk, int(v["key_id"]), v["task"], report)
    assert plaintext.hex() == v["plaintext (hex)"]
    assert plaintext[:16].hex() == v["report id (hex)"]


def test_vector_is_reproduced_by_pyhpke_with_the_fixed_ephemeral_key() -> None:
    from pyhpke import KEMKeyPair

    v = vectors()
    raw = bytes.fromhex(v["ephemeral private key (raw, hex)"])
    eks = KEMKeyPair(
        client.SUITE.kem.deserialize_private_key(raw),
        client.SUITE.kem.deserialize_public_key(
            X25519PrivateKey.from_private_bytes(raw).public_key().public_bytes_raw()
        ),
    )
    sealed = client.seal(bytes.fromhex(v["recipient public key (raw, hex)"]), int(v["key_id"]),
                         v["task"], bytes.fromhex(v["plaintext (hex)"]), eks=eks)
    assert client.b64d(sealed["enc"]).hex() == v["enc (hex)"]
    assert client.b64d(sealed["ct"]).hex() == v["ct (hex)"]
