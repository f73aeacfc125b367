"""Secure-sum report tags: they open only at the analyzer, bind the report id to the exact
ciphertext bytes, and can never be opened as a report (or a report as a tag)."""

from __future__ import annotations

import secrets

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from privbandit.shared.crypto.hpke import CryptoError, open_report, seal
from privbandit.shared.crypto.tags import ciphertext_digest, make_tag, open_tag


@pytest.fixture
def keys() -> tuple[X25519PrivateKey, bytes]:
    sk = X25519PrivateKey.generate()
    pk = sk.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return sk, pk


def test_tag_round_trip_binds_id_and_ciphertext(keys) -> None:
    sk, pk = keys
    rid, ct = secrets.token_bytes(16), secrets.token_bytes(512)
    tag = make_tag(pk, 7, "sum", rid, ct)
    got_id, digest = open_tag(sk, 7, "sum", tag)
    assert got_id == rid
    assert digest == ciphertext_digest(ct)
    other = bytearray(ct)
    other[0] ^= 1
    assert digest != ciphertext_digest(bytes(other))


def test_tag_is_bound_to_task_key_and_purpose(keys) -> None:
    sk, pk = keys
    tag = make_tag(pk, 7, "sum", secrets.token_bytes(16), b"ct")
    with pytest.raises(CryptoError):
        open_tag(sk, 7, "other", tag)
    with pytest.raises(CryptoError):
        open_tag(sk, 8, "sum", tag.model_copy(update={"key_id": 8}))
    with pytest.raises(CryptoError):  # a tag is not a report ...
        open_report(sk, 7, "sum", tag)
    report = seal(pk, 7, "sum", secrets.token_bytes(48))
    with pytest.raises(CryptoError):  # ... nor a report of the right length a tag
        open_tag(sk, 7, "sum", report)


def test_tag_needs_a_sixteen_byte_id(keys) -> None:
    with pytest.raises(ValueError):
        make_tag(keys[1], 7, "sum", b"short", b"ct")
