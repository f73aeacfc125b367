"""Released migration scripts never change: databases in the field were made by them, and
``migrate`` applies only the versions a database lacks. A schema change is a new script (and a
new digest here); editing a released one fails this test."""

from __future__ import annotations

import hashlib

import pytest

from privbandit.services.common.migrations import script

RELEASED = {
    ("privbandit.services.shuffler.store", "sqlite", 1):
        "ab692614372ae0f02045e77b449d770dd7bf524aaebd1991977c6293766811b0",
    ("privbandit.services.shuffler.store", "postgres", 1):
        "c7a651df29e8fdfe4295f8f0709dfc50b4dbea5acf6ce32776341f7018d0315c",
    ("privbandit.services.analyzer.store", "sqlite", 1):
        "bbc8d429f6e458b9864c4f3edf5aaa0cc8dd968fe8ad4eb8ed1b3130d443efbd",
    ("privbandit.services.analyzer.store", "postgres", 1):
        "12cd2ba0174afd06afded6833b884d6f8870a321cef3960958810187ed5ffc1d",
    ("privbandit.services.analyzer.store", "postgres", 2):
        "13bfacda4cfb9fe2306d3555213e3f706c164e5d3cbff8a44b995b18370b9089",
}


@pytest.mark.parametrize("key", sorted(RELEASED), ids=lambda k: f"{k[0]}:{k[1]}-{k[2]}")
def test_a_released_migration_is_unchanged(key: tuple[str, str, int]) -> None:
    package, backend, version = key
    digest = hashlib.sha256(script(package, backend, version).encode()).hexdigest()
    assert digest == RELEASED[key]


def test_the_stores_apply_the_released_scripts_first() -> None:
    from privbandit.services.analyzer.store import postgres as analyzer_pg
    from privbandit.services.analyzer.store import sqlite as analyzer_sqlite
    from privbandit.services.shuffler.store import postgres as shuffler_pg
    from privbandit.services.shuffler.store import sqlite as shuffler_sqlite

    for module, key in ((shuffler_sqlite, ("privbandit.services.shuffler.store", "sqlite", 1)),
                        (shuffler_pg, ("privbandit.services.shuffler.store", "postgres", 1)),
                        (analyzer_sqlite, ("privbandit.services.analyzer.store", "sqlite", 1)),
                        (analyzer_pg, ("privbandit.services.analyzer.store", "postgres", 1))):
        assert module.MIGRATIONS[0] == script(*key), module.__name__
