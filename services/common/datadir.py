"""A service's data directory: lost state makes the service refuse to start, never start afresh.

At its first start a service writes a marker, ``.privbandit-initialized`` (JSON: which service,
when, and the files its state lives in), into its data directory (``<data_dir>/<service>``).
Every later start checks that each file the marker lists is still there and not empty; if one is
missing or empty the service refuses to start, naming the file, instead of silently creating a
new one (a new database forgets every count and accepted report; a new key makes every device's
reports undecryptable). The rules, applied by ``services.common.app.build_app``:

- no marker, empty directory: a first start; the service creates its files, then the marker;
- no marker, files present (a deployment from before markers): the marker is written (upgrade);
- marker present, every listed file present and non-empty: a normal start;
- marker present, a listed file missing or empty: ``StartupRefused``, unless the service was
  started with ``--init``, which explicitly allows (re)creating them: a warning is logged per
  file, empty leftovers (and a lost database's ``-wal``/``-shm`` siblings) are removed, and the
  marker lists the file again once it has been created.

A file that is there but unusable is refused too, naming it (issue 26 item 5, issue 40 item 6):
before the service opens anything, each state file is checked (``StateDir._damage``): a SQLite
database's header and length (a flipped header byte, a truncated file), then its pages by
``PRAGMA quick_check``, bounded in time (``QUICK_CHECK_SECONDS``; a check cut short is logged and
the service starts); a key file by its own check (``StateDir.keys``), which parses it and
compares it with the fingerprint recorded when it was made (``shared.crypto.key_files``), so a
key that changed on disk is refused rather than loaded as another key. A key with no
fingerprint yet (a directory made before fingerprints) gets one at this check, logged. ``--init``
does not replace a damaged file: it may be the only copy of a key or of every count, so the
operator restores it or moves it away first.

A lost file that held per-person state (``StateDir.persons``: the device's database, whose
per-person contribution counts and used decision ids bound what one person can contribute) is
not replaced by ``--init`` alone: ``--init --forget-persons`` says so in as many words (issue 40
item 7).

Files a service starts to need later (e.g. the analyzer's Paillier key when a Paillier task is
added) are created and added to the marker without ``--init``: they were never lost.
"""

from __future__ import annotations

import json
import logging
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privbandit.services.common.sqlite import quick_check
from privbandit.shared.crypto.key_files import KeyFileError, fingerprint_path
from privbandit.shared.files import write_atomically

log = logging.getLogger(__name__)

MARKER = ".privbandit-initialized"
# Siblings SQLite keeps next to a database; stale ones must not be replayed into a new database.
SQLITE_SIBLINGS = ("-wal", "-shm", "-journal")


class StartupRefused(RuntimeError):
    """The service must not start (lost state, no usable credential); the message says why and
    what to do. ``python -m services.<name>`` prints it and exits with status 2."""


# The 16 bytes every SQLite 3 database file starts with (https://sqlite.org/fileformat.html §1.3).
SQLITE_MAGIC = b"SQLite format 3\x00"


def _sqlite_corruption(data: bytes, size: int) -> str | None:
    """Why a SQLite file's header (its first 100 bytes) and length ``size`` cannot be a database
    (https://sqlite.org/fileformat.html §1.3): the magic string; the page size (offset 16, a
    power of two in 512…65536, 1 meaning 65536); the file format's write and read versions
    (offsets 18, 19: 1 legacy or 2 WAL; a larger write version would open read-only and fail at
    the first write); the payload fractions (21–23: always 64, 32, 32); the schema format
    (44: 0–4) and text encoding (56: 0–3); a length that is not a whole number of pages, or
    shorter than the header's page count (offset 28, valid when the version-valid-for number
    at 92 equals the change counter at 24)."""
    if len(data) < 100 or not data.startswith(SQLITE_MAGIC):
        return "not a SQLite database (its header is damaged)"
    raw = struct.unpack(">H", data[16:18])[0]
    page = 65536 if raw == 1 else raw
    if page < 512 or page & (page - 1):
        return f"not a SQLite database (page size {raw} in its header)"
    schema, encoding = struct.unpack(">I", data[44:48])[0], struct.unpack(">I", data[56:60])[0]
    fields = [("file format versions", list(data[18:20]), set(data[18:20]) <= {1, 2}),
              ("payload fractions", list(data[21:24]), list(data[21:24]) == [64, 32, 32]),
              ("schema format", schema, schema <= 4),
              ("text encoding", encoding, encoding <= 3)]
    for name, value, sound in fields:
        if not sound:
            return f"damaged: its header's {name} ({value}) cannot be a SQLite 3 database's"
    if size % page:
        return f"truncated or damaged: {size} bytes is not a whole number of {page}-byte pages"
    change, pages = struct.unpack(">II", data[24:32])
    if struct.unpack(">I", data[92:96])[0] == change and pages * page > size:
        return f"truncated: its header counts {pages} pages of {page} bytes, the file has {size}"
    return None


