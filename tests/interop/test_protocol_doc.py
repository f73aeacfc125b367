"""docs/protocol.md and its generated companions stay true: their generated parts (error codes,
schemas in protocol-schemas.md, test vectors in protocol-vectors.md) are what the code generates
now; its HPKE test vector opens with the analyzer's code and is reproduced
byte for byte by pyhpke in deterministic test mode; its secure-sum vector opens and decrypts
with the analyzer's code and is reproduced by the independent client (plain integers, pyhpke);
its prio3 vector verifies with the aggregators' code."""

from __future__ import annotations

import json
import re

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from phe import paillier

from privbandit.protocol_doc import DOCUMENTS, RENDERERS, VECTORS, blocks, regenerate
from privbandit.shared.core.randomizers.base import SumEncoding
from privbandit.shared.core.randomizers.binary import BinaryRandomizer
from privbandit.shared.crypto.hpke import open_report
from privbandit.shared.crypto.paillier import decode_ciphertexts, open_batch_sum
from privbandit.shared.crypto.prio3_task import TaskVdaf, open_helper
from privbandit.shared.crypto.slots import layout
from privbandit.shared.crypto.tags import ciphertext_digest, open_tag
from privbandit.shared.protocol.messages import EncryptedReport, b64decode
from privbandit.shared.protocol.paillier import EncryptedCounts, PaillierConfig
from privbandit.shared.protocol.prio3 import Prio3Report
from tests.interop import client


def vectors() -> dict[str, str]:
    text = blocks(VECTORS.read_text("utf-8"))["vectors"]
    return dict(re.findall(r"^- (.+?): `(.*)`$", text, re.M))


def test_generated_parts_are_current() -> None:
    """Each document holds its blocks and no other, every renderer's block is in one document,
    and each block is what the code renders now."""
    placed = [name for names in DOCUMENTS.values() for name in names]
    assert sorted(placed) == sorted(RENDERERS)
    for path, names in DOCUMENTS.items():
        text = path.read_text("utf-8")
        assert sorted(blocks(text)) == sorted(names), path.name
        assert regenerate(text) == text, (
            f"{path.name}: run python -m privbandit.protocol_doc --write")


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
    v = vectors()
    eks = fixed_ephemeral_key()
    sealed = client.seal(bytes.fromhex(v["recipient public key (raw, hex)"]), int(v["key_id"]),
                         v["task"], bytes.fromhex(v["plaintext (hex)"]), eks=eks)
    assert client.b64d(sealed["enc"]).hex() == v["enc (hex)"]
    assert client.b64d(sealed["ct"]).hex() == v["ct (hex)"]


def sum_vectors() -> dict[str, str]:
    text = blocks(VECTORS.read_text("utf-8"))["secure_sum_vectors"]
    return dict(re.findall(r"^- (.+?): `(.*)`$", text, re.M))


def fixed_ephemeral_key() -> object:
    """The test vectors' ephemeral key pair for pyhpke (its deterministic test mode)."""
    from pyhpke import KEMKeyPair

    raw = bytes.fromhex(vectors()["ephemeral private key (raw, hex)"])
    return KEMKeyPair(
        client.SUITE.kem.deserialize_private_key(raw),
        client.SUITE.kem.deserialize_public_key(
            X25519PrivateKey.from_private_bytes(raw).public_key().public_bytes_raw()
        ),
    )


