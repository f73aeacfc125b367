"""The generated parts of the protocol's documents: the error codes from the services'
``ServiceError`` classes in ``docs/protocol.md`` (the hand-written specification), the message
schemas from the pydantic models in ``docs/protocol-schemas.md``, and the HPKE, secure-sum and
prio3 test vectors in ``docs/protocol-vectors.md``.

Between ``<!-- generated:NAME -->`` and ``<!-- end:NAME -->`` a document holds exactly what
``RENDERERS[NAME]()`` returns; ``tests/interop/test_protocol_doc.py`` fails when they differ, so a
wire change cannot leave the documents behind. Regenerate with

    python -m privbandit.protocol_doc --write        (test vectors need pyhpke: pip install pyhpke)
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from privbandit.shared.core.randomizers.base import SumEncoding
from privbandit.shared.protocol import messages, paillier, prio3

DOCS = Path(__file__).resolve().parent.parent / "docs"
DOC = DOCS / "protocol.md"  # the specification, hand-written but for its error table
SCHEMAS = DOCS / "protocol-schemas.md"
VECTORS = DOCS / "protocol-vectors.md"  # read by the interop tests and clients/web's node tests
BLOCK = re.compile(r"(<!-- generated:(\w+) -->\n)(.*?)(<!-- end:\2 -->)", re.S)

# Every message on the wire, grouped as the document presents them.
MESSAGES: dict[str, list[type[BaseModel]]] = {
    "Analyzer": [messages.HpkeConfig, messages.TaskInfo, messages.ModelMessage,
                 messages.GLBModelMessage, messages.ArmModelMessage,
                 messages.PhaseModelMessage, messages.BCOModelMessage,
                 messages.BatchUpload, messages.BatchAck, messages.PrivacyReport],
    "Shuffler": [messages.EncryptedReport, messages.UploadedReport, messages.ReportUpload,
                 messages.ReportsAccepted, messages.TaskQueueStatus, messages.ShufflerStatus],
    "Paillier": [paillier.PaillierLayout, paillier.PaillierConfig, paillier.EncryptedCounts,
                 paillier.PaillierUpload, paillier.EncryptedBatchSum],
    "Prio3": [prio3.Prio3Config, prio3.Prio3Report, prio3.Prio3Upload, prio3.VerifyItem,
              prio3.Prio3VerifyRequest, prio3.Verdict, prio3.Prio3VerifyResponse,
              prio3.Prio3Aggregate],
    "Device": [messages.DecideRequest, messages.DecideResponse, messages.FeedbackRequest,
               messages.FeedbackResponse, messages.DeviceStatus],
    "Errors": [messages.ErrorBody],
}
for _name in ("SumMember",):  # messages that exist once the Paillier tags are on the wire
    if hasattr(paillier, _name):
        MESSAGES["Paillier"].append(getattr(paillier, _name))


def render_schemas() -> str:
    out = []
    for group, models in MESSAGES.items():
        out.append(f"## {group}\n")
        for model in models:
            schema = model.model_json_schema()
            out.append(f"### `{model.__name__}`\n")
            out.append("```json\n" + json.dumps(schema, indent=1, ensure_ascii=False) + "\n```\n")
    return "\n".join(out)


def render_errors() -> str:
    from privbandit.services.common.errors import ServiceError

    rows: dict[tuple[str, int, str], str] = {}
    for service in ("common", "device", "shuffler", "analyzer"):
        module = importlib.import_module(f"privbandit.services.{service}.errors")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, ServiceError) and cls.__module__ == module.__name__:
                own = cls.__dict__.get("__doc__") or ""  # not the base class's text
                doc = " ".join(inspect.cleandoc(own).split())
                key = ("all" if service == "common" else service, cls.status, cls.default_code)
                rows[key] = doc.replace("|", "\\|")
    lines = ["| service | status | code | meaning |", "|---|---|---|---|"]
    for (service, status, code), doc in sorted(rows.items()):
        lines.append(f"| {service} | {status} | `{code}` | {doc} |")
    return "\n".join(lines) + "\n"


def render_vectors() -> str:
    """A fixed X25519 key pair and ephemeral key (RFC 9180 §A-style deterministic test mode,
    as pyhpke allows), a fixed report id and row; the report they make."""
    from privbandit.shared.crypto.hpke import hpke_info
    from privbandit.shared.protocol.messages import b64encode

    suite, skr, eks = _vector_keys()
    task, key_id = "demo-central", 9
    report_id = bytes(range(16))
    row = b"".join(v.to_bytes(8, "little") for v in _f64([0.5, -0.25, 0.0, 0.125, 0.5, 1.0]))
    plaintext = report_id + row
    info = hpke_info(task, key_id)
    enc, sender = suite.create_sender_context(skr.public_key, info, eks=eks)
    ct = sender.seal(plaintext, b"")
    items = {
        "task": task,
        "key_id": key_id,
        "recipient private key (X25519, raw, hex)": skr.private_key.to_private_bytes().hex(),
        "recipient public key (raw, hex)": skr.public_key.to_public_bytes().hex(),
        "ephemeral private key (raw, hex)": eks.private_key.to_private_bytes().hex(),
        "info": info.decode("ascii"),
        "report id (hex)": report_id.hex(),
        "row: d = 5 identity report (x, r) as little-endian float64": row.hex(),
        "plaintext (hex)": plaintext.hex(),
        "enc (hex)": enc.hex(),
        "ct (hex)": ct.hex(),
        "EncryptedReport (JSON)": json.dumps(
            {"key_id": key_id, "enc": b64encode(enc), "ct": b64encode(ct)}
        ),
    }
    return "\n".join(f"- {k}: `{v}`" for k, v in items.items()) + "\n"


def render_secure_sum_vectors() -> str:
    """A secure-sum report under a fixed 512-bit test key (p, q: the next primes after
    SHA-512-derived 256-bit numbers with their top two bits set), fixed r and report id: the
    0/1 row, its counts, the packed plaintext, the ciphertext and the tag, sealed with the HPKE
    vector's keys."""
    import hashlib

    import gmpy2
    from phe import paillier

    from privbandit.shared.crypto.hpke import hpke_info
    from privbandit.shared.crypto.paillier import (
        PaillierEncryptor,
        encode_ciphertexts,
        paillier_key_id,
    )
    from privbandit.shared.crypto.slots import layout, pack
    from privbandit.shared.crypto.tags import ciphertext_digest
    from privbandit.shared.protocol.messages import EncryptedReport, b64decode, b64encode
    from privbandit.shared.protocol.paillier import EncryptedCounts, paillier_config

    def prime(seed: bytes) -> int:
        x = int.from_bytes(hashlib.sha512(seed).digest()[:32], "big") | (3 << 254)
        return int(gmpy2.next_prime(x))

    p, q = prime(b"privbandit protocol.md paillier p"), prime(b"privbandit protocol.md paillier q")
    n = p * q
    assert n.bit_length() == 512
    d, m, l = 2, 2, 10
    lay = layout(d * (d + 3) // 2, l, m, 512)
    bits = [1, 1, 0, 0, 1, 0, 1, 0, 1, 1]
    counts = [bits[i] + bits[i + 1] for i in range(0, len(bits), m)]
    (plaintext,) = pack(counts, l, m, 512)
    r = int.from_bytes(hashlib.sha512(b"privbandit protocol.md paillier r").digest(), "big") % n
    assert gmpy2.gcd(r, n) == 1
    encryptor = PaillierEncryptor(n)
    encryptor.add([pow(r, n, n * n)])
    (c,) = encryptor.encrypt([plaintext], fallback=False)
    ct = encode_ciphertexts([c], 512)
    digest = ciphertext_digest(b64decode(ct))
    suite, skr, eks = _vector_keys()
    task, key_id = "demo-shuffle", 9
    report_id = bytes(range(16, 32))
    info = hpke_info(task, key_id, "tag")
    enc, sender = suite.create_sender_context(skr.public_key, info, eks=eks)
    tag_ct = sender.seal(report_id + digest, b"")
    report = EncryptedCounts(
        key_id=paillier_key_id(n), ct=ct,
        tag=EncryptedReport(key_id=key_id, enc=b64encode(enc), ct=b64encode(tag_ct)),
    )
    assert paillier.PaillierPrivateKey(paillier.PaillierPublicKey(n), p, q).raw_decrypt(c) == \
        plaintext
    items = {
        "task": f"{task} (d = {d}, m = {m}, l = {l}; HPKE keys and key_id of the vector above)",
        "PaillierConfig (JSON)": paillier_config(n, lay).model_dump_json(),
        "p (hex)": format(p, "x"),
        "q (hex)": format(q, "x"),
        "0/1 row (bits, value order)": "".join(map(str, bits)),
        "0/1 row packed (hex)": bytes([int("".join(map(str, bits[i:i + 8])).ljust(8, "0"), 2)
                                       for i in range(0, len(bits), 8)]).hex(),
        "counts": json.dumps(counts),
        "plaintext M (hex)": format(plaintext, "x"),
        "r (hex)": format(r, "x"),
        "ciphertext (1 + M n) r^n mod n² (hex)": format(c, "x"),
        "ciphertext digest (hex)": digest.hex(),
        "tag info": info.decode("ascii"),
        "tag report id (hex)": report_id.hex(),
        "EncryptedCounts (JSON)": report.model_dump_json(exclude_none=True),
    }
    return "\n".join(f"- {k}: `{v}`" for k, v in items.items()) + "\n"


def render_prio3_vectors() -> str:
    """A prio3 report (§5.5) of an sblb task with d = 2, m = 2 (c = 5 counts in [0, 2]): the
    secure-sum vector's counts sharded with a fixed nonce and Prio3 ``rand`` instead of random
    ones, its helper share sealed with the HPKE vector's keys in the same deterministic mode."""
    from privbandit.shared.crypto.hpke import hpke_info
    from privbandit.shared.crypto.prio3.prio3 import chunk_length_for
    from privbandit.shared.crypto.prio3_task import (
        HELPER_PURPOSE,
        TaskVdaf,
        public_share_digest,
    )
    from privbandit.shared.protocol.messages import EncryptedReport, b64encode
    from privbandit.shared.protocol.prio3 import Prio3Report

    task, key_id, d, m = "demo-prio3", 9, 2, 2
    vdaf = TaskVdaf(task, SumEncoding(d * (d + 3) // 2, m))
    v = vdaf.vdaf
    counts = [2, 0, 1, 1, 2]
    nonce = bytes(range(32, 48))
    rand = bytes((7 * i + 1) % 256 for i in range(v.RAND_SIZE))
    public, (leader, helper) = v.shard(vdaf.ctx, vdaf.measurement(counts), nonce, rand)
    public_share = v.encode_public_share(public)
    helper_share = v.encode_input_share(helper)
    plaintext = nonce + public_share_digest(public_share) + helper_share
    suite, skr, eks = _vector_keys()
    info = hpke_info(task, key_id, HELPER_PURPOSE)
    enc, sender = suite.create_sender_context(skr.public_key, info, eks=eks)
    ct = sender.seal(plaintext, b"")
    report = Prio3Report(nonce=b64encode(nonce), public_share=b64encode(public_share),
                         leader_share=b64encode(v.encode_input_share(leader)),
                         helper_share=EncryptedReport(key_id=key_id, enc=b64encode(enc),
                                                      ct=b64encode(ct)))
    items = {
        "task": f"{task} (sblb, d = {d}, m = {m}; HPKE keys and key_id of the first vector)",
        "Prio3": f"Prio3SumVec(length {vdaf.length}, max_measurement {vdaf.max_value}, "
                 f"chunk_length {chunk_length_for(vdaf.length * m.bit_length())}), "
                 "ctx = the task id",
        "counts (measurement)": json.dumps(counts),
        "nonce (hex)": nonce.hex(),
        "rand (hex)": rand.hex(),
        "public share (hex)": public_share.hex(),
        "leader share (hex)": v.encode_input_share(leader).hex(),
        "helper share (hex)": helper_share.hex(),
        "helper plaintext (hex)": plaintext.hex(),
        "helper info": info.decode("ascii"),
        "Prio3Report (JSON)": report.model_dump_json(exclude_none=True),
    }
    return "\n".join(f"- {k}: `{v}`" for k, v in items.items()) + "\n"


def _vector_keys() -> tuple[Any, Any, Any]:
    """pyhpke's suite, and the recipient and ephemeral key pairs of the test vectors (RFC 9180
    DeriveKeyPair from fixed ASCII seeds)."""
    try:
        from pyhpke import AEADId, CipherSuite, KDFId, KEMId
    except ImportError as exc:  # pragma: no cover - a documentation tool's own dependency
        raise SystemExit("the test vectors need pyhpke: pip install pyhpke") from exc
    suite = CipherSuite.new(KEMId.DHKEM_X25519_HKDF_SHA256, KDFId.HKDF_SHA256, AEADId.AES128_GCM)
    skr = suite.kem.derive_key_pair(b"privbandit protocol.md recipient key")
    eks = suite.kem.derive_key_pair(b"privbandit protocol.md ephemeral key")
    return suite, skr, eks


def _f64(values: list[float]) -> list[int]:
    import struct

    return [int.from_bytes(struct.pack("<d", v), "little") for v in values]


RENDERERS: dict[str, Callable[[], str]] = {
    "schemas": render_schemas,
    "errors": render_errors,
    "vectors": render_vectors,
    "secure_sum_vectors": render_secure_sum_vectors,
    "prio3_vectors": render_prio3_vectors,
}


def blocks(text: str) -> dict[str, str]:
    """The generated blocks of a document, by name."""
    return {m.group(2): m.group(3) for m in BLOCK.finditer(text)}


def regenerate(text: str) -> str:
    return BLOCK.sub(lambda m: m.group(1) + RENDERERS[m.group(2)]() + m.group(4), text)


# The generated blocks of each document, each block in exactly one.
DOCUMENTS: dict[Path, tuple[str, ...]] = {
    DOC: ("errors",),
    SCHEMAS: ("schemas",),
    VECTORS: ("vectors", "secure_sum_vectors", "prio3_vectors"),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Regenerate the generated parts of docs/protocol.md, docs/protocol-schemas.md "
                    "and docs/protocol-vectors.md")
    ap.add_argument("--write", action="store_true", help="rewrite the files (default: check)")
    args = ap.parse_args(argv)
    stale = []
    for path in DOCUMENTS:
        text = path.read_text("utf-8")
        new = regenerate(text)
        if args.write:
            path.write_text(new, "utf-8")
        elif new != text:
            stale.append(path)
    for path in stale:
        print(f"{path} is out of date: run python -m privbandit.protocol_doc --write",
              file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
