"""The shuffler store on its own: numbered migrations, also of a store written before
versioning, and batches formed in the same transaction as the upload that fills them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from services.common.sqlite import schema_version
from services.shuffler.store import MIGRATIONS, SCHEMA_V1, ShufflerStore, Upload
from shared.crypto.keystore import HpkeKeyStore
from tests.helpers import report_maker

from .support import SHUF


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
        assert schema_version(conn) == len(MIGRATIONS) == 2
        assert MIGRATIONS[0] is SCHEMA_V1
