"""Decision ids that carry their decision, sealed under a key only this device holds.

``decide`` stores nothing: the state a feedback needs (the chosen arm's features; a multi-armed
task's ``[arm, p]``; a BCO task's version, direction and points; …) travels inside the decision id
the client gets back, encrypted and authenticated with AES-256-GCM-SIV under the device's
``decision.key``. A feedback opens the id in memory; the store records only that the decision
was used (a tombstone) in the same transaction that queues its report, so a decision still takes
exactly one feedback (``DecisionUsed``, 409) — and no feature vector is ever written to the
device's disk.

Layout of the id, base64url without padding::

    0x01 | nonce (12 bytes) | AEAD(state as float64 little-endian) with its 16-byte tag

- The nonce is the issue time in milliseconds since the epoch (6 bytes, big-endian) followed by
  6 bytes from the OS CSPRNG. It is the decision's identity (the tombstone's key): ordered by
  time, so tombstones are appended at the end of their index and pruned by a key range. The
  AEAD authenticates it, so the issue time cannot be altered without the id failing to open.
- GCM-SIV rather than GCM: a nonce that ever repeated (two ids in one millisecond drawing the
  same 48 random bits) would reveal only that the two states are equal, not the key stream.
- The associated data is ``b"privbandit/decision/1\\0" + task``: an id opens only for the task
  it was issued for.

An id that does not open (never issued by this device, altered, another task's, or sealed under
a key since replaced with ``--init``) is ``UnknownDecision`` (404), as is one older than the
device's ``unused_decision_ttl``.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCMSIV

from privbandit.services.common.datadir import StartupRefused
from privbandit.services.device.errors import UnknownDecision
from privbandit.shared.crypto.key_files import KeyFile, KeyFileError, exactly

KEY_FILE = "decision.key"
KEY_BYTES = 32
FORMAT = 1
NONCE_BYTES = 12
TAG_BYTES = 16
_AAD = b"privbandit/decision/1\x00"
_HEAD = 1 + NONCE_BYTES


@dataclass(frozen=True)
class OpenDecision:
    """A decision id opened: its identity (the nonce), when it was issued and its state."""

    uid: bytes
    issued: float  # seconds since the epoch, to the millisecond
    state: np.ndarray


def issued_ms(uid: bytes) -> int:
    """Milliseconds since the epoch at which the decision ``uid`` (a nonce) was issued."""
    return int.from_bytes(uid[:6], "big")


def uid_floor(ms: int) -> bytes:
    """The smallest uid issued at or after ``ms``: tombstones below it are older."""
    return max(ms, 0).to_bytes(6, "big") + bytes(NONCE_BYTES - 6)


def short(decision_id: str) -> str:
    """A decision id for messages and logs: its first 16 characters (ids run to hundreds)."""
    return decision_id if len(decision_id) <= 16 else decision_id[:16] + "…"


# A decision key file's key: exactly ``KEY_BYTES`` bytes (``ValueError`` otherwise).
parse_decision_key = exactly(KEY_BYTES)


def load_decision_key(path: Path) -> bytes:
    """The existing decision key file ``path``, checked (``KeyFileError`` naming it)."""
    return KeyFile(path, "decision").load(parse_decision_key)


class DecisionIds:
    """Seals decision states into ids and opens them again (module docstring)."""

    def __init__(self, key: bytes, clock: Callable[[], float] = time.time) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a decision key is {KEY_BYTES} bytes, got {len(key)}")
        self._aead = AESGCMSIV(key)
        self._clock = clock

    @classmethod
    def load_or_create(cls, path: Path) -> DecisionIds:
        """The device's key from ``path`` (mode 0600, fingerprinted: ``shared.crypto.
        key_files``), created from the OS CSPRNG if the file does not exist. Whether it may be
        created (first start, ``--init``) is decided before, by the data directory's marker
        (``services.common.datadir``), which also refuses a damaged key before this runs."""
        try:
            key = KeyFile(path, "decision").load(parse_decision_key, lambda: os.urandom(KEY_BYTES))
        except KeyFileError as exc:
            raise StartupRefused(
                f"device: refusing to start: {exc} (the key sealing decision ids); restore it "
                f"from a backup, or move it away and start with --init (open decisions are then "
                f"forgotten)") from exc
        return cls(key)

    def issue(self, task: str, state: np.ndarray) -> str:
        """A new decision id sealing ``state`` for ``task``."""
        ms = int(self._clock() * 1000)
        nonce = ms.to_bytes(6, "big") + secrets.token_bytes(NONCE_BYTES - 6)
        sealed = self._aead.encrypt(
            nonce, np.asarray(state, dtype="<f8").tobytes(), _AAD + task.encode())
        raw = bytes((FORMAT,)) + nonce + sealed
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    def open(self, task: str, decision_id: str) -> OpenDecision:
        """The decision ``decision_id`` seals for ``task``; ``UnknownDecision`` if it does not
        open (whatever the reason: the client learns nothing more)."""
        try:
            raw = base64.urlsafe_b64decode(decision_id + "=" * (-len(decision_id) % 4))
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) >= _HEAD + TAG_BYTES and raw[0] == FORMAT:
            nonce = raw[1:_HEAD]
            try:
                plain = self._aead.decrypt(nonce, raw[_HEAD:], _AAD + task.encode())
            except InvalidTag:
                plain = None
            if plain is not None and len(plain) % 8 == 0:
                state = np.frombuffer(plain, dtype="<f8").astype(float)
                return OpenDecision(nonce, issued_ms(nonce) / 1000, state)
        raise UnknownDecision(f"no decision {short(decision_id)} for task {task} on this device")