def test_secure_sum_vector_is_reproduced_by_the_independent_client() -> None:
    """From the document's numbers alone: the layout, the bit packing, the counts, the plaintext,
    the ciphertext with the fixed r, its digest and the tag with the fixed ephemeral key — the
    whole EncryptedCounts JSON, equal field for field — and plain-integer decryption."""
    v, h = sum_vectors(), vectors()
    pconf = json.loads(v["PaillierConfig (JSON)"])
    bits = np.array([int(b) for b in v["0/1 row (bits, value order)"]], dtype=np.uint8)
    layout = pconf["layout"]
    assert client.task_layout({"d": 2, "batch_size": 10, "policy": {"m": 2}}, pconf) == layout
    assert client.pack_bits(bits).hex() == v["0/1 row packed (hex)"]
    counts = client.counts(bits, 2)
    assert counts == json.loads(v["counts"])
    assert client.pack_slots(counts, layout) == [int(v["plaintext M (hex)"], 16)]
    hconf = {"key_id": int(h["key_id"]),
             "public_key": client.b64e(bytes.fromhex(h["recipient public key (raw, hex)"]))}
    report = client.encrypted_counts(
        pconf, hconf, "demo-shuffle", counts, rs=[int(v["r (hex)"], 16)],
        report_id=bytes.fromhex(v["tag report id (hex)"]), eks=fixed_ephemeral_key(),
    )
    assert report == json.loads(v["EncryptedCounts (JSON)"])
    (c,) = client.split_ciphertexts(report["ct"], layout)
    assert format(c, "x") == v["ciphertext (1 + M n) r^n mod n² (hex)"]
    p, q = int(v["p (hex)"], 16), int(v["q (hex)"], 16)
    assert client.unpack_slots([client.paillier_decrypt(p, q, c)], layout) == counts
    opened = client.open_sealed(bytes.fromhex(h["recipient private key (X25519, raw, hex)"]),
                                int(h["key_id"]), "demo-shuffle", report["tag"], purpose="tag")
    assert opened.hex() == v["tag report id (hex)"] + v["ciphertext digest (hex)"]


def test_secure_sum_vector_opens_with_the_analyzers_code() -> None:
    v, h = sum_vectors(), vectors()
    pconf = PaillierConfig.model_validate_json(v["PaillierConfig (JSON)"])
    n, p, q = pconf.modulus(), int(v["p (hex)"], 16), int(v["q (hex)"], 16)
    key = paillier.PaillierPrivateKey(paillier.PaillierPublicKey(n), p, q)
    report = EncryptedCounts.model_validate_json(v["EncryptedCounts (JSON)"])
    lay = layout(5, 10, 2, 512)
    cts = decode_ciphertexts(report.ct, n, lay.plaintexts)
    counts = open_batch_sum(key, cts, lay, n_reports=1)
    assert counts.tolist() == json.loads(v["counts"])
    sk = X25519PrivateKey.from_private_bytes(
        bytes.fromhex(h["recipient private key (X25519, raw, hex)"]))
    report_id, digest = open_tag(sk, int(h["key_id"]), "demo-shuffle", report.tag)
    assert report_id.hex() == v["tag report id (hex)"]
    assert digest == ciphertext_digest(b64decode(report.ct))
    rand = BinaryRandomizer(d=2, eps0=1.0, m=2)
    bits = rand.from_bytes(bytes.fromhex(v["0/1 row packed (hex)"]))
    assert rand.counts(bits[None]).tolist() == [json.loads(v["counts"])]


def test_prio3_vector_verifies_with_the_aggregators_code() -> None:
    """The prio3 vector's report: the analyzer opens its helper share (bound to the nonce and
    public share), both aggregators' verification accepts it, and the output shares sum to the
    counts (the browser library reproduces it: clients/web/test/protocol-vectors.test.mjs)."""
    keys = vectors()
    v = dict(re.findall(r"^- (.+?): `(.*)`$", blocks(VECTORS.read_text("utf-8"))["prio3_vectors"],
                        re.M))
    sk = X25519PrivateKey.from_private_bytes(
        bytes.fromhex(keys["recipient private key (X25519, raw, hex)"]))
    report = Prio3Report.model_validate_json(v["Prio3Report (JSON)"])
    nonce, public_share = b64decode(report.nonce), b64decode(report.public_share)
    assert (nonce.hex(), public_share.hex()) == (v["nonce (hex)"], v["public share (hex)"])
    counts = json.loads(v["counts (measurement)"])
    vd = TaskVdaf("demo-prio3", SumEncoding(len(counts), 2))
    helper = open_helper(sk, report.helper_share.key_id, vd.task, nonce, public_share,
                         report.helper_share)
    assert (helper.seed + (helper.blind or b"")).hex() == v["helper share (hex)"]
    vdaf, verify_key = vd.vdaf, bytes(32)
    leader = vdaf.decode_input_share(0, b64decode(report.leader_share))
    public = vdaf.decode_public_share(public_share)
    states, shares = zip(*(vdaf.verify_init(verify_key, vd.ctx, j, nonce, public, share)
                           for j, share in enumerate((leader, helper))), strict=True)
    message = vdaf.verifier_shares_to_message(vd.ctx, shares)
    out = [vdaf.verify_next(s, message) for s in states]
    assert vdaf.unshard(out, 1) == counts
