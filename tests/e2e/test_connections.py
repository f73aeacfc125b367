"""Overload and slow clients against real service processes over real sockets (issue 26 items 3
and 4): a device and its analyzer, started with small connection settings
(``Settings.connections``, ``limits.device_requests``):

- connections that send a partial request head (or nothing) are closed after the header timeout,
  a kept-alive one too, and an idle kept-alive connection after the idle timeout;
- past the connection limit a request is refused with 503, and once the slow connections are
  gone a fresh one gets its health answer again;
- past the bound of requests in flight the device answers 503 ``overloaded`` with Retry-After,
  while its health still answers, and admits again once those requests end.

Timing bounds are the configured timeouts times a deadline factor (``tests.helpers.deadline``).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from privbandit.launcher import Cluster, free_ports
from tests.helpers import TOKEN, deadline, error, patience

HEADER_TIMEOUT = 1.0
IDLE_TIMEOUT = 1
MAX_CONNECTIONS = 16
DEVICE_REQUESTS = 3
# Slack over a timeout before a connection must be seen closed: the event loop's timer fires on
# a loaded machine when it gets the CPU.
SLACK = 5.0

CONFIG = f"""\
shuffler_token = "{TOKEN}"
log_level = "warning"

[[tasks]]
id = "conn-ldp"
threat_model = "ldp"
K = 3
[tasks.policy]
algo = "ldp-linucb"
d = 2
epsilon = 1.0
"""

PARTIAL_HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "
FULL_HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("connections")
    config = root / "conn.toml"
    config.write_text(CONFIG)
    ports = dict(zip(("analyzer", "shuffler", "device"), free_ports(3), strict=True))
    env = {
        "PRIVBANDIT_CONNECTIONS__HEADER_TIMEOUT": str(HEADER_TIMEOUT),
        "PRIVBANDIT_CONNECTIONS__IDLE_TIMEOUT": str(IDLE_TIMEOUT),
        "PRIVBANDIT_CONNECTIONS__MAX_CONNECTIONS": str(MAX_CONNECTIONS),
        "PRIVBANDIT_LIMITS__MODEL_STREAMS": "4",
        "PRIVBANDIT_LIMITS__DEVICE_REQUESTS": str(DEVICE_REQUESTS),
        "PRIVBANDIT_LIMITS__RETRY_AFTER": "2",
    }
    with Cluster(root / "data", ports, config=config, log_dir=root / "logs",
                 extra_env=env) as cluster:
        # No shuffler: the device needs only the analyzer's keys and models to be healthy.
        cluster.start(["analyzer", "device"], timeout=patience(60))
        yield cluster


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=patience(10))
    return sock


def closed_by_server(sock: socket.socket, by: float) -> bool:
    """Whether the server closes ``sock`` (EOF, or a reset) before the monotonic instant ``by``;
    anything it sends first (a response) is read and skipped."""
    while True:
        left = by - time.monotonic()
        if left <= 0:
            return False
        sock.settimeout(left)
        try:
            if sock.recv(65536) == b"":
                return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True


def read_response(sock: socket.socket) -> bytes:
    """One small response (headers and a short body) read off ``sock``."""
    sock.settimeout(patience(10))
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(65536)
    return head


def test_partial_heads_are_closed_after_the_header_timeout_and_the_limit_refuses(
    services: Cluster,
) -> None:
    device = services["device"]
    port = device.port
    # A kept-alive connection that then starts a head and never ends it: uvicorn's own
    # keep-alive timer is cancelled by that first byte, so only the header timeout closes it.
    kept = connect(port)
    kept.sendall(FULL_HEAD)
    assert read_response(kept).startswith(b"HTTP/1.1 200")
    kept.sendall(PARTIAL_HEAD)
    silent = connect(port)  # never sends a byte
    slow = [connect(port) for _ in range(MAX_CONNECTIONS - 2)]
    for sock in slow:
        sock.sendall(PARTIAL_HEAD)
    every = [kept, silent, *slow]
    try:
        # The service holds MAX_CONNECTIONS connections: a request on one more is refused
        # (uvicorn's 503, before the app).
        refused = httpx.get(f"{device.url}/healthz", timeout=patience(10))
        assert refused.status_code == 503
        by = deadline(HEADER_TIMEOUT + SLACK)
        still_open = [i for i, sock in enumerate(every) if not closed_by_server(sock, by)]
        assert still_open == [], f"connections {still_open} outlived the header timeout"
    finally:
        for sock in every:
            sock.close()
    # Their slots are free: a fresh connection is answered.
    assert httpx.get(f"{device.url}/healthz", timeout=patience(10)).status_code == 200


def test_an_idle_kept_alive_connection_is_closed_after_the_idle_timeout(
    services: Cluster,
) -> None:
    with connect(services["analyzer"].port) as sock:
        sock.sendall(FULL_HEAD)
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        assert closed_by_server(sock, deadline(IDLE_TIMEOUT + SLACK))


def test_the_device_sheds_past_its_bound_of_requests_in_flight(services: Cluster) -> None:
    """Requests whose body has not arrived yet are in flight (admitted: the app waits for the
    body); one more is 503 ``overloaded`` with Retry-After while health answers, and once they
    end a request is admitted again."""
    device = services["device"]
    decide = "/v1/tasks/conn-ldp/decide"
    holders = [connect(device.port) for _ in range(DEVICE_REQUESTS)]
    try:
        for sock in holders:
            sock.sendall(f"POST {decide} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                         "\r\nContent-Length: 100\r\n\r\n".encode())
        body = {"features": [[0.1, 0.2]] * 3}
        with httpx.Client(base_url=device.url, timeout=patience(10)) as client:
            stop = deadline(30)
            while True:  # the holders' heads reach the app in their own time
                r = client.post(decide, json=body)
                if r.status_code == 503 or time.monotonic() > stop:
                    break
            assert error(r, 503, "overloaded") and r.headers["retry-after"] == "2"
            assert client.get("/healthz").status_code == 200
            metrics = client.get("/metrics").text
            assert "privbandit_device_requests_shed_total" in metrics
            shed = next(float(line.split()[-1]) for line in metrics.splitlines()
                        if line.startswith("privbandit_device_requests_shed_total"))
            assert shed >= 1
            for sock in holders:
                sock.close()
            holders = []
            stop = deadline(30)
            while (r := client.post(decide, json=body)).status_code == 503:
                assert time.monotonic() < stop, "the closed requests never freed their slots"
                time.sleep(0.05)
            assert r.status_code == 200, r.text
    finally:
        for sock in holders:
            sock.close()


def test_connection_settings_are_refused_when_streams_cannot_fit(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from privbandit.shared.settings import Settings

    with pytest.raises(ValidationError, match="max_connections"):
        Settings(data_dir=tmp_path, limits={"model_streams": 64},
                 connections={"max_connections": 64})
