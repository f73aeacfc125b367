"""Users per second through the browser client's page (issue 41 item 7), against the Python
device service on the same deployment, users and concurrency, measured in the same run.

The page: N simulated users of a task played by the page's harness in headless Debian
Chromium (``clients/web/page/drive.mjs``): per user the local decision, then randomise, seal or
Prio3-shard in the Web Worker, the IndexedDB outbox write (strict durability) and, in the
background, the uploads to the shuffler. The floor: the same N users through the Python device
service (``privbandit.demo.driver``: decide and feedback over HTTP, the device's SQLite outbox,
its uploads). Each is timed from the first user to the last feedback made durable on the device
side ("queued"); the page's time until its outbox is empty is given too. Tasks: the small
configuration's ``sblb`` (``small-shuffle``, HPKE reports), the same over prio3, and its
``ddp-linucb`` (``small-ddp``, prio3, the aggregators' noise); the page and the floor use copies
of their own so neither learns from the other's users.

    python -m bench.web_page [--users 2000] [--concurrency 4] [--seed 3]
        [--screenshot docs/web-client.png]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import tomli_w

from privbandit.demo.driver import Driver
from privbandit.launcher import local_cluster
from privbandit.shared.protocol.messages import TaskInfo
from privbandit.web_page import PageServer, build_page, drive_page, page_config, user_table

CHROMIUM = "/usr/bin/chromium"


def config_text(origin: str) -> str:
    """The small configuration's sblb task, its prio3 copy and its ddp-linucb task, once for the
    page and once for the floor, open to the page's origin."""
    small = resources.files("privbandit.shared").joinpath("defaults", "small.toml").read_text()
    data = tomllib.loads(small)
    sblb = next(t for t in data["tasks"] if t["id"] == "small-shuffle")
    prio3 = {**sblb, "aggregation": "secure-sum", "secure_sum": "prio3"}
    ddp = next(t for t in data["tasks"] if t["id"] == "small-ddp")
    data["tasks"] = [{**t, "id": f"{who}-{name}"} for who in ("page", "py")
                     for name, t in (("sblb", sblb), ("sblb-prio3", prio3), ("ddp", ddp))]
    data["browser_origins"] = [origin]
    data["shuffler_token"] = "bench-web-client-token-0123456789abcdef"
    return tomli_w.dumps(data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--screenshot", type=Path, help="also save the page's UI as a PNG here")
    args = ap.parse_args()
    folder = build_page()
    with tempfile.TemporaryDirectory(prefix="bench-web-") as tmp:
        root = Path(tmp)
        page = PageServer(folder)
        config = root / "web.toml"
        config.write_text(config_text(page.origin))
        with page, local_cluster(root / "data", config=config, log_dir=root / "logs") as cluster:
            urls = cluster.urls
            infos = {t: TaskInfo.model_validate(httpx.get(
                f"{urls['analyzer']}/v1/tasks/{who}-{t}", timeout=10).json())
                for who in ("page",) for t in ("sblb", "sblb-prio3", "ddp")}
            page.configure(page_config(urls["analyzer"], urls["shuffler"],
                                       [f"page-{t}" for t in infos]))
            rows: list[dict[str, Any]] = []
            for name, info in infos.items():
                users = root / f"{name}.json"
                users.write_text(json.dumps(user_table(info, args.users, args.seed)))
                job = {"url": page.origin, "chromium": CHROMIUM, "concurrency": args.concurrency,
                       "userDataDir": str(root / f"profile-{name}"), "reload": False,
                       "tasks": [{"id": info.id, "users": str(users)}], "drainSeconds": 600}
                got = drive_page(job, root, timeout=1800)["tasks"][info.id]
                py_task = TaskInfo.model_validate(httpx.get(
                    f"{urls['analyzer']}/v1/tasks/py-{name}", timeout=10).json())
                floor = asyncio.run(Driver(urls["device"], py_task, args.users,
                                           concurrency=args.concurrency, seed=args.seed).run())
                rows.append({
                    "task": name, "users": args.users,
                    "page_users_per_s": args.users / got["queuedSeconds"],
                    "page_drained_users_per_s": args.users / got["seconds"],
                    "python_device_users_per_s": args.users / floor.wall_seconds,
                })
            for r in rows:
                r["ratio"] = r["page_users_per_s"] / r["python_device_users_per_s"]
                print(f"{r['task']:11s} page {r['page_users_per_s']:7.1f} users/s "
                      f"(outbox drained: {r['page_drained_users_per_s']:7.1f}); Python device "
                      f"{r['python_device_users_per_s']:7.1f} users/s; page/device "
                      f"{r['ratio']:.2f}x")
            if args.screenshot is not None:
                shot = {"url": page.origin, "chromium": CHROMIUM, "concurrency": 1,
                        "userDataDir": str(root / "profile-shot"), "tasks": [],
                        "screenshot": {"path": str(args.screenshot.resolve()),
                                       "task": "page-sblb"}}
                drive_page(shot, root, timeout=600)
                print(f"screenshot: {args.screenshot}")
            print(json.dumps(rows))


if __name__ == "__main__":
    main()
