"""Embedded storage settings shared by the three services' SQLite stores."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def open_db(path: Path, *, timeout: float = 30.0) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, synchronous=FULL.

    FULL: a commit that was acknowledged (a 202 from the shuffler or the device, an analyzer
    ack) survives a power cut, not only a process crash. ``check_same_thread=False``: the stores
    run their queries in worker threads and serialise access themselves (a lock or a single
    writer thread). ``timeout`` is how long a statement waits for another connection's lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=timeout)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn
