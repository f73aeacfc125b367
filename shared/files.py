"""Small private files (keys, markers, fingerprints, cached configs) written so that a crash never
leaves half of one: ``write_atomically`` replaces a file, ``create_private_file`` creates one
exactly once. Both write mode 0600 files and fsync the file and its directory."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def _fsync_dir(directory: Path) -> None:
    """fsync ``directory``, so a name just linked or renamed in it survives a crash."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _write_temporary(directory: Path, name: str, data: bytes, mode: int) -> Path:
    """A new temporary file in ``directory`` (beside ``name``) holding ``data``, fsynced."""
    tmp = directory / f".{name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_atomically(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data``: a temporary file in the same directory, fsynced, then
    renamed over it (atomic on POSIX), and the directory fsynced so the new name survives."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _write_temporary(path.parent, path.name, data, mode)
    try:
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def create_private_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (mode 0600) unless ``path`` already exists: a temporary file,
    fsynced, then ``link()``-ed into place — ``link`` fails if the file exists, so two processes
    creating it at once agree on one content — and the directory fsynced."""
    tmp = _write_temporary(path.parent, path.name, data, 0o600)
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)
