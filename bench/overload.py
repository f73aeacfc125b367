"""Overload benchmark of the device (issue 26 item 3): decide p99 at many concurrent users against
its p99 at few, with the device's bound of requests in flight (``limits.device_requests``).

Starts fresh services on free loopback ports (one ``central`` task, the demo's: K = 20, d = 5),
then, per level, runs that many closed-loop users for ``--seconds``: each user sends ``decide``
and then ``feedback`` and starts again; a 503 ``overloaded`` (or 429) is answered by waiting its
Retry-After, as the project's clients do, and sending the same request again. Per level it
reports the latency of every *answered* decide (200: admitted and served) — p50, p99 — the
decides shed (503 ``overloaded``), the decides served per second, and the p99 a user waits for
her decision, retries included. The headline is

    ratio = decide p99 at the highest level / decide p99 at the lowest (issue: <= 2)

``--limit`` sets ``limits.device_requests`` for the run (default: the setting's default); a large
one (``--limit 100000``) shows the device without admission control.

    nice -n 10 python bench/overload.py [--levels 50,200] [--seconds 20] [--limit N] [--json F]

The users share one client process (its CPU time is reported) and the machine with the
services: on a busy 2-core machine the absolute figures drift, compare levels of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from privbandit.launcher import Cluster, free_ports  # noqa: E402
from privbandit.services.common.retry import retry_after  # noqa: E402
from privbandit.shared.settings import Limits  # noqa: E402

TASK = "bench-central"
K, D = 20, 5
CONFIG = f"""\
log_level = "warning"

[[tasks]]
id = "{TASK}"
threat_model = "central"
K = {K}
[tasks.policy]
algo = "adar-oful"
d = {D}
alpha = 10.0
epsilon = 0.2
delta = 1e-6
confidence_scale = 0.3
"""
MAX_LEVEL = 512


class Level:
    """What the users of one level saw."""

    def __init__(self) -> None:
        self.served: list[float] = []  # seconds, per answered (200) decide
        self.waited: list[float] = []  # seconds, per user decision, retries included
        self.shed = 0  # decides answered 503/429
        self.feedback_shed = 0
        self.feedbacks = 0
        self.errors = 0


class Connection:
    """One user's keep-alive HTTP/1.1 connection to the device, spoken directly over asyncio
    streams: a general client (httpx) costs the single client process more CPU per request
    than the device spends answering it, and at 200 users on a busy machine its own queue
    would be measured instead of the device's."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        """(status, lower-cased headers, body) of one POST; reconnects when the server closed
        the connection."""
        if self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            self.writer.close()
            self.writer = None
            raise
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip()
                   for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        content = await self.reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            self.writer.close()
            self.writer = None
        return status, headers, content

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def send(conn: Connection, path: str, body: bytes, ok: int, out: Level,
               served: list[float] | None) -> tuple[bytes, float]:
    """POST until answered ``ok``: a 429/503 waits its Retry-After (as the project's clients
    do); the answer's body and when the first attempt was sent."""
    first = time.monotonic()
    while True:
        t0 = time.monotonic()
        try:
            status, headers, content = await conn.post(path, body)
        except (OSError, asyncio.IncompleteReadError):
            out.errors += 1
            await asyncio.sleep(0.1)
            continue
        if status == ok:
            if served is not None:
                served.append(time.monotonic() - t0)
            return content, first
        if status in (429, 503):
            if served is not None:
                out.shed += 1
            else:
                out.feedback_shed += 1
            # Retry-After, spread over half of it again: a shed wave does not return as one.
            await asyncio.sleep(max(0.05, retry_after(headers)) * (1 + 0.5 * random.random()))
            continue
        raise RuntimeError(f"{path}: {status} {content[:200]!r}")


async def user(conn: Connection, until: float, rng: np.random.Generator, out: Level) -> None:
    decide = f"/v1/tasks/{TASK}/decide"
    feedback = f"/v1/tasks/{TASK}/feedback"
    try:
        while time.monotonic() < until:
            x = rng.normal(size=(K, D))
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            body = json.dumps({"features": x.tolist()}).encode()
            content, first = await send(conn, decide, body, 200, out, out.served)
            out.waited.append(time.monotonic() - first)
            fb = {"decision_id": json.loads(content)["decision_id"],
                  "reward": float(rng.random() < 0.5)}
            await send(conn, feedback, json.dumps(fb).encode(), 202, out, None)
            out.feedbacks += 1
    finally:
        conn.close()


