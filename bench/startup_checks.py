"""What the start-up checks of a data directory cost (issue 40 item 6), as ratios to a floor
measured in the same run.

- ``PRAGMA quick_check`` (``services.common.sqlite.quick_check``) of a SQLite database of
  ``--mb`` megabytes (a table of 400-byte blobs with an index, in WAL mode, as the stores keep
  theirs), against the floor of reading the same file's bytes once (both from the page cache: the
  file is read once before either is timed). The ratio says how far below the disk's own speed
  the check runs, and so how large a database its 10 s budget covers.
- Each key's check (``StateDir.keys``: parse, fingerprint), against the floor of reading the
  key file's bytes.

    python -m bench.startup_checks [--mb 64 256] [--repeat 3] [--json out/bench/startup_checks.json]

Medians of ``--repeat`` timings (``time.perf_counter``).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.args import write_json
from privbandit.services.common.sqlite import quick_check
from privbandit.services.device.decision_ids import DecisionIds, load_decision_key
from privbandit.shared.crypto.keystore import (
    HpkeKeyStore,
    PaillierKeyStore,
    load_hpke_key,
    load_paillier_key,
)

ROW_BYTES = 400


def median_time(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def read_all(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(len(chunk) for chunk in iter(lambda: fh.read(1 << 20), b""))


def make_database(path: Path, mb: int) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB, k TEXT)")
    conn.execute("CREATE INDEX tk ON t (k)")
    rows = mb * 1_000_000 // (ROW_BYTES + 40)
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO t (b, k) VALUES (?, ?)",
                     ((os.urandom(ROW_BYTES), os.urandom(8).hex()) for _ in range(rows)))
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(prog="python -m bench.startup_checks", description=__doc__)
    parser.add_argument("--mb", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    out: dict[str, object] = {"databases": [], "keys": []}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for mb in args.mb:
            path = directory / f"db{mb}.sqlite3"
            make_database(path, mb)
            size = read_all(path)  # into the page cache
            floor = median_time(lambda p=path: read_all(p), args.repeat)
            check = median_time(lambda p=path: quick_check(p, 600.0), args.repeat)
            row = {"mb": size / 1e6, "read_s": floor, "quick_check_s": check,
                   "x_floor": check / floor, "quick_check_mb_per_s": size / 1e6 / check}
            out["databases"].append(row)  # type: ignore[union-attr]
            print(f"quick_check {size / 1e6:7.1f} MB: {check:.3f} s = {check / floor:.1f}x "
                  f"reading it ({floor:.3f} s); {size / 1e6 / check:.0f} MB/s")
        HpkeKeyStore(directory)
        PaillierKeyStore(directory)  # 2048 bits, as deployed
        DecisionIds.load_or_create(directory / "decision.key")
        for name, check_key in (("hpke_x25519.pem", load_hpke_key),
                                ("paillier.json", load_paillier_key),
                                ("decision.key", load_decision_key)):
            path = directory / name
            floor = median_time(lambda p=path: p.read_bytes(), max(args.repeat, 20))
            took = median_time(lambda p=path, c=check_key: c(p), max(args.repeat, 20))
            out["keys"].append({"key": name, "read_ms": floor * 1e3,  # type: ignore[union-attr]
                                "check_ms": took * 1e3, "x_floor": took / floor})
            print(f"check of {name:16s} {took * 1e3:7.2f} ms = {took / floor:6.0f}x reading it "
                  f"({floor * 1e3:.3f} ms)")
    if args.json is not None:
        write_json(args.json, out)
    return out


if __name__ == "__main__":
    main()
