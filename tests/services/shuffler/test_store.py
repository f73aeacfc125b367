"""The shuffler store on its own: numbered migrations, also of a store written before
versioning, batches formed in the same transaction as the upload that fills them, and the rules
both backends share (duplicates and tags, stale keys, stored sums) on each backend."""

from __future__ import annotations

import secrets
import sqlite3
from pathlib import Path

import pytest

import tests.helpers as helpers
from privbandit.services.common.sqlite import schema_version
from privbandit.services.shuffler.store import ShufflerStore, StaleKeyRefusal, Store, Upload
from privbandit.services.shuffler.store.sqlite import MIGRATIONS, SCHEMA_V1
from privbandit.shared.crypto.keystore import HpkeKeyStore
from privbandit.shared.protocol.messages import EncryptedReport, b64encode
from privbandit.shared.protocol.paillier import EncryptedCounts
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
        assert schema_version(conn) == len(MIGRATIONS) == 4
        assert MIGRATIONS[0] is SCHEMA_V1


def counts_under(key_id: int, n: int) -> list[EncryptedCounts]:
    """n distinct stand-ins for secure-sum reports under a Paillier key id (the store does not
    read ciphertexts)."""
    tag = EncryptedReport(key_id=0, enc=b64encode(bytes(32)), ct=b64encode(bytes(64)))
    return [EncryptedCounts(key_id=key_id, ct=b64encode(secrets.token_bytes(32)),
                            tag=tag.model_copy(update={"ct": b64encode(secrets.token_bytes(64))}))
            for _ in range(n)]


def open_store(backend: str, tmp_path: Path, sizes: dict[str, int]) -> Store:
    """The backend the ``store`` fixture chose (PostgreSQL without its background sweep, so
    that every batch is formed by the call under test)."""
    if backend == "sqlite":
        return ShufflerStore(tmp_path / "shuffler.sqlite3", sizes)
    from privbandit.services.shuffler.store.postgres import PgShufflerStore

    return PgShufflerStore(helpers.STORES["shuffler"], sizes, poll=3600)


def test_reports_under_a_stale_key_are_refused_and_a_mixed_batch_is_formed_again(
    tmp_path: Path, store: str
) -> None:
    shuffler = open_store(store, tmp_path, {"sum": 10})
    try:
        old, new = counts_under(1, 9), counts_under(2, 5)
        _, formed = shuffler.accept([Upload("sum", [*old[:7], *new[:3]]), Upload("sum", old[7:])])
        assert formed == {"sum": 1}  # 7 old + 3 new: a batch no sum can be formed of
        (mixed,) = shuffler.unacked("sum", 10)
        done = shuffler.refuse_stale_key("sum", 2)
        assert (done.refused, done.dissolved, done.formed) == (9, 1, 0)
        assert shuffler.load_secure_batch(mixed) is None and shuffler.unacked("sum", 10) == []
        c = shuffler.counts("sum")
        assert (c.accepted, c.pending, c.batches_formed, c.refused_stale_key) == (12, 3, 0, 9)
        # The 3 reports under the current key wait for 7 more and form a batch of one key.
        _, formed = shuffler.accept([Upload("sum", [*new[3:], *counts_under(2, 5)])])
        assert formed == {"sum": 1}
        (batch_id,) = shuffler.unacked("sum", 10)
        batch = shuffler.load_secure_batch(batch_id)
        assert batch is not None and {m[0] for m in batch.members} == {2}
        assert shuffler.refuse_stale_key("sum", 2) == StaleKeyRefusal(0, 0, 0)  # nothing stale
        assert shuffler.unacked("sum", 10) == [batch_id]
    finally:
        shuffler.close()


def test_duplicates_and_tags_on_each_backend(tmp_path: Path, store: str) -> None:
    """The duplicate rule (``base.admit``) as each backend applies it: within one upload, across
    uploads, and for a ciphertext whose tag is already held (no trace kept of that ciphertext,
    so the same ciphertext under a fresh tag is accepted later, as before the rule was shared)."""
    shuffler = open_store(store, tmp_path, {"sum": 100})
    try:
        a, b, c = counts_under(2, 3)
        copy_of_a = a.model_copy(update={"ct": b.ct})  # b's ciphertext under a's tag
        results, _ = shuffler.accept([Upload("sum", [a, a, b]), Upload("sum", [b, copy_of_a])])
        assert [(r.accepted, r.duplicates) for r in results] == [(2, 1), (0, 2)]
        # A new ciphertext under a held tag: a duplicate, and its ciphertext is not recorded...
        rerandomised = c.model_copy(update={"tag": a.tag})
        # ...so in the same upload it is accepted with a tag of its own.
        results, _ = shuffler.accept([Upload("sum", [rerandomised, c])])
        assert [(r.accepted, r.duplicates) for r in results] == [(1, 1)]
        counts = shuffler.counts("sum")
        assert (counts.accepted, counts.duplicates, counts.pending) == (3, 4, 3)
    finally:
        shuffler.close()


def test_a_stored_sum_replaces_its_members_once(tmp_path: Path, store: str) -> None:
    shuffler = open_store(store, tmp_path, {"sum": 3})
    try:
        _, formed = shuffler.accept([Upload("sum", counts_under(2, 3))])
        assert formed == {"sum": 1}
        (batch_id,) = shuffler.unacked("sum", 10)
        assert shuffler.batch_members(batch_id) == 3 and not shuffler.has_sum(batch_id)
        assert shuffler.save_sum(batch_id, 2, 3, b"first", "[]")
        assert shuffler.save_sum(batch_id, 2, 3, b"second", "[1]")  # the first one stays
        batch = shuffler.load_secure_batch(batch_id)
        assert batch is not None and batch.members == []
        assert (batch.key_id, batch.sum_ct, batch.sum_members) == (2, b"first", "[]")
        assert shuffler.batch_members(batch_id) == 0 and shuffler.has_sum(batch_id)
        # A sum under a key the analyzer no longer has: the whole batch is refused.
        assert shuffler.refuse_stale_key("sum", 3) == StaleKeyRefusal(3, 1, 0)
        assert shuffler.unacked("sum", 10) == [] and not shuffler.has_sum(batch_id)
        assert not shuffler.save_sum(batch_id, 3, 3, b"late", "[]")
        assert not shuffler.acknowledge(batch_id)
    finally:
        shuffler.close()
