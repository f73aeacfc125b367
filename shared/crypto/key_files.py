"""Private key files that prove they are the key that was made (issue 40 item 6).

``KeyFile`` is the one protocol every secret a service keeps in its data directory goes through
(the analyzer's HPKE and Paillier keys, the device's decision key, the shuffler's noise key,
the launcher's shuffler token): created exactly once, durably, readable only by its owner
(``shared.files.create_private_file``), and **fingerprinted**: when the key is made, the
SHA-256 of the file's bytes is written beside it, atomically, to ``<name>.sha256`` in
``sha256sum``'s format (``<64 hex digits>  <name>``, so ``sha256sum -c hpke_x25519.pem.sha256``
run in the directory checks a key by hand). Every later load compares the file with its
fingerprint and refuses a changed one (``KeyFileError``, naming the file).

The whole file is hashed rather than only the key's public part so that every change is seen,
including those that still parse: a bit flipped in the base64 of a PEM is, more often than not,
another valid X25519 private key, which would otherwise load silently as a different key (every
device's reports then fail to open); the same holds for any 32 bytes of a decision key.

A key with no fingerprint (a data directory made before fingerprints; a crash between the key's
``link`` and its fingerprint's rename) gets one at that load, logged as such: what it records is
the key as it is then, so such a key is only protected from that load on.

This guards against accidents (a flipped bit on disk, a truncated copy, another deployment's file
restored into this one), not against someone who can write the data directory: they can rewrite
the fingerprint as well.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from privbandit.shared.files import create_private_file, write_atomically

log = logging.getLogger(__name__)

SUFFIX = ".sha256"
T = TypeVar("T")


class KeyFileError(ValueError):
    """A key file that is unreadable or not the key that was made; ``why`` says what is wrong
    (the message names the file)."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path} is {why}")
        self.path = path
        self.why = why


def fingerprint_path(path: Path) -> Path:
    """Where the fingerprint of the key file ``path`` is kept: ``<path>.sha256``."""
    return path.with_name(path.name + SUFFIX)


def fingerprint(data: bytes) -> str:
    """The fingerprint of a key file's bytes: their SHA-256, in hex."""
    return hashlib.sha256(data).hexdigest()


def record_fingerprint(path: Path, data: bytes) -> None:
    """Write the fingerprint of ``data`` (the bytes of the key file ``path``) beside it."""
    write_atomically(fingerprint_path(path),
                     f"{fingerprint(data)}  {path.name}\n".encode("ascii"))


def recorded_fingerprint(path: Path) -> str | None:
    """The fingerprint recorded for the key file ``path``; None if none was. A fingerprint file
    that is not one (``KeyFileError``) is a damage like any other."""
    side = fingerprint_path(path)
    try:
        text = side.read_bytes().decode("ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyFileError(path, f"unverifiable: its fingerprint file {side} is unreadable "
                                 f"({exc})") from exc
    digest, _, name = text.rstrip("\n").partition("  ")
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or name != path.name:
        raise KeyFileError(path, f"unverifiable: its fingerprint file {side} is damaged (not "
                                 f"'<SHA-256 in hex>  {path.name}')")
    return digest


def check_fingerprint(path: Path, data: bytes, kind: str) -> None:
    """Refuse (``KeyFileError``) the key file ``path`` whose bytes ``data`` differ from the
    fingerprint recorded when it was made; record one if there is none (logged)."""
    recorded = recorded_fingerprint(path)
    actual = fingerprint(data)
    if recorded is None:
        record_fingerprint(path, data)
        log.warning("%s key %s had no fingerprint (made before fingerprints were kept): recorded "
                    "its SHA-256 %s in %s; from now on a changed key is refused", kind, path,
                    actual, fingerprint_path(path))
    elif recorded != actual:
        raise KeyFileError(path, f"not the key that was made: its SHA-256 is {actual[:16]}…, "
                                 f"{fingerprint_path(path)} recorded {recorded[:16]}… when it "
                                 f"was made")


def exactly(n: int) -> Callable[[bytes], bytes]:
    """The parse of a raw key file of ``n`` bytes (a symmetric key): its bytes, ``ValueError``
    for any other length."""

    def parse(data: bytes) -> bytes:
        if len(data) != n:
            raise ValueError(f"it holds {len(data)} bytes, not {n}")
        return data

    return parse


class KeyFile:
    """One private key file: ``read()`` its bytes, creating it first with ``make()`` if absent,
    and checked against its fingerprint (module docstring)."""

    def __init__(self, path: Path, kind: str) -> None:
        self.path = path
        self.kind = kind

    def read(self, make: Callable[[], bytes] | None = None) -> bytes:
        """The key file's bytes. If it does not exist: created with ``make()`` and fingerprinted
        (``KeyFileError`` without ``make``). Otherwise refused (``KeyFileError``) if it is not
        the key that was made."""
        data, created = self._bytes(make)
        if not created:
            check_fingerprint(self.path, data, self.kind)
        return data

    def load(self, parse: Callable[[bytes], T], make: Callable[[], bytes] | None = None) -> T:
        """The key, parsed by ``parse`` (created first with ``make()`` if absent, as ``read``);
        ``KeyFileError`` naming the file if it is missing, if ``parse`` refuses it (any
        ``ValueError``: "unreadable") or if it parses but is not the key that was made."""
        data, created = self._bytes(make)
        try:
            key = parse(data)
        except ValueError as exc:
            raise KeyFileError(self.path, f"unreadable ({exc})") from exc
        if not created:
            check_fingerprint(self.path, data, self.kind)
        return key

    def _bytes(self, make: Callable[[], bytes] | None) -> tuple[bytes, bool]:
        """The file's bytes, and whether this call created it (and recorded its fingerprint).
        A file readable by others is tightened to 0600 with a warning."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        created = False
        if not self.path.exists():
            if make is None:
                raise KeyFileError(self.path, "missing")
            create_private_file(self.path, make())
            created = True
        try:
            mode = stat.S_IMODE(self.path.stat().st_mode)
            if mode & 0o077:
                # A key readable by others is a misconfiguration; tighten it rather than refuse.
                log.warning("%s key %s had mode %o; setting 0600", self.kind, self.path, mode)
                os.chmod(self.path, 0o600)
            data = self.path.read_bytes()
        except OSError as exc:
            raise KeyFileError(self.path, f"unreadable ({exc})") from exc
        if created:
            # The bytes read back, not make()'s: another process may have linked its key first.
            record_fingerprint(self.path, data)
        return data, created

    def forget(self) -> None:
        """Delete the key file and its fingerprint (``--init`` after the key was lost)."""
        self.path.unlink(missing_ok=True)
        fingerprint_path(self.path).unlink(missing_ok=True)