def _sqlite_damage(path: Path, seconds: float) -> str | None:
    """Why the SQLite file ``path`` cannot be used: its header and length (``_sqlite_corruption``,
    cheap), then SQLite's own check of its pages within ``seconds`` (``quick_check``)."""
    try:
        with path.open("rb") as fh:
            why = _sqlite_corruption(fh.read(100), path.stat().st_size)
    except OSError as exc:
        return f"unreadable ({exc})"
    if why is None:
        why = quick_check(path, seconds)
    return why


def _lost(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except FileNotFoundError:
        return True


# What a start may spend on ``PRAGMA quick_check`` per database (``sqlite.quick_check``): from the
# page cache this checks ~4 GB; a larger database starts after a partial check, logged.
QUICK_CHECK_SECONDS = 10.0

# Checks an existing key file: raises ``KeyFileError`` (naming it) if it is unreadable or is
# not the key that was made (``shared.crypto.key_files``).
KeyCheck = Callable[[Path], object]


def _how_lost(path: Path) -> str:
    return "empty" if path.exists() else "missing"


@dataclass(frozen=True)
class StateDir:
    """Where one service keeps its state, and which files hold it (name → what it is).

    ``keys``: the key files among them (or that the service may keep there), each with its check;
    ``persons``: the files that hold per-person state (the device's database: contribution counts
    and used decision ids), name → what a new one forgets, which ``--init`` alone does not
    replace; ``quick_check_seconds``: the time budget of each database's ``PRAGMA quick_check``."""

    service: str
    path: Path
    files: Mapping[str, str] = field(default_factory=dict)
    keys: Mapping[str, KeyCheck] = field(default_factory=dict)
    persons: Mapping[str, str] = field(default_factory=dict)
    quick_check_seconds: float = QUICK_CHECK_SECONDS

    @property
    def marker(self) -> Path:
        return self.path / MARKER

    def _read_marker(self, *, init: bool) -> dict[str, Any] | None:
        """The marker's content, None if there is none (or, with ``init``, if it is unusable)."""
        try:
            data = json.loads(self.marker.read_bytes())
            if not isinstance(data, dict) or not isinstance(data.get("files"), list):
                raise ValueError("not a marker")
            if data.get("service") != self.service:
                raise ValueError(f"it belongs to the {data.get('service')!r} service")
            return data
        except FileNotFoundError:
            return None
        except ValueError as exc:  # JSONDecodeError is a ValueError
            if init:
                log.warning("%s: rewriting the unusable marker %s (%s)", self.service,
                            self.marker, exc)
                return None
            raise StartupRefused(
                f"{self.service}: refusing to start: the data directory marker {self.marker} is "
                f"unusable ({exc}); "
                f"check that {self.path} is this service's data directory, then restore the "
                f"marker or start with --init"
            ) from exc

    def _damage(self, name: str) -> str | None:
        """Why the present, non-empty state file ``name`` cannot be used (None if it can): a key
        that is unreadable or changed since it was made; a SQLite database whose header, length
        or pages are damaged."""
        path = self.path / name
        if name in self.keys:
            try:
                self.keys[name](path)
            except KeyFileError as exc:
                return exc.why
            return None
        if path.suffix == ".sqlite3":
            return _sqlite_damage(path, self.quick_check_seconds)
        return None

    def check(self, *, init: bool = False, forget_persons: bool = False,
              damage: bool = True) -> None:
        """Before the service opens any file: refuse (``StartupRefused``) if a state file is
        damaged (``damage``: checked; the lifespan's second look skips it), or if the marker
        lists a file that is missing or empty; with ``init``, allow (re)creating it (with a
        warning), except a file holding per-person state without ``forget_persons`` as well."""
        marker = self._read_marker(init=init)
        listed = [] if marker is None else [str(name) for name in marker["files"]]
        lost = [name for name in listed if _lost(self.path / name)]
        present = sorted({*listed, *self.files, *self.keys} - set(lost)) if damage else []
        corrupt = {name: why for name in present if not _lost(self.path / name)
                   and (why := self._damage(name)) is not None}
        if corrupt:
            what = "; ".join(f"{self.path / name} ({self.files.get(name, 'state')}) is {why}"
                             for name, why in corrupt.items())
            raise StartupRefused(
                f"{self.service}: refusing to start: {what}. Restore the file(s) from a backup; "
                f"or, to start with new state, move them away and start with --init")
        if marker is None:
            if any(not _lost(self.path / name) for name in self.files):
                log.info("%s: %s holds state but no marker (written before markers); marking it",
                         self.service, self.path)
            return
        if not lost:
            return
        if not init:
            what = "; ".join(
                f"{self.path / name} ({self.files.get(name, 'state')}) is "
                f"{_how_lost(self.path / name)}" for name in lost
            )
            raise StartupRefused(
                f"{self.service}: refusing to start: {what}. This data directory was "
                f"initialised on {marker.get('created', 'an earlier start')}, so starting "
                f"would silently replace lost state. Restore the file(s) from a backup, or "
                f"start with --init (python -m services.{self.service} --init, or privbandit "
                f"up --init) to create new ones explicitly"
            )
        guarded = [name for name in lost if name in self.persons]
        if guarded and not forget_persons:
            what = "; ".join(f"{self.path / name} is {_how_lost(self.path / name)}: "
                             f"{self.persons[name]}" for name in guarded)
            raise StartupRefused(
                f"{self.service}: refusing --init: {what}. Restore it from a backup, or accept "
                f"this by starting with --init --forget-persons (python -m services."
                f"{self.service} --init --forget-persons, or privbandit up --init "
                f"--forget-persons)")
        for name in lost:
            log.warning("%s: --init: %s (%s) is missing or empty; creating a new one",
                        self.service, self.path / name, self.files.get(name, "state"))
            for suffix in ("", *SQLITE_SIBLINGS):
                (self.path / f"{name}{suffix}").unlink(missing_ok=True)
            if name in self.keys:  # the fingerprint of the lost key
                fingerprint_path(self.path / name).unlink(missing_ok=True)
            if name in guarded:
                log.warning("%s: --init --forget-persons: %s", self.service, self.persons[name])
        # Acknowledged: the marker forgets the lost files until they exist again (``mark``).
        self._write(marker, [name for name in listed if name not in lost])

    def mark(self) -> None:
        """After the service has opened its files: write the marker (first start, or a directory
        from before markers) or add the files it lists now."""
        marker = self._read_marker(init=True)
        listed = [str(name) for name in marker["files"]] if marker is not None else []
        present = [name for name in self.files if not _lost(self.path / name)]
        files = sorted(set(listed) | set(present))
        if marker is not None and sorted(listed) == files:
            return
        self._write(marker, files)

    def _write(self, previous: dict[str, Any] | None, files: list[str]) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        body = {
            "service": self.service,
            "created": (previous or {}).get("created", now),
            "updated": now,
            "files": sorted(files),
        }
        write_atomically(self.marker, (json.dumps(body, indent=1) + "\n").encode("utf-8"))
