"""The CPU a client spends per request between processes, as a ratio to a floor in the same run.

The demo's simulated users (``privbandit.demo.driver``: aiohttp) and the calls between services
(``services.common.http_client.service_client``: httpx's API over aiohttp's pool) are measured
against httpx's own async client (httpcore over anyio, what both used before issue 21's session
12). The server is a bare asyncio one in a child process answering every request with a fixed
JSON body, so the figure is the client's alone: this process's user + system CPU over
``--requests`` POSTs at 4 in flight, the median of ``--repeats`` interleaved rounds.

- floor: aiohttp's ``ClientSession.post`` with a pre-encoded body (what the demo's users do);
- service_client: ``httpx.AsyncClient`` on ``ServiceTransport``;
- httpx: ``httpx.AsyncClient`` on its default transport.

    python -m bench.http_client [--requests 2000] [--repeats 5] [--json out/bench/http_client.json]
"""

from __future__ import annotations

import asyncio
import json
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import aiohttp
import httpx

from bench.args import parse, write_json
from privbandit.services.common.http_client import service_client

SERVER = r"""
import asyncio, sys
BODY = b'{"queued":true,"outbox_pending":0}'
ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
          + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)
async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            n = next((int(l.split(b":")[1]) for l in head.split(b"\r\n")
                      if l.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(n)
            writer.write(ANSWER)
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]))
    print("ready", flush=True)
    await server.serve_forever()
asyncio.run(main())
"""

BODY = {"decision_id": "d" * 40, "reward": 1.0}
CONCURRENCY = 4


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def spread(n: int, post: Callable[[], Awaitable[None]]) -> float:
    """CPU seconds of ``n`` calls of ``post``, ``CONCURRENCY`` in flight."""
    left = [n]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            await post()

    start = cpu()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return cpu() - start


async def floor(url: str, n: int) -> float:
    data = json.dumps(BODY).encode()
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY)) as s:
        async def post() -> None:
            async with s.post(url + "/v1/x", data=data, headers=headers) as resp:
                assert resp.status == 200
                await resp.read()

        await post()  # the connection and the first request's set-up are not measured
        return await spread(n, post)


async def with_httpx(client: httpx.AsyncClient, n: int) -> float:
    async with client:
        async def post() -> None:
            resp = await client.post("/v1/x", json=BODY)
            assert resp.status_code == 200

        await post()
        return await spread(n, post)


def main() -> None:
    args = parse(__doc__, {"requests": 2000, "repeats": 5}, "out/bench/http_client.json")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        url = f"http://127.0.0.1:{port}"
        runs: dict[str, list[float]] = {"floor": [], "service_client": [], "httpx": []}
        for _ in range(args.repeats):
            runs["floor"].append(asyncio.run(floor(url, args.requests)))
            runs["service_client"].append(asyncio.run(
                with_httpx(service_client(url, 30.0), args.requests)))
            runs["httpx"].append(asyncio.run(
                with_httpx(httpx.AsyncClient(base_url=url, timeout=30.0), args.requests)))
            time.sleep(0.1)
    finally:
        server.terminate()
        server.wait()
    per = {k: statistics.median(v) / args.requests * 1e6 for k, v in runs.items()}
    for name, us in per.items():
        print(f"{name:15s} {us:7.1f} µs of CPU per request  {us / per['floor']:5.2f}x the floor")
    write_json(args.json, {"requests": args.requests, "repeats": args.repeats,
                           "cpu_us_per_request": per,
                           "ratio_to_floor": {k: v / per["floor"] for k, v in per.items()},
                           "runs_cpu_seconds": runs})


if __name__ == "__main__":
    main()
