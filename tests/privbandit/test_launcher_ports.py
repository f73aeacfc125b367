"""Service ports: chosen below the kernel's ephemeral range (no client connection can take one
between the choice and the bind), distinct, consecutive on request; a health check is answered
only by the service it asks for."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from privbandit.launcher import (
    Cluster,
    cluster_ports,
    free_port_block,
    free_ports,
    healthy,
    service_port_range,
)


def test_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    pool = service_port_range()
    for _ in range(20):
        ports = free_ports(3)
        assert len(set(ports)) == 3
        if len(pool):
            assert all(p in pool for p in ports), (ports, pool)
        for port in ports:  # free a moment ago, so bindable now (nothing else here takes them)
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port))


def test_a_block_is_consecutive() -> None:
    base = free_port_block(4)
    for port in range(base, base + 4):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_clusters_ports_leave_room_for_its_shuffler_replicas(tmp_path: Path) -> None:
    """Every service of a cluster with replicas gets its own port (the replicas take the ports
    after the shuffler's): drawn in one block, none can fall inside the replicas' range, which
    ports drawn separately could (a cluster refused to start in a full run once)."""
    for shufflers in (1, 2, 3):
        for _ in range(20):
            ports = cluster_ports(shufflers)
            cluster = Cluster(tmp_path, ports, store="postgresql://unused", shufflers=shufflers)
            used = [svc.port for svc in cluster.services.values()]
            assert len(used) == len(set(used)) == shufflers + 2, used
            for port in used:
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))


def test_a_taken_port_is_never_returned() -> None:
    pool = service_port_range()
    held = []
    try:
        for port in free_ports(10):
            sock = socket.socket()
            sock.bind(("127.0.0.1", port))
            held.append(sock)
        taken = {s.getsockname()[1] for s in held}
        for _ in range(50):
            assert not taken & set(free_ports(3)), pool
    finally:
        for sock in held:
            sock.close()


@contextmanager
def health_server(body: dict[str, object]) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            return None

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_health_is_answered_only_by_the_service_asked_for() -> None:
    with health_server({"status": "ok", "service": "device"}) as url:
        assert healthy(url)
        assert healthy(url, service="device")
        assert not healthy(url, service="shuffler")
    with health_server({"status": "ok"}) as url:  # not one of ours
        assert not healthy(url, service="shuffler")
