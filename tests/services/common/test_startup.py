"""What a service checks before it starts (``services.common.datadir``, ``build_app``): a data
directory initialised before must still hold its database and keys (else the service refuses,
naming the file, until ``--init``); the analyzer and the shuffler need a real shuffler token;
state files are readable by their owner only."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from privbandit.services.analyzer.app import create_app as create_analyzer
from privbandit.services.common.datadir import MARKER, StartupRefused
from privbandit.services.common.sqlite import open_db, quick_check
from privbandit.services.device.app import create_app as create_device
from privbandit.services.device.decision_ids import KEY_FILE as DECISION_KEY_FILE
from privbandit.services.shuffler.app import create_app as create_shuffler
from privbandit.shared.crypto.keystore import HPKE_KEY_FILE, PAILLIER_KEY_FILE
from privbandit.shared.settings import Settings
from tests.helpers import (
    PAILLIER_TEST_BITS,
    make_settings,
    patience,
    running,
    secure_sum_task,
    shuffle_task,
)

SERVICES = ("analyzer", "shuffler", "device")
DB = {name: f"{name}.sqlite3" for name in SERVICES}
STATE_FILES = {
    "analyzer": sorted([DB["analyzer"], HPKE_KEY_FILE, PAILLIER_KEY_FILE]),
    "shuffler": [DB["shuffler"]],
    "device": sorted([DB["device"], DECISION_KEY_FILE]),
}
ROOT = Path(__file__).resolve().parents[3]


def peers_down(request: httpx.Request) -> httpx.Response:
    return httpx.Response(503, json={"code": "unavailable", "message": "down"})


def settings_in(tmp_path: Path, **kw: object) -> Settings:
    # A secure-sum task, so that the analyzer also keeps a Paillier key.
    return make_settings(tmp_path / "data", tasks=[shuffle_task(), secure_sum_task()], **kw)


def create(service: str, settings: Settings, init: bool = False) -> FastAPI:
    """The service's app, its peers unreachable (nothing here needs them)."""
    down = httpx.MockTransport(peers_down)
    if service == "analyzer":
        return create_analyzer(settings, paillier_key_bits=PAILLIER_TEST_BITS, init=init)
    if service == "shuffler":
        return create_shuffler(settings, analyzer_transport=down, init=init)
    return create_device(settings, analyzer_transport=down, shuffler_transport=down,
                         paillier_min_bits=PAILLIER_TEST_BITS, init=init)


async def start_and_stop(service: str, settings: Settings, init: bool = False) -> None:
    async with running(create(service, settings, init)):
        pass


async def first_start(tmp_path: Path, service: str) -> Settings:
    """Settings whose data directory the service has been started (and stopped) in once."""
    settings = settings_in(tmp_path)
    await start_and_stop(service, settings)
    return settings


def directory(settings: Settings, service: str) -> Path:
    return Path(settings.data_dir) / service


def marker(settings: Settings, service: str) -> dict[str, object]:
    return json.loads((directory(settings, service) / MARKER).read_text())


# ---------------------------------------------------------------------------------------------
# Lost state


@pytest.mark.parametrize("service", SERVICES)
async def test_first_start_on_an_empty_directory_creates_its_files_and_the_marker(
    tmp_path: Path, service: str
) -> None:
    settings = await first_start(tmp_path, service)
    mark = marker(settings, service)
    assert mark["service"] == service and mark["created"]
    assert mark["files"] == STATE_FILES[service]
    for name in STATE_FILES[service]:
        assert (directory(settings, service) / name).stat().st_size > 0
    await start_and_stop(service, settings)  # and starts again


@pytest.mark.parametrize("service", SERVICES)
async def test_a_deleted_database_refuses_to_start_naming_the_file(
    tmp_path: Path, service: str
) -> None:
    settings = await first_start(tmp_path, service)
    db = directory(settings, service) / DB[service]
    db.unlink()
    with pytest.raises(StartupRefused) as refused:
        create(service, settings)
    message = str(refused.value)
    assert str(db) in message and "missing" in message and "--init" in message
    assert not db.exists()  # nothing was created in its place


