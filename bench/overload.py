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
from services.common.retry import retry_after  # noqa: E402
from shared.settings import Limits  # noqa: E402

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


async def user(client: httpx.AsyncClient, until: float, rng: np.random.Generator,
               out: Level) -> None:
    decide = f"/v1/tasks/{TASK}/decide"
    feedback = f"/v1/tasks/{TASK}/feedback"
    while time.monotonic() < until:
        x = rng.normal(size=(K, D))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        body = {"features": x.tolist()}
        first = time.monotonic()
        while True:
            t0 = time.monotonic()
            try:
                r = await client.post(decide, json=body)
            except httpx.TransportError:
                out.errors += 1
                await asyncio.sleep(0.1)
                continue
            if r.status_code == 200:
                now = time.monotonic()
                out.served.append(now - t0)
                out.waited.append(now - first)
                break
            if r.status_code in (429, 503):
                out.shed += 1
                await asyncio.sleep(max(0.05, retry_after(r.headers)))
                continue
            raise RuntimeError(f"decide: {r.status_code} {r.text[:200]}")
        fb = {"decision_id": r.json()["decision_id"], "reward": float(rng.random() < 0.5)}
        while True:
            try:
                r = await client.post(feedback, json=fb)
            except httpx.TransportError:
                out.errors += 1
                await asyncio.sleep(0.1)
                continue
            if r.status_code == 202:
                out.feedbacks += 1
                break
            if r.status_code in (429, 503):
                out.feedback_shed += 1
                await asyncio.sleep(max(0.05, retry_after(r.headers)))
                continue
            raise RuntimeError(f"feedback: {r.status_code} {r.text[:200]}")


def ms(values: list[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values) * 1e3, q)) if values else None


async def run_level(url: str, users: int, seconds: float, seed: int) -> dict[str, Any]:
    out = Level()
    limits = httpx.Limits(max_connections=users + 8, max_keepalive_connections=users + 8)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120.0) as client:
        # Warm-up: connections open, the device's caches hot.
        for _ in range(3):
            await client.get("/healthz")
        start = time.monotonic()
        until = start + seconds
        rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(users)]
        await asyncio.gather(*(user(client, until, rng, out) for rng in rngs))
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
