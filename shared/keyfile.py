"""Create a private key file exactly once, durably, readable only by its owner.

Both analyzer key stores (HPKE and Paillier) persist their keys this way: write to a fresh
temporary file with mode 0600, fsync it, then ``link()`` it into place — ``link`` fails if the key
already exists, so two processes starting at once agree on one key — and fsync the directory so
the new name survives a crash.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def create_private_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (mode 0600) unless ``path`` already exists."""
    directory = path.parent
    tmp = directory / f".{path.name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