KEYS = [("analyzer", HPKE_KEY_FILE), ("analyzer", PAILLIER_KEY_FILE),
        ("device", DECISION_KEY_FILE)]


@pytest.mark.parametrize(("service", "key_file"), KEYS)
async def test_a_deleted_key_refuses_to_start_naming_the_file(
    tmp_path: Path, service: str, key_file: str
) -> None:
    settings = await first_start(tmp_path, service)
    key = directory(settings, service) / key_file
    key.unlink()
    with pytest.raises(StartupRefused, match=str(key)):
        create(service, settings)
    assert not key.exists()


async def test_a_truncated_decision_key_refuses_to_start(tmp_path: Path) -> None:
    """A key file of the wrong length is corrupt: the device must not start (and must not
    replace it) rather than seal ids with a key it cannot reproduce."""
    settings = await first_start(tmp_path, "device")
    key = directory(settings, "device") / DECISION_KEY_FILE
    key.write_bytes(key.read_bytes()[:31])
    with pytest.raises(StartupRefused, match="holds 31 bytes"):
        await start_and_stop("device", settings)
    assert len(key.read_bytes()) == 31


def flip_header_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[3] ^= 0x20  # "SQLite format 3" → "SQlite format 3"
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 + 100])


def truncate_to_one_page(path: Path) -> None:
    page = int.from_bytes(path.read_bytes()[16:18], "big")
    path.write_bytes(path.read_bytes()[:page])


def damage_pem(path: Path) -> None:
    lines = path.read_text().splitlines()
    lines[1] = ("A" if lines[1][0] != "A" else "B") + lines[1][1:]  # the key's DER header
    path.write_text("\n".join(lines) + "\n")


def damage_json(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-7])


CORRUPTIONS = [
    ("analyzer", "analyzer.sqlite3", flip_header_byte, "header is damaged"),
    ("shuffler", "shuffler.sqlite3", truncate, "whole number of"),
    ("device", "device.sqlite3", truncate_to_one_page, "truncated: its header counts"),
    ("analyzer", HPKE_KEY_FILE, damage_pem, "unreadable"),
    ("analyzer", PAILLIER_KEY_FILE, damage_json, "unreadable"),
]


@pytest.mark.parametrize(("service", "name", "damage", "why"), CORRUPTIONS,
                         ids=[f"{c[1]}-{c[2].__name__}" for c in CORRUPTIONS])
async def test_a_corrupt_file_refuses_to_start_naming_it(
    tmp_path: Path, service: str, name: str, damage: object, why: str
) -> None:
    """A damaged database or key is refused before anything opens it, in one message naming the
    file and what is wrong with it (issue 26 item 5); ``--init`` does not replace it."""
    settings = await first_start(tmp_path, service)
    path = directory(settings, service) / name
    damage(path)  # type: ignore[operator]  # one of the functions above
    damaged = path.read_bytes()
    for init in (False, True):
        with pytest.raises(StartupRefused) as refused:
            create(service, settings, init=init)
        message = str(refused.value)
        assert f"{path} (" in message and why in message and "backup" in message, message
    assert path.read_bytes() == damaged  # left as it was, for the operator


async def test_cli_with_a_corrupt_database_exits_2_naming_the_file(tmp_path: Path) -> None:
    settings = await first_start(tmp_path, "device")
    db = directory(settings, "device") / DB["device"]
    truncate(db)
    result = run_service("device", Path(settings.data_dir), token=None)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(db) in lines[0] and "truncated" in lines[0]


async def test_an_empty_file_counts_as_lost(tmp_path: Path) -> None:
    settings = await first_start(tmp_path, "analyzer")
    key = directory(settings, "analyzer") / HPKE_KEY_FILE
    key.write_bytes(b"")
    with pytest.raises(StartupRefused, match=f"{key}.*is empty"):
        create("analyzer", settings)


