"""The generated parts of ``docs/protocol.md``: message schemas from the pydantic models, the
error codes from the services' ``ServiceError`` classes, and HPKE test vectors.

Between ``<!-- generated:NAME -->`` and ``<!-- end:NAME -->`` the document holds exactly what
``render(NAME)`` returns; ``tests/interop/test_protocol_doc.py`` fails when they differ, so a wire
change cannot leave the document behind. Regenerate with

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

from pydantic import BaseModel

from shared.protocol import messages, secure_sum

DOC = Path(__file__).resolve().parent.parent / "docs" / "protocol.md"
BLOCK = re.compile(r"(<!-- generated:(\w+) -->\n)(.*?)(<!-- end:\2 -->)", re.S)

# Every message on the wire, grouped as the document presents them.
MESSAGES: dict[str, list[type[BaseModel]]] = {
    "Analyzer": [messages.HpkeConfig, messages.TaskInfo, messages.ModelMessage,
                 messages.BatchUpload, messages.BatchAck, messages.PrivacyReport],
    "Shuffler": [messages.EncryptedReport, messages.ReportUpload, messages.ReportsAccepted,
                 messages.TaskQueueStatus, messages.ShufflerStatus],
    "Secure sum": [secure_sum.SecureSumLayout, secure_sum.PaillierConfig,
                   secure_sum.EncryptedCounts, secure_sum.SecureSumUpload,
                   secure_sum.EncryptedBatchSum],
    "Device": [messages.DecideRequest, messages.DecideResponse, messages.FeedbackRequest,
               messages.FeedbackResponse, messages.DeviceStatus],
    "Errors": [messages.ErrorBody],
}
for _name in ("SumMember",):  # messages that exist once the secure-sum tags are on the wire
    if hasattr(secure_sum, _name):
        MESSAGES["Secure sum"].append(getattr(secure_sum, _name))


def render_schemas() -> str:
    out = []
    for group, models in MESSAGES.items():
        out.append(f"#### {group}\n")
        for model in models:
            schema = model.model_json_schema()
            out.append(f"##### `{model.__name__}`\n")
            out.append("```json\n" + json.dumps(schema, indent=1, ensure_ascii=False) + "\n```\n")
    return "\n".join(out)


def render_errors() -> str:
    from services.common.errors import ServiceError

    rows: dict[tuple[str, int, str], str] = {}
    for service in ("common", "device", "shuffler", "analyzer"):
        module = importlib.import_module(f"services.{service}.errors")
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
    try:
        from pyhpke import AEADId, CipherSuite, KDFId, KEMId
    except ImportError as exc:  # pragma: no cover - a documentation tool's own dependency
        raise SystemExit("the test vectors need pyhpke: pip install pyhpke") from exc
    from shared.crypto.hpke import hpke_info
    from shared.protocol.messages import b64encode

    suite = CipherSuite.new(KEMId.DHKEM_X25519_HKDF_SHA256, KDFId.HKDF_SHA256, AEADId.AES128_GCM)
    skr = suite.kem.derive_key_pair(b"privbandit protocol.md recipient key")
    eks = suite.kem.derive_key_pair(b"privbandit protocol.md ephemeral key")
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


def _f64(values: list[float]) -> list[int]:
    import struct

    return [int.from_bytes(struct.pack("<d", v), "little") for v in values]


RENDERERS: dict[str, Callable[[], str]] = {
    "schemas": render_schemas,
    "errors": render_errors,
    "vectors": render_vectors,
}


def blocks(text: str) -> dict[str, str]:
    """The generated blocks of a document, by name."""
    return {m.group(2): m.group(3) for m in BLOCK.finditer(text)}


def regenerate(text: str) -> str:
    return BLOCK.sub(lambda m: m.group(1) + RENDERERS[m.group(2)]() + m.group(4), text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Regenerate the generated parts of docs/protocol.md")
    ap.add_argument("--write", action="store_true", help="rewrite the file (default: check)")
    args = ap.parse_args(argv)
    text = DOC.read_text("utf-8")
    new = regenerate(text)
    if args.write:
        DOC.write_text(new, "utf-8")
        return 0
    if new != text:
        print(f"{DOC} is out of date: run python -m privbandit.protocol_doc --write",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
