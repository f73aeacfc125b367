"""A damaged data directory stops a real service process in one line naming the file, exit status
2, never a traceback (issue 40 item 6), and a lost device database that held per-person counts is
not replaced by ``--init`` alone (item 7).

One deployment is made by the real services (the launcher, SQLite stores: an ldp task that bounds
each person, and a secure-sum task on the Paillier transport, so the analyzer keeps both of its
keys), stopped, and copied for each damage; each damaged copy is then started with ``python -m
privbandit.services.<name>``, as an operator would. The PostgreSQL stores keep no key files: the
analyzer on PostgreSQL still refuses a changed HPKE key, and the shuffler on PostgreSQL, which
keeps nothing in its data directory, starts as before."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
import tomli_w
from cryptography.hazmat.primitives import serialization

from privbandit.launcher import SERVICES, TOKEN_ENV, TOKEN_FILE, Cluster, LaunchError, free_ports
from privbandit.services.common.datadir import MARKER
from privbandit.shared.crypto.keystore import HPKE_KEY_FILE, PAILLIER_KEY_FILE, parse_x25519_pem
from privbandit.shared.crypto.noise_stream import NOISE_KEY_FILE
from tests.helpers import SMALL_CONFIG, ldp_task, only_tasks, patience, pg_schemas, secure_sum_task

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DECISION_KEY = "decision.key"

# An ldp task bounding each person to 2 reports a day, a secure-sum task on the Paillier
# transport (so the analyzer keeps both of its keys) and the small config's ddp-linucb task, whose
# aggregator noise gives the shuffler its noise key; a small obfuscator pool (quick starts).
CONFIG = tomli_w.dumps({
    "device_timing": {"paillier_pool": 4},
    "tasks": [
        {**ldp_task().model_dump(mode="json", exclude_none=True),
         "contributions": {"k": 2, "period_seconds": 86400}},
        secure_sum_task().model_dump(mode="json", exclude_none=True),
        *tomllib.loads(only_tasks(SMALL_CONFIG, ["small-ddp"]))["tasks"],
    ],
})


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory made by one start of the three real services, then stopped: every
    database, key, fingerprint and marker as a deployment leaves them."""
    base = tmp_path_factory.mktemp("made")
    config = base / "config.toml"
    config.write_text(CONFIG)
    ports = dict(zip(SERVICES, free_ports(3), strict=True))
    with Cluster(base / "data", ports, config=config, log_dir=base / "logs") as cluster:
        cluster.start(timeout=patience(90))
        cluster.stop()
    for service in SERVICES:
        assert (base / "data" / service / MARKER).exists(), service
    # Every key made, with its fingerprint.
    for key in (f"analyzer/{HPKE_KEY_FILE}", f"analyzer/{PAILLIER_KEY_FILE}",
                f"device/{DECISION_KEY}", f"shuffler/{NOISE_KEY_FILE}", TOKEN_FILE):
        assert (base / "data" / f"{key}.sha256").exists(), key
    return base


def copy_of(made: Path, tmp_path: Path) -> Path:
    """A private copy of the made deployment (data directory and config); its data directory."""
    shutil.copytree(made / "data", tmp_path / "data")
    shutil.copy(made / "config.toml", tmp_path / "config.toml")
    return tmp_path / "data"