async def test_files_lost_after_the_app_was_built_refuse_at_lifespan_start(
    tmp_path: Path,
) -> None:
    settings = await first_start(tmp_path, "device")
    app = create("device", settings)
    (directory(settings, "device") / DB["device"]).unlink()
    with pytest.raises(StartupRefused, match=DB["device"]):
        async with running(app):
            pass


@pytest.mark.parametrize("service", SERVICES)
async def test_init_creates_new_files_in_place_of_lost_ones(
    tmp_path: Path, service: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = await first_start(tmp_path, service)
    lost = directory(settings, service) / STATE_FILES[service][0]
    lost.unlink()
    with caplog.at_level(logging.WARNING, logger="privbandit.services.common.datadir"):
        await start_and_stop(service, settings, init=True)
    assert f"--init: {lost}" in caplog.text
    assert lost.stat().st_size > 0
    assert marker(settings, service)["files"] == STATE_FILES[service]
    await start_and_stop(service, settings)  # a normal start again, without --init


async def test_init_after_a_lost_analyzer_key_makes_a_new_key(tmp_path: Path) -> None:
    settings = settings_in(tmp_path)
    async with running(create("analyzer", settings)) as client:
        before = (await client.get("/v1/hpke-config")).json()
    (directory(settings, "analyzer") / HPKE_KEY_FILE).unlink()
    async with running(create("analyzer", settings, init=True)) as client:
        assert (await client.get("/v1/hpke-config")).json()["public_key"] != before["public_key"]


async def test_a_directory_from_before_markers_is_marked_not_refused(tmp_path: Path) -> None:
    settings = settings_in(tmp_path)
    async with running(create("analyzer", settings)) as client:
        before = (await client.get("/v1/hpke-config")).json()
    (directory(settings, "analyzer") / MARKER).unlink()  # as written by an earlier release
    async with running(create("analyzer", settings)) as client:
        assert (await client.get("/v1/hpke-config")).json() == before  # the same state
    assert marker(settings, "analyzer")["files"] == STATE_FILES["analyzer"]


async def test_a_new_secure_sum_task_adds_the_paillier_key_without_init(tmp_path: Path) -> None:
    """A file the service starts to need later was never lost: created, then listed."""
    plain = make_settings(tmp_path / "data", tasks=[shuffle_task()])
    await start_and_stop("analyzer", plain)
    assert marker(plain, "analyzer")["files"] == sorted([DB["analyzer"], HPKE_KEY_FILE])
    grown = make_settings(tmp_path / "data", tasks=[shuffle_task(), secure_sum_task()])
    await start_and_stop("analyzer", grown)
    assert marker(grown, "analyzer")["files"] == STATE_FILES["analyzer"]


async def test_a_marker_of_another_service_refuses_to_start(tmp_path: Path) -> None:
    settings = await first_start(tmp_path, "device")
    shuffler_dir = directory(settings, "shuffler")
    shuffler_dir.mkdir(parents=True)
    (shuffler_dir / MARKER).write_bytes((directory(settings, "device") / MARKER).read_bytes())
    with pytest.raises(StartupRefused, match="belongs to the 'device' service"):
        create("shuffler", settings)


# ---------------------------------------------------------------------------------------------
# File modes


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("service", SERVICES)
async def test_database_files_are_owner_only(tmp_path: Path, service: str) -> None:
    """Outboxes, reports, counts: none of it is for others."""
    old = os.umask(0o022)  # what a default shell gives: files 0644 unless created otherwise
    try:
        settings = settings_in(tmp_path)
        async with running(create(service, settings)):
            files = sorted(directory(settings, service).glob(f"{DB[service]}*"))
            # The open database with its write-ahead log and shared-memory index.
            assert [f.name[len(DB[service]):] for f in files] == ["", "-shm", "-wal"]
            assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
    finally:
        os.umask(old)


@pytest.mark.parametrize(("service", "key_file"), KEYS)
async def test_key_files_are_owner_only(tmp_path: Path, service: str, key_file: str) -> None:
    old = os.umask(0o022)
    try:
        settings = await first_start(tmp_path, service)
    finally:
        os.umask(old)
    assert mode(directory(settings, service) / key_file) == 0o600


def test_an_existing_database_readable_by_others_is_tightened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "old.sqlite3"
    open_db(path).execute("CREATE TABLE t (x)")
    for f in tmp_path.glob("old.sqlite3*"):
        os.chmod(f, 0o644)
    with caplog.at_level(logging.WARNING):
        conn = open_db(path)
    conn.close()
    assert all(mode(f) == 0o600 for f in tmp_path.glob("old.sqlite3*"))
    assert "had mode 644; setting 0600" in caplog.text


# ---------------------------------------------------------------------------------------------
# The shuffler's token


BAD_TOKENS = {
    "none": (None, "no shuffler token is configured"),
    "empty": ("", "no shuffler token is configured"),
    "old default": ("change-me-shuffler-token", "well-known placeholder"),
    "placeholder": ("change-me-" + "x" * 40, "well-known placeholder"),
    "short": ("x" * 31, "has 31 characters; at least 32 are required"),
    "not a bearer token": ("a token with spaces in it, long enough to pass", "bearer token"),
}


@pytest.mark.parametrize("service", ["analyzer", "shuffler"])
@pytest.mark.parametrize("case", sorted(BAD_TOKENS))
def test_analyzer_and_shuffler_refuse_to_start_without_a_usable_token(
    tmp_path: Path, service: str, case: str
) -> None:
    token, reason = BAD_TOKENS[case]
    settings = settings_in(tmp_path, shuffler_token=token)
    with pytest.raises(StartupRefused) as refused:
        create(service, settings)
    message = str(refused.value)
    assert message.startswith(f"{service}: refusing to start: ") and reason in message
    # How to fix it, in the same message.
    assert "PRIVBANDIT_SHUFFLER_TOKEN" in message and "privbandit up" in message
    assert not directory(settings, service).exists()  # refused before touching anything


async def test_device_starts_without_a_token(tmp_path: Path) -> None:
    settings = settings_in(tmp_path, shuffler_token=None)
    async with running(create("device", settings)) as client:
        assert (await client.get("/v1/status")).status_code == 200


def test_settings_have_no_default_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the code nor the packaged config files carry a token."""
    monkeypatch.delenv("PRIVBANDIT_SHUFFLER_TOKEN", raising=False)
    for config in ("privbandit.toml", "small.toml"):
        monkeypatch.setenv("PRIVBANDIT_CONFIG", str(ROOT / "shared" / "defaults" / config))
        assert Settings().shuffler_token is None


def test_the_token_can_come_from_a_file_and_only_one_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``shuffler_token_file`` (``PRIVBANDIT_SHUFFLER_TOKEN_FILE``, a mounted secret): the
    settings hold the file's line; the token and the file together, or an unreadable file, are
    refused with a message naming the setting."""
    monkeypatch.delenv("PRIVBANDIT_SHUFFLER_TOKEN", raising=False)
    token = "t0ken-" + "x" * 40
    secret = tmp_path / "shuffler-token"
    secret.write_text(token + "\n")
    monkeypatch.setenv("PRIVBANDIT_SHUFFLER_TOKEN_FILE", str(secret))
    settings = Settings()
    assert (settings.shuffler_token, settings.shuffler_token_file) == (token, None)
    with pytest.raises(ValueError, match="shuffler_token or shuffler_token_file, not both"):
        Settings(shuffler_token=token)
    monkeypatch.setenv("PRIVBANDIT_SHUFFLER_TOKEN_FILE", str(tmp_path / "absent"))
    with pytest.raises(ValueError, match="shuffler_token_file: cannot read .*absent"):
        Settings()


# ---------------------------------------------------------------------------------------------
# python -m services.<name>: one message, exit status 2


def run_service(service: str, data_dir: Path, token: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVBANDIT_")}
    env["PRIVBANDIT_CONFIG"] = str(ROOT / "shared" / "defaults" / "small.toml")
    env["PRIVBANDIT_DATA_DIR"] = str(data_dir)
    if token is not None:
        env["PRIVBANDIT_SHUFFLER_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", f"privbandit.services.{service}", "--port", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=patience(60),
    )


def test_cli_without_a_token_exits_2_with_one_message(tmp_path: Path) -> None:
    result = run_service("shuffler", tmp_path / "data", token=None)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("privbandit shuffler: refusing to start: no shuffler token")
    assert "PRIVBANDIT_SHUFFLER_TOKEN" in lines[0]


def test_cli_with_a_lost_database_exits_2_naming_the_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    state = data / "device"
    state.mkdir(parents=True)
    (state / MARKER).write_text(json.dumps(
        {"service": "device", "created": "then", "files": [DB["device"]]}
    ))
    result = run_service("device", data, token=None)  # the device needs no token
    assert result.returncode == 2, result.stderr
    assert str(state / DB["device"]) in result.stderr and "--init" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


# ---------------------------------------------------------------------------------------------
# Key fingerprints and the databases' page check (issue 40 item 6; the damages themselves, as
# real processes: tests/e2e/test_damaged_state.py)


@pytest.mark.parametrize(("service", "key_file"), KEYS)
async def test_a_key_from_before_fingerprints_gets_one_at_its_first_load_and_says_so(
    tmp_path: Path, service: str, key_file: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A key is fingerprinted when made, in ``sha256sum``'s format; one without a fingerprint
    gets it at its next load, logged, and is protected from then on."""
    settings = await first_start(tmp_path, service)
    key = directory(settings, service) / key_file
    side = key.with_name(key.name + ".sha256")
    recorded = side.read_text()
    assert recorded == f"{hashlib.sha256(key.read_bytes()).hexdigest()}  {key.name}\n"
    assert mode(side) == 0o600
    side.unlink()  # as a data directory made before fingerprints has it
    with caplog.at_level(logging.WARNING, logger="privbandit.shared.crypto.key_files"):
        await start_and_stop(service, settings)
    assert f"{key} had no fingerprint" in caplog.text
    assert side.read_text() == recorded  # the same key, so the same fingerprint
    data = bytearray(key.read_bytes())
    data[-3] ^= 1
    key.write_bytes(bytes(data))
    with pytest.raises(StartupRefused, match=f"{key} \\(.*\\) is "):
        create(service, settings)


def many_rows(path: Path) -> None:
    conn = open_db(path)
    conn.execute("CREATE TABLE t (x INTEGER PRIMARY KEY, y BLOB)")
    conn.execute("CREATE INDEX ty ON t (y)")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO t (y) VALUES (?)", ((os.urandom(64),) for _ in range(20_000)))
    conn.execute("COMMIT")
    conn.close()


def test_quick_check_is_bounded_in_time(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``PRAGMA quick_check`` under a deadline: a check cut short passes, logged; a finished
    one finds a damaged page."""
    path = tmp_path / "big.sqlite3"
    many_rows(path)
    assert quick_check(path, patience(60)) is None
    with caplog.at_level(logging.WARNING, logger="privbandit.services.common.sqlite"):
        assert quick_check(path, 0.0) is None
    assert f"PRAGMA quick_check of {path} did not finish within 0 s" in caplog.text
    # A database another process holds locked is not damaged: started unchecked, logged.
    holder = open_db(path)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    with caplog.at_level(logging.WARNING, logger="privbandit.services.common.sqlite"):
        assert quick_check(path, 0.2) is None
    assert "could not read it (database is locked)" in caplog.text
    holder.execute("ROLLBACK")
    holder.close()
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page:page + 16] = b"\xff" * 16  # the second page's b-tree header
    path.write_bytes(bytes(data))
    why = quick_check(path, patience(60))
    assert why is not None and why.startswith("damaged (PRAGMA quick_check: ")
    assert "\n" not in why
