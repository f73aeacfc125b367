"""The stores' released schema migrations as SQL files: a service's store package keeps
``migrations/<backend>-<version>.sql`` (``sqlite-1.sql``, ``postgres-1.sql``, ...), each the
script of one version, applied once by ``services.common.sqlite.migrate`` or
``services.common.pg.migrate``. A released script never changes (existing databases were made by
it; ``tests/services/test_migrations.py`` pins their digests): a schema change is a new file."""

from __future__ import annotations

from importlib import resources


def script(package: str, backend: str, version: int) -> str:
    """The migration script ``version`` of ``backend`` of the store ``package`` (e.g.
    ``services.shuffler.store``)."""
    path = resources.files(package).joinpath("migrations", f"{backend}-{version}.sql")
    return path.read_text("utf-8")


def scripts(package: str, backend: str) -> list[str]:
    """Every migration script of ``backend`` of the store ``package``, version 1 first (the
    files ``<backend>-1.sql``, ``<backend>-2.sql``, ... without a gap)."""
    folder = resources.files(package).joinpath("migrations")
    versions = sorted(
        int(entry.name.removeprefix(f"{backend}-").removesuffix(".sql"))
        for entry in folder.iterdir()
        if entry.name.startswith(f"{backend}-") and entry.name.endswith(".sql")
    )
    if versions != list(range(1, len(versions) + 1)):
        raise RuntimeError(f"{package}: {backend} migrations {versions} are not 1..n")
    return [script(package, backend, v) for v in versions]