def start(service: str, data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m privbandit.services.<service>`` on the data directory ``data`` (its config
    beside it, the launcher's token), expected to refuse to start: it is given a free port, and
    a start that does not refuse fails the test at the timeout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVBANDIT_")}
    env["PRIVBANDIT_CONFIG"] = str(data.parent / "config.toml")
    env["PRIVBANDIT_DATA_DIR"] = str(data)
    # The launcher's token for the data directory, unless this environment names one.
    token = data / TOKEN_FILE
    env[TOKEN_ENV] = token.read_text().strip() if token.exists() else os.environ[TOKEN_ENV]
    port = free_ports(1)[0]
    return subprocess.run(
        [sys.executable, "-m", f"privbandit.services.{service}", "--port", str(port), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=patience(60))


def assert_refused(result: subprocess.CompletedProcess[str], path: Path, why: str) -> None:
    """Exit status 2, one line on stderr naming ``path`` and saying ``why``, no traceback."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"privbandit {path.parent.name}: refusing")
    assert f"{path} " in lines[0] and why in lines[0], lines[0]


# ---------------------------------------------------------------------------------------------
# The damages


def flip_bit(path: Path, offset: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))


def pem_scalar_flip(path: Path) -> None:
    """One bit of the PEM's private scalar flipped: the file still parses, as ANOTHER X25519
    key (what a bit flip on disk did silently before fingerprints). The bit is flipped in the
    decoded DER (its last byte is the scalar's) and the body encoded again: flipping a bit of
    the base64 text itself can leave no base64 character ('A' ^ 1 is '@')."""
    import base64

    text = path.read_bytes()
    before = parse_x25519_pem(text)
    lines = text.split(b"\n")
    body = [i for i, line in enumerate(lines) if line and not line.startswith(b"-----")]
    der = bytearray(base64.b64decode(b"".join(lines[i] for i in body)))
    der[-1] ^= 1
    lines[body[0]: body[-1] + 1] = [base64.b64encode(bytes(der))]
    path.write_bytes(b"\n".join(lines))
    after = parse_x25519_pem(path.read_bytes())  # parses: another key
    raw = serialization.Encoding.Raw, serialization.PublicFormat.Raw
    assert after.public_key().public_bytes(*raw) != before.public_key().public_bytes(*raw)


def pem_header_flip(path: Path) -> None:
    """A bit flipped in the PEM's DER prefix (the key's algorithm): the file does not parse."""
    flip_bit(path, len(b"-----BEGIN PRIVATE KEY-----\n") + 10, 1)


def paillier_digit_flip(path: Path) -> None:
    """The lowest bit of a decimal digit of p's hex string flipped (0↔1, 2↔3, …): the JSON and
    its hex still parse, p is another number."""
    text = path.read_bytes()
    start = text.index(b'"p": "') + 6
    offset = next(i for i in range(start + 10, len(text)) if chr(text[i]).isdigit())
    flip_bit(path, offset)


def truncate_key(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:31])


def garbage_key(path: Path) -> None:
    """32 other bytes: the right length, so only the fingerprint tells."""
    path.write_bytes(os.urandom(32))


def text_key(path: Path) -> None:
    path.write_bytes(b"not a key at all\n")


def sqlite_header_flip(path: Path) -> None:
    """A bit of the header's payload fraction (offset 21, always 64)."""
    flip_bit(path, 21, 4)


def sqlite_reserved_flip(path: Path) -> None:
    """A bit of the header's reserved-space byte (offset 20): the header still looks sound,
    every page's cells now run past their page's usable end (``PRAGMA quick_check`` sees it)."""
    flip_bit(path, 20, 4)


def sqlite_page_garbage(path: Path) -> None:
    """The b-tree page header of the database's second page overwritten."""
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page: page + 16] = b"\xff" * 16
    path.write_bytes(bytes(data))


def fingerprint_garbage(path: Path) -> None:
    """The key is intact; its fingerprint file is not."""
    side = path.with_name(path.name + ".sha256")
    flip_bit(side, 0, 6)  # a hex digit no more


Damage = Callable[[Path], None]

CASES: list[tuple[str, str, Damage, str]] = [
    ("analyzer", HPKE_KEY_FILE, pem_scalar_flip, "not the key that was made"),
    ("analyzer", HPKE_KEY_FILE, pem_header_flip, "unreadable"),
    ("analyzer", HPKE_KEY_FILE, fingerprint_garbage, "fingerprint file"),
    ("analyzer", PAILLIER_KEY_FILE, paillier_digit_flip, "unreadable"),
    ("analyzer", "analyzer.sqlite3", sqlite_page_garbage, "PRAGMA quick_check"),
    ("device", DECISION_KEY, truncate_key, "holds 31 bytes"),
    ("device", DECISION_KEY, garbage_key, "not the key that was made"),
    ("device", DECISION_KEY, text_key, "holds 17 bytes"),
    ("device", "device.sqlite3", sqlite_header_flip, "payload fractions"),
    ("device", "device.sqlite3", sqlite_reserved_flip, "PRAGMA quick_check"),
    ("shuffler", "shuffler.sqlite3", sqlite_page_garbage, "PRAGMA quick_check"),
    ("shuffler", NOISE_KEY_FILE, truncate_key, "holds 31 bytes"),
    ("shuffler", NOISE_KEY_FILE, garbage_key, "not the key that was made"),
]


WITH_INIT = (pem_scalar_flip, garbage_key, sqlite_reserved_flip)


@pytest.mark.parametrize(("service", "name", "damage", "why"), CASES,
                         ids=[f"{c[1]}-{c[2].__name__}" for c in CASES])
def test_a_damaged_file_stops_the_service_in_one_line(
    made: Path, tmp_path: Path, service: str, name: str, damage: Damage, why: str,
) -> None:
    data = copy_of(made, tmp_path)
    path = data / service / name
    damage(path)
    damaged = path.read_bytes()
    assert_refused(start(service, data), path, why)
    if damage in WITH_INIT:
        # --init does not replace a damaged file either: it may be the only copy. (Each start
        # costs 1.5–3 s of CPU; tests/services/common/test_startup.py checks --init in-process
        # on five more damages.)
        assert_refused(start(service, data, "--init"), path, why)
    assert path.read_bytes() == damaged


def test_the_sound_copy_starts(made: Path, tmp_path: Path) -> None:
    """The control: the same copy, undamaged, is not refused (the device is started, found
    serving, and stopped)."""
    data = copy_of(made, tmp_path)
    ports = dict(zip(SERVICES, free_ports(3), strict=True))
    with Cluster(data, ports, config=tmp_path / "config.toml", log_dir=tmp_path / "logs") as c:
        c.start(timeout=patience(90))


# ---------------------------------------------------------------------------------------------
# A lost device database with per-person counts (item 7)


def test_init_does_not_replace_a_lost_database_with_per_person_counts(
    made: Path, tmp_path: Path,
) -> None:
    data = copy_of(made, tmp_path)
    db = data / "device" / "device.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)
    result = start("device", data, "--init")
    assert_refused(result, db, "per-person contribution counts")
    assert "--init --forget-persons" in result.stderr
    assert not db.exists()
    # Without --init it is the lost-file refusal, as before.
    assert_refused(start("device", data), db, "missing")
    # --forget-persons alone is a usage error.
    alone = start("device", data, "--forget-persons")
    assert alone.returncode == 2 and "only means something with --init" in alone.stderr
    # Said in so many words, the start goes ahead.
    ports = dict(zip(SERVICES, free_ports(3), strict=True))
    with Cluster(data, ports, config=tmp_path / "config.toml", log_dir=tmp_path / "logs") as c:
        c.start(names=["analyzer"], timeout=patience(90))
        c.start(names=["shuffler", "device"], timeout=patience(90), init=True,
                forget_persons=True)
    assert db.stat().st_size > 0
    log = (tmp_path / "logs" / "device.log").read_text()
    assert "--init --forget-persons" in log and "per-person contribution counts" in log


# ---------------------------------------------------------------------------------------------
# The PostgreSQL stores


def test_postgres_analyzer_refuses_a_changed_key_and_the_shuffler_starts(tmp_path: Path) -> None:
    """On PostgreSQL the analyzer's data directory holds only its keys: a key flipped there is
    refused the same way; the shuffler, which keeps no file, still starts."""
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    ports = dict(zip(SERVICES, free_ports(3), strict=True))
    with pg_schemas("app") as urls:
        with Cluster(tmp_path / "data", ports, config=config, log_dir=tmp_path / "logs",
                     store=urls["app"]) as cluster:
            cluster.start(timeout=patience(90))
            cluster.stop()
            key = tmp_path / "data" / "analyzer" / HPKE_KEY_FILE
            assert sorted(p.name for p in key.parent.iterdir()) == sorted(
                [MARKER, HPKE_KEY_FILE, f"{HPKE_KEY_FILE}.sha256", PAILLIER_KEY_FILE,
                 f"{PAILLIER_KEY_FILE}.sha256"])
            # The shuffler's directory holds its noise key (and cached configs), no database.
            shuffler = tmp_path / "data" / "shuffler"
            assert not list(shuffler.glob("*.sqlite3*"))
            assert (shuffler / NOISE_KEY_FILE).exists()
            pem_scalar_flip(key)
            with pytest.raises(LaunchError) as refused:
                cluster.start(names=["analyzer"], timeout=patience(90))
            assert "analyzer exited with status 2" in str(refused.value)
            log = (tmp_path / "logs" / "analyzer.log").read_text()
            line = f"privbandit analyzer: refusing to start: {key} ("
            assert line in log and "not the key that was made" in log, log
            assert "Traceback" not in log, log
            # The shuffler on PostgreSQL keeps nothing that could be damaged: it starts.
            cluster.start(names=["shuffler"], timeout=patience(90))
