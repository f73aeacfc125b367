"""The shuffler store on its own: numbered migrations, also of a store written before
versioning, and batches formed in the same transaction as the upload that fills them."""

from __future__ import annotations

import secrets
import sqlite3
from pathlib import Path

import pytest

from services.common.sqlite import schema_version
from services.shuffler.store import ShufflerStore, StaleKeyRefusal, Upload
from services.shuffler.store.sqlite import MIGRATIONS, SCHEMA_V1
from shared.crypto.keystore import HpkeKeyStore
from shared.protocol.messages import EncryptedReport, b64encode
from shared.protocol.secure_sum import EncryptedCounts
from tests.helpers import report_maker

from .support import SHUF


@pytest.mark.sqlite_only(
    reason="an SQLite file written before schema versions; a PostgreSQL store always had them"
)
def test_an_unversioned_store_opens_at_version_1_with_its_reports_and_migrates_on(
    tmp_path: Path, keys: HpkeKeyStore
) -> None:
    path = tmp_path / "shuffler.sqlite3"
    reports = report_maker(keys.hpke_config())(SHUF, 7)
    store = ShufflerStore(path, {"shuf": 5})
    results, formed = store.accept([Upload("shuf", reports[:3])])
    assert (results[0].accepted, formed) == (3, {})
    store.close()
    with sqlite3.connect(path) as conn:  # as a shuffler from before versioning left it
        conn.execute("DROP TABLE schema_version")
    store = ShufflerStore(path, {"shuf": 5, "new": 2})
    try:
        assert store.counts("shuf").pending == 3
        results, formed = store.accept([Upload("shuf", reports[1:]), Upload("new", [])])
        assert [(r.accepted, r.duplicates) for r in results] == [(4, 2), (0, 0)]
        assert formed == {"shuf": 1}
        c = store.counts("shuf")
        assert (c.pending, c.accepted, c.duplicates, c.batches_formed) == (2, 7, 2, 1)
        (batch_id,) = store.unacked("shuf", 10)
        assert store.acknowledge(batch_id) and not store.acknowledge(batch_id)
        assert store.counts("new").accepted == 0
    finally:
        store.close()
    with sqlite3.connect(path) as conn:
        assert schema_version(conn) == len(MIGRATIONS) == 3
        assert MIGRATIONS[0] is SCHEMA_V1


def counts_under(key_id: int, n: int) -> list[EncryptedCounts]:
    """n distinct stand-ins for secure-sum reports under a Paillier key id (the store does not
    read ciphertexts)."""
    tag = EncryptedReport(key_id=0, enc=b64encode(bytes(32)), ct=b64encode(bytes(64)))
    return [EncryptedCounts(key_id=key_id, ct=b64encode(secrets.token_bytes(32)),
                            tag=tag.model_copy(update={"ct": b64encode(secrets.token_bytes(64))}))
            for _ in range(n)]


def test_reports_under_a_stale_key_are_refused_and_a_mixed_batch_is_formed_again(
    tmp_path: Path,
) -> None:
    store = ShufflerStore(tmp_path / "shuffler.sqlite3", {"sum": 10})
    try:
        old, new = counts_under(1, 9), counts_under(2, 5)
        _, formed = store.accept([Upload("sum", [*old[:7], *new[:3]]), Upload("sum", old[7:])])
        assert formed == {"sum": 1}  # 7 old + 3 new: a batch no sum can be formed of
        (mixed,) = store.unacked("sum", 10)
        done = store.refuse_stale_key("sum", 2)
        assert (done.refused, done.dissolved, done.formed) == (9, 1, 0)
        assert store.load_secure_batch(mixed) is None and store.unacked("sum", 10) == []
        c = store.counts("sum")
        assert (c.accepted, c.pending, c.batches_formed, c.refused_stale_key) == (12, 3, 0, 9)
        # The 3 reports under the current key wait for 7 more and form a batch of one key.
        _, formed = store.accept([Upload("sum", [*new[3:], *counts_under(2, 5)])])
        assert formed == {"sum": 1}
        (batch_id,) = store.unacked("sum", 10)
        batch = store.load_secure_batch(batch_id)
        assert batch is not None and {m[0] for m in batch.members} == {2}
        assert store.refuse_stale_key("sum", 2) == StaleKeyRefusal(0, 0, 0)  # nothing stale
        assert store.unacked("sum", 10) == [batch_id]
    finally:
        store.close()