def ms(values: list[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values) * 1e3, q)) if values else None


async def run_level(url: str, users: int, seconds: float, seed: int) -> dict[str, Any]:
    out = Level()
    address = httpx.URL(url)
    assert address.host and address.port
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.monotonic()
    until = start + seconds
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(users)]
    await asyncio.gather(*(user(Connection(address.host, address.port), until, rng, out)
                           for rng in rngs))
    wall = time.monotonic() - start
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    client_cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    return {
        "users": users,
        "wall_seconds": wall,
        "decides_served": len(out.served),
        "decides_per_second": len(out.served) / wall,
        "decide_p50_ms": ms(out.served, 50),
        "decide_p99_ms": ms(out.served, 99),
        "decide_max_ms": ms(out.served, 100),
        "decides_shed": out.shed,
        "shed_fraction": out.shed / max(1, out.shed + len(out.served)),
        "user_wait_p99_ms": ms(out.waited, 99),
        "feedbacks": out.feedbacks,
        "feedbacks_shed": out.feedback_shed,
        "transport_errors": out.errors,
        "client_cpu_seconds": client_cpu,
    }


def shed_total(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return next((float(line.split()[-1]) for line in text.splitlines()
                 if line.startswith("privbandit_device_requests_shed_total")), 0.0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--levels", default="50,200", help="comma-separated concurrent users")
    p.add_argument("--seconds", type=float, default=20.0, help="seconds per level")
    p.add_argument("--limit", type=int, default=Limits().device_requests,
                   help="limits.device_requests for the run (default: the setting's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", dest="json_out", type=Path)
    args = p.parse_args(argv)
    levels = [int(v) for v in args.levels.split(",") if v.strip()]
    if not levels or any(not 1 <= v <= MAX_LEVEL for v in levels):
        p.error(f"levels must be in 1..{MAX_LEVEL}")
    if not 0 < args.seconds <= 600:
        p.error("--seconds must be in (0, 600]")

    results = []
    with tempfile.TemporaryDirectory(prefix="privbandit-overload-") as tmp:
        root = Path(tmp)
        config = root / "overload.toml"
        config.write_text(CONFIG)
        ports = dict(zip(("analyzer", "shuffler", "device"), free_ports(3), strict=True))
        env = {"PRIVBANDIT_LIMITS__DEVICE_REQUESTS": str(args.limit)}
        with Cluster(root / "data", ports, config=config, log_dir=root / "logs",
                     extra_env=env) as cluster:
            cluster.start(timeout=120)
            url = cluster["device"].url
            print(f"device limits.device_requests = {args.limit}; {args.seconds:g} s per level",
                  flush=True)
            for i, users in enumerate(levels):
                shed_before = shed_total(url)
                out = asyncio.run(run_level(url, users, args.seconds, args.seed + i))
                out["device_shed_metric"] = shed_total(url) - shed_before
                results.append(out)
                print(f"{users:4d} users: {out['decides_per_second']:6.1f} decides/s | decide "
                      f"p50 {out['decide_p50_ms']:.1f} ms p99 {out['decide_p99_ms']:.1f} ms "
                      f"max {out['decide_max_ms']:.1f} ms | shed {out['decides_shed']} decides "
                      f"({100 * out['shed_fraction']:.1f} %), {out['feedbacks_shed']} feedbacks "
                      f"(metric: {out['device_shed_metric']:.0f}) | user wait p99 "
                      f"{out['user_wait_p99_ms']:.1f} ms | client CPU "
                      f"{out['client_cpu_seconds']:.1f} s", flush=True)
    low, high = results[0], results[-1]
    ratio = high["decide_p99_ms"] / low["decide_p99_ms"]
    print(f"decide p99 at {high['users']} users / at {low['users']} users = {ratio:.2f}",
          flush=True)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(
            {"limit": args.limit, "levels": results, "p99_ratio": ratio}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
