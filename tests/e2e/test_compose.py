"""docker-compose.yml and the Dockerfile: validated by ``docker-compose config`` when the binary
is installed, and structurally with PyYAML always (there is no Docker engine in CI, so nothing
is built or run here)."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
SERVICES = ("analyzer", "shuffler", "device")
# Started only with ``--profile postgres``: the database and a second shuffler replica.
POSTGRES_PROFILE = ("postgres", "shuffler-2")


@pytest.fixture(scope="module")
def full_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def compose(full_compose: dict[str, Any]) -> dict[str, Any]:
    """The deployment without profiles: the three services on SQLite."""
    services = {n: svc for n, svc in full_compose["services"].items() if "profiles" not in svc}
    return {**full_compose, "services": services}


@pytest.fixture(scope="module")
def ports() -> dict[str, int]:
    cfg = tomllib.loads((ROOT / "shared" / "defaults" / "privbandit.toml").read_text())
    return {name: int(cfg[name]["port"]) for name in SERVICES}


def docker_compose_config(token: str | None) -> subprocess.CompletedProcess[str]:
    """``docker-compose config -q`` with PRIVBANDIT_SHUFFLER_TOKEN set to ``token`` (or unset)."""
    env = {k: v for k, v in os.environ.items() if k != "PRIVBANDIT_SHUFFLER_TOKEN"}
    if token is not None:
        env["PRIVBANDIT_SHUFFLER_TOKEN"] = token
    return subprocess.run(
        ["docker-compose", "-f", str(COMPOSE), "config", "-q"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )


needs_compose = pytest.mark.skipif(
    shutil.which("docker-compose") is None, reason="docker-compose not installed"
)


@needs_compose
def test_docker_compose_config_validates() -> None:
    result = docker_compose_config(secrets.token_urlsafe(32))
    assert result.returncode == 0, result.stderr


@needs_compose
def test_docker_compose_refuses_without_a_shuffler_token() -> None:
    result = docker_compose_config(None)
    assert result.returncode != 0
    assert "set PRIVBANDIT_SHUFFLER_TOKEN" in result.stderr, result.stderr


def test_shuffler_token_comes_from_the_environment_with_no_default(
    compose: dict[str, Any],
) -> None:
    for svc in compose["services"].values():
        value = svc["environment"]["PRIVBANDIT_SHUFFLER_TOKEN"]
        # ${VAR:?message}: compose refuses to start without it; ${VAR:-default} would not.
        assert value.startswith("${PRIVBANDIT_SHUFFLER_TOKEN:?"), value
        assert ":-" not in value and "change-me" not in value


def test_three_services_from_one_image(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == set(SERVICES)
    assert len({svc["image"] for svc in services.values()}) == 1
    for name, svc in services.items():
        assert svc["build"] == "."
        # --host is the bind address inside the container; peers are found by service name.
        assert svc["command"] == ["python", "-m", f"services.{name}", "--host", "0.0.0.0"]
        env = svc["environment"]
        for peer in SERVICES:
            assert env[f"PRIVBANDIT_{peer.upper()}__HOST"] == peer
        assert env["PRIVBANDIT_DATA_DIR"] == "/data"


def test_healthchecks_use_python_not_curl(compose: dict[str, Any], ports: dict[str, int]) -> None:
    for name, svc in compose["services"].items():
        test = svc["healthcheck"]["test"]
        assert test[:3] == ["CMD", "python", "-c"]
        assert "curl" not in " ".join(test) and "wget" not in " ".join(test)
        assert f"http://127.0.0.1:{ports[name]}/healthz" in test[3]
        # The probe is valid Python.
        compile(test[3], "<healthcheck>", "exec")


def test_start_order_waits_for_health(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert "depends_on" not in services["analyzer"]
    assert services["shuffler"]["depends_on"] == {"analyzer": {"condition": "service_healthy"}}
    assert services["device"]["depends_on"] == {
        "analyzer": {"condition": "service_healthy"},
        "shuffler": {"condition": "service_healthy"},
    }


def test_state_in_named_volumes_and_one_read_only_config(compose: dict[str, Any]) -> None:
    assert set(compose["volumes"]) == {f"{n}-data" for n in SERVICES} | {"postgres-data"}
    for name, svc in compose["services"].items():
        vols = svc["volumes"]
        assert f"{name}-data:/data/{name}" in vols
        config_path = svc["environment"]["PRIVBANDIT_CONFIG"]
        assert f"./shared/defaults/privbandit.toml:{config_path}:ro" in vols
        # Published on the host's loopback only.
        assert all(p.startswith("127.0.0.1:") for p in svc["ports"])


def test_the_postgres_profile_adds_a_database_and_a_replica_on_it(
    full_compose: dict[str, Any],
) -> None:
    services = full_compose["services"]
    assert {n for n, svc in services.items() if "profiles" in svc} == set(POSTGRES_PROFILE)
    assert all(services[n]["profiles"] == ["postgres"] for n in POSTGRES_PROFILE)
    pg = services["postgres"]
    assert pg["image"].startswith("postgres:") and "pg_isready" in pg["healthcheck"]["test"]
    assert "postgres-data:/var/lib/postgresql/data" in pg["volumes"]
    replica = services["shuffler-2"]
    assert replica["command"][:3] == ["python", "-m", "services.shuffler"]
    assert replica["command"][-2:] == ["--port", "8704"]
    assert replica["depends_on"]["postgres"] == {"condition": "service_healthy"}
    assert "8704/healthz" in replica["healthcheck"]["test"][3]


_BRACED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:[-+?])(.*))?", re.S)


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's interpolation (docs.docker.com/reference/compose-file/interpolation) of the
    forms this file uses: ``${VAR}``, ``${VAR:-default}``, ``${VAR:+replacement}``,
    ``${VAR:?error}`` and ``$$``, nested. There is no compose binary to ask here."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("${", i):
            depth, j = 1, i + 2
            while depth:  # the brace that closes this ${, nested ${...} included
                if text.startswith("${", j):
                    depth, j = depth + 1, j + 2
                    continue
                depth -= text[j] == "}"
                j += 1
            match = _BRACED.fullmatch(text[i + 2 : j - 1])
            assert match, text
            name, op, arg = match.groups()
            value = env.get(name, "")
            if op == ":-" and not value:
                value = interpolate(arg, env)
            elif op == ":+":
                value = interpolate(arg, env) if value else ""
            elif op == ":?" and not value:
                raise ValueError(interpolate(arg, env))
            out.append(value)
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def test_interpolate_follows_composes_rules() -> None:
    env = {"A": "a", "E": ""}
    assert interpolate("${A}-${B}-$$x", env) == "a--$x"
    assert interpolate("${B:-${A:+<${A}>}}", env) == "<a>"
    assert interpolate("${E:-${B:+never}}", env) == ""
    assert interpolate("${A:-${B:?unused}}", env) == "a"
    with pytest.raises(ValueError, match="need B"):
        interpolate("${B:?need B}", env)


PG_URL = "postgresql://privbandit:{}@postgres:5432/privbandit"
REPLICAS = ["http://shuffler:8702", "http://shuffler-2:8704"]


@pytest.mark.parametrize(
    ("host_env", "store", "urls"),
    [
        ({}, "sqlite", []),
        ({"PRIVBANDIT_POSTGRES_PASSWORD": "0f3a"}, PG_URL.format("0f3a"), REPLICAS),
        ({"PRIVBANDIT_POSTGRES_PASSWORD": "0f3a", "PRIVBANDIT_STORE": "postgresql://me@db/x",
          "PRIVBANDIT_SHUFFLER_URLS": '["http://s:1"]'}, "postgresql://me@db/x", ["http://s:1"]),
        ({"PRIVBANDIT_STORE": "postgresql://me@db/x"}, "postgresql://me@db/x", []),
    ],
    ids=["no-password-sqlite", "password-postgres", "explicit-overrides", "explicit-store"],
)
def test_the_postgres_password_points_every_service_at_the_database(
    full_compose: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    host_env: dict[str, str],
    store: str,
    urls: list[str],
) -> None:
    """What each container's settings become, for what the operator exported: the profile's
    password alone switches the analyzer and every shuffler to the ``postgres`` service and the
    device to both replicas; without it the services keep their SQLite files."""
    from shared.settings import Settings

    host_env = {**host_env, "PRIVBANDIT_SHUFFLER_TOKEN": secrets.token_urlsafe(32)}
    for name in (*SERVICES, "shuffler-2"):
        env = {k: interpolate(str(v), host_env)
               for k, v in full_compose["services"][name]["environment"].items()}
        for key in [k for k in os.environ if k.startswith("PRIVBANDIT_")]:
            monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        # The container's config path does not exist here: the same file, from the checkout.
        monkeypatch.setenv("PRIVBANDIT_CONFIG", str(ROOT / "shared/defaults/privbandit.toml"))
        settings = Settings()
        assert settings.analyzer.store == settings.shuffler.store == store, name
        assert settings.shuffler.urls == urls, name
    pg_password = full_compose["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"]
    assert interpolate(pg_password, host_env) == host_env.get("PRIVBANDIT_POSTGRES_PASSWORD", "")


@needs_compose
def test_docker_compose_config_validates_with_the_postgres_profile() -> None:
    env = {**os.environ, "PRIVBANDIT_SHUFFLER_TOKEN": secrets.token_urlsafe(32)}
    result = subprocess.run(
        ["docker-compose", "-f", str(COMPOSE), "--profile", "postgres", "config", "-q"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_dockerfile() -> None:
    text = (ROOT / "Dockerfile").read_text()
    froms = [line for line in text.splitlines() if line.startswith("FROM ")]
    assert froms == ["FROM python:3.11-slim"]
    assert "pip install ." in text
    for name in SERVICES:
        assert f"/data/{name}" in text
    # Every path the image copies exists in the repository.
    for line in text.splitlines():
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (ROOT / src).exists(), src


def test_bind_address_is_separate_from_peer_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a container the device binds 0.0.0.0 but talks to http://analyzer:8701 etc."""
    import services.common.cli as service_cli
    import services.device.__main__ as device_main

    for peer in SERVICES:
        monkeypatch.setenv(f"PRIVBANDIT_{peer.upper()}__HOST", peer)
    monkeypatch.setenv("PRIVBANDIT_CONFIG", str(ROOT / "shared" / "defaults" / "privbandit.toml"))
    captured: dict[str, Any] = {}

    def fake_run(app: Any, **kwargs: Any) -> None:
        captured.update(kwargs)

    def fake_create_app(settings: Any, **kwargs: Any) -> Any:
        captured["settings"] = settings
        return SimpleNamespace(state=SimpleNamespace())

    monkeypatch.setattr(service_cli.uvicorn, "run", fake_run)
    monkeypatch.setattr(device_main, "create_app", fake_create_app)
    device_main.main(["--host", "0.0.0.0"])
    assert captured["host"] == "0.0.0.0" and captured["port"] == 8703
    assert captured["settings"].analyzer.url == "http://analyzer:8701"
    assert captured["settings"].shuffler.url == "http://shuffler:8702"
