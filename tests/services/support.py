"""What the tests of a policy through the services in-process (``test_glb``, ``test_gope``: the
real analyzer and device, a recording fake shuffler, ``tests.services.device.support.stack``)
share: sealed rows, reports posted to the analyzer one batch each, its stored policy state."""

from __future__ import annotations

import json
import sqlite3
import struct
from pathlib import Path

import httpx

from privbandit.shared.core.policies import build_policy
from privbandit.shared.crypto.hpke import pack_report, seal
from privbandit.shared.protocol.messages import BatchAck, EncryptedReport, b64decode
from privbandit.shared.settings import TaskConfig
from tests.helpers import auth
from tests.services.analyzer.support import batch
from tests.services.device.support import Stack


def sealed_row(hpke: object, task: TaskConfig, row: list[float]) -> EncryptedReport:
    """A correctly sealed report of ``task`` holding exactly ``row`` (packed by the task's
    randomizer's row format; no device-side check)."""
    rand = build_policy(task.policy).randomizer
    data = struct.pack(rand._format, int(row[0]), *row[1:])  # noqa: SLF001
    return seal(b64decode(hpke.public_key), hpke.key_id, task.id,  # type: ignore[attr-defined]
                pack_report(data)[1])


async def post_each(analyzer: httpx.AsyncClient, task: str,
                    reports: list[EncryptedReport]) -> BatchAck:
    """Post ``reports`` of ``task`` to the analyzer, one batch each (a fresh batch id), each
    answered 200; the ack of the last."""
    ack = None
    for report in reports:
        resp = await analyzer.post(f"/v1/tasks/{task}/batches", json=batch([report]),
                                   headers=auth())
        assert resp.status_code == 200, resp.text
        ack = BatchAck.model_validate_json(resp.content)
    assert ack is not None
    return ack


def stored_state(s: Stack, task: str) -> dict:
    """The analyzer's durable policy state of ``task`` (its SQLite file, read-only)."""
    db = Path(s.settings.data_dir) / "analyzer" / "analyzer.sqlite3"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (state,) = conn.execute("SELECT state FROM tasks WHERE task = ?", (task,)).fetchone()
    return json.loads(state)
