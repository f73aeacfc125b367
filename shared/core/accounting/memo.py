"""A directory of remembered accountant figures, shared by processes (opt-in).

The schedule accountant (``shuffle_schedule``) asks the same pure questions in every process
that builds a scheduled sblb task: its ε0 searches and its ledgers evaluate

    sum_only_epsilon(ε0, l, δ, d, m)   (``sum_only``: the released batch sums)
    shuffle_epsilon(ε0, l, δ), shuffle_max_eps0(ε, l, δ)   (``shuffle``: whole reports, FMT)

at the same arguments on the analyzer, on each device and in the demo's simulator reference;
one ``sum_only_epsilon`` is a worst-case PLD composed by FFT (0.1–0.3 s, and the first one
imports dp-accounting and scipy's signal and stats packages, ≈ 1.7 s). A restarted
service asks them all again. With ``PRIVBANDIT_ACCOUNTING_CACHE`` naming a directory, each answer
is kept there once, as JSON, and read back by every later process.

What makes a remembered answer the same float as a computed one:

- The functions remembered are deterministic functions of their arguments (no randomness, no
  state): the key is the exact arguments (floats by ``repr``, which round-trips) and the
  *accountant's version* — a hash of this package's sources and the versions of dp-accounting,
  NumPy and SciPy — so an upgrade or an edit never reads an older answer.
- Writes are atomic (a temporary file renamed over the entry), so a reader sees a whole entry or
  none; two processes computing the same entry write the same bytes.

What is validated on reading (an entry is a file another process wrote): the stored key must
equal the asked key, and the value must be a finite float ≥ 0; anything else — a truncated file,
a collision, an edit — is ignored and the answer computed (and the entry rewritten). The
directory is trusted like the service's own data directory: a value edited to another valid
float would be believed, so it must not be writable by anyone who may not change the service.
Unset (the default), nothing is read or written and every figure is computed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

ENV = "PRIVBANDIT_ACCOUNTING_CACHE"
_LIBRARIES = ("dp-accounting", "numpy", "scipy")

Key = tuple[str | int | float, ...]


@functools.cache
def accountant_version() -> str:
    """A hash of the accounting package's sources and the numerical libraries' versions."""
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    for lib in _LIBRARIES:
        try:
            h.update(f"{lib}={metadata.version(lib)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{lib}=?".encode())
    return h.hexdigest()[:32]


def _is_figure(value: object) -> bool:
    """What a remembered figure may be: a finite float ≥ 0 (an ε)."""
    return isinstance(value, float) and math.isfinite(value) and value >= 0


class Memo:
    """Remembered figures under ``root``: one JSON file per (function, arguments, version)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, name: str, key: Key) -> tuple[Path, list[object]]:
        stored: list[object] = [name, accountant_version(), *key]
        digest = hashlib.sha256(json.dumps(stored).encode()).hexdigest()[:40]
        return self.root / name / f"{digest}.json", stored

    def get(self, name: str, key: Key) -> float | None:
        """The remembered value, or None (absent, unreadable, or not this key's)."""
        path, stored = self._path(name, key)
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or entry.get("key") != stored:
            return None
        value = entry.get("value")
        return value if _is_figure(value) else None

    def put(self, name: str, key: Key, value: float) -> None:
        """Remember ``value`` (atomically); a finite float ≥ 0 only. A directory that cannot be
        written costs the speed-up, never the answer: the error is swallowed."""
        if not _is_figure(value):
            return
        path, stored = self._path(name, key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump({"key": stored, "value": value}, f)
            os.replace(tmp, path)
        except OSError:
            return


def active() -> Memo | None:
    """The memo ``PRIVBANDIT_ACCOUNTING_CACHE`` names, or None (read at each call: cheap, and a
    process's children follow its environment)."""
    root = os.environ.get(ENV)
    return Memo(Path(root)) if root else None


def remembered(name: str, key: Key, compute: Callable[[], float]) -> float:
    """``compute()``, or its remembered value under the active memo (module docstring)."""
    memo = active()
    if memo is None:
        return compute()
    value = memo.get(name, key)
    if value is None:
        value = compute()
        memo.put(name, key, value)
    return value
