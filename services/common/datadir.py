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

A file that is there but unreadable is refused too, naming it (issue 26 item 5): before the
service opens anything, each listed file's format is checked cheaply (``_corruption``): a SQLite
database's header and length (a flipped header byte, a truncated file), a PEM key's parse, a JSON
key's parse. ``--init`` does not replace a corrupt file: it may be the only copy of a key or of
every count, so the operator restores it or moves it away first.

Files a service starts to need later (e.g. the analyzer's Paillier key when a secure-sum task is
added) are created and added to the marker without ``--init``: they were never lost.
"""

from __future__ import annotations

import json
import logging
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privbandit.services.common.files import write_atomically

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
    """Why a SQLite file's header (its first 100 bytes) and length ``size`` cannot be a database:
    the magic string; the page size (offset 16, a power of two in 512…65536, 1 meaning 65536); a
    length that is not a whole number of pages, or shorter than the header's page count (offset
    28, valid when the version-valid-for number at 92 equals the change counter at 24)."""
    if len(data) < 100 or not data.startswith(SQLITE_MAGIC):
        return "not a SQLite database (its header is damaged)"
    raw = struct.unpack(">H", data[16:18])[0]
    page = 65536 if raw == 1 else raw
    if page < 512 or page & (page - 1):
        return f"not a SQLite database (page size {raw} in its header)"
    if size % page:
        return f"truncated or damaged: {size} bytes is not a whole number of {page}-byte pages"
    change, pages = struct.unpack(">II", data[24:32])
    if struct.unpack(">I", data[92:96])[0] == change and pages * page > size:
        return f"truncated: its header counts {pages} pages of {page} bytes, the file has {size}"
    return None


def _corruption(path: Path) -> str | None:
    """Why the state file ``path`` (present and non-empty) cannot be used, judged by its name's
    suffix: ``.sqlite3``, ``.pem`` (a private key) or ``.json`` (an object); None if it looks
    sound or has no known format."""
    try:
        if path.suffix == ".sqlite3":
            with path.open("rb") as fh:
                return _sqlite_corruption(fh.read(100), path.stat().st_size)
        if path.suffix == ".pem":
            from cryptography.hazmat.primitives import serialization

            serialization.load_pem_private_key(path.read_bytes(), password=None)
        elif path.suffix == ".json" and not isinstance(json.loads(path.read_bytes()), dict):
            return "not a JSON object"
    except (ValueError, TypeError) as exc:  # JSONDecodeError and key parse errors are ValueErrors
        return f"unreadable ({exc})"
    return None


def _lost(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except FileNotFoundError:
        return True


@dataclass(frozen=True)
class StateDir:
    """Where one service keeps its state, and which files hold it (name → what it is)."""

    service: str
    path: Path
    files: Mapping[str, str] = field(default_factory=dict)

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

    def check(self, *, init: bool = False) -> None:
        """Before the service opens any file: refuse (``StartupRefused``) if the marker lists a
        file that is missing or empty; with ``init``, allow (re)creating it (with a warning)."""
        marker = self._read_marker(init=init)
        if marker is None:
            if any(not _lost(self.path / name) for name in self.files):
                log.info("%s: %s holds state but no marker (written before markers); marking it",
                         self.service, self.path)
            return
        listed = [str(name) for name in marker["files"]]
        lost = [name for name in listed if _lost(self.path / name)]
        corrupt = {name: why for name in listed if name not in lost
                   and (why := _corruption(self.path / name)) is not None}
        if corrupt:
            what = "; ".join(f"{self.path / name} ({self.files.get(name, 'state')}) is {why}"
                             for name, why in corrupt.items())
            raise StartupRefused(
                f"{self.service}: refusing to start: {what}. Restore the file(s) from a backup; "
                f"or, to start with new state, move them away and start with --init")
        if not lost:
            return
        if not init:
            what = "; ".join(
                f"{self.path / name} ({self.files.get(name, 'state')}) is "
                f"{'empty' if (self.path / name).exists() else 'missing'}"
                for name in lost
            )
            raise StartupRefused(
                f"{self.service}: refusing to start: {what}. This data directory was "
                f"initialised on {marker.get('created', 'an earlier start')}, so starting "
                f"would silently replace lost state. Restore the file(s) from a backup, or "
                f"start with --init (python -m services.{self.service} --init, or privbandit "
                f"up --init) to create new ones explicitly"
            )
        for name in lost:
            log.warning("%s: --init: %s (%s) is missing or empty; creating a new one",
                        self.service, self.path / name, self.files.get(name, "state"))
            for suffix in ("", *SQLITE_SIBLINGS):
                (self.path / f"{name}{suffix}").unlink(missing_ok=True)
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
