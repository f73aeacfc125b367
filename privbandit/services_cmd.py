"""``privbandit up`` and ``privbandit demo`` (spec §6): the services as local processes.

Registered in ``shared/cli.py`` with ``add_up_parser(sub)`` and ``add_demo_parser(sub)``; each
sets ``func`` so the CLI calls ``args.func(args)``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

from privbandit.demo import DEFAULT_USERS, THREAT_MODELS, DemoError, config_path, load_settings
from privbandit.launcher import SERVICES, Cluster, LaunchError, healthy


def add_up_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "up",
        help="run analyzer, shuffler and device locally until Ctrl-C",
        description=(
            "Start the analyzer, the shuffler and the device as separate processes on loopback, "
            "at the addresses of the config file, with embedded storage (SQLite) under the data "
            "directory, and keep them running until Ctrl-C."
        ),
    )
    p.add_argument("--config", type=Path,
                   help="TOML config (default: $PRIVBANDIT_CONFIG or the packaged defaults)")
    p.add_argument("--data-dir", type=Path,
                   help="where the services keep their state (default: the config's data_dir)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds to wait for each service's /healthz (default 60)")
    p.set_defaults(func=run_up)


def add_demo_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="drive simulated users through the services; print regret, privacy, counts",
        description=(
            "Drive N simulated users of a seeded linear environment through the device API "
            "(decide -> reward -> feedback), C at a time. Uses the services at the config's "
            "addresses if they answer, else starts them on free loopback ports with a fresh "
            "temporary data directory (so the demo starts from model version 0) and stops them "
            "afterwards. Prints regret, the privacy ledger and the reconciliation of the counts "
            "of all three services; exits 1 if the counts do not reconcile."
        ),
    )
    p.add_argument("--threat-model", required=True, choices=THREAT_MODELS)
    p.add_argument("--users", type=int, default=DEFAULT_USERS,
                   help=f"simulated users (default {DEFAULT_USERS})")
    p.add_argument("--concurrency", type=int, default=8,
                   help="users in flight at once (default 8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulated environment")
    p.add_argument("--config", type=Path,
                   help="TOML config (default: $PRIVBANDIT_CONFIG or the packaged defaults)")
    p.add_argument("--data-dir", type=Path,
                   help="data directory for services the demo starts (default: a fresh "
                        "temporary one, removed afterwards)")
    p.add_argument("--aggregation", choices=["reports", "secure-sum"],
                   help="the shuffle transport: pick a task configured with it, or else run "
                        "the config's first shuffle task with it on freshly started services "
                        "(a temporary config, as --paper does); default: the task's own")
    p.add_argument("--paper", action="store_true",
                   help="run the task with the paper's widths (confidence_scale = 1, "
                        "regularizer = paper) on freshly started services")
    p.add_argument("--fresh", action="store_true",
                   help="always start fresh services, even if some are running")
    p.add_argument("--json", dest="json_out", type=Path, help="write the result (JSON) here")
    p.add_argument("--plot", type=Path, help="write a regret plot (PNG) here")
    p.add_argument("--no-progress", action="store_true", help="no live progress bar")
    p.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from privbandit.demo import main_demo

    return main_demo(
        threat_model=args.threat_model,
        users=args.users,
        concurrency=args.concurrency,
        seed=args.seed,
        config=args.config,
        data_dir=args.data_dir,
        aggregation=args.aggregation,
        paper=args.paper,
        fresh=args.fresh,
        json_out=args.json_out,
        plot=args.plot,
        progress=not args.no_progress,
    )


def run_up(args: argparse.Namespace) -> int:
    """Start the three services at the configured loopback addresses; stop them on Ctrl-C."""
    cfg = config_path(args.config)
    try:
        settings = load_settings(cfg)
    except (DemoError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    data_dir = args.data_dir if args.data_dir is not None else Path(settings.data_dir)
    ports = {name: getattr(settings, name).port for name in SERVICES}
    busy = [n for n in SERVICES if healthy(getattr(settings, n).url, timeout=0.5)]
    if busy:
        print(f"error: {', '.join(busy)} already answer(s) at the configured address; "
              "stop them first (or change the ports in the config)", file=sys.stderr)
        return 1
    cluster = Cluster(data_dir.resolve(), ports, config=cfg.resolve())

    def on_signal(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # Explicit handlers: a shell starts background jobs with SIGINT ignored, and SIGTERM (e.g.
    # from a process manager) must stop the services too, not orphan them.
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(f"starting services (config {cfg}, data in {data_dir.resolve()}) ...", flush=True)
    try:
        cluster.start(timeout=args.timeout)
        print("\nprivbandit is up:", flush=True)
        for name in SERVICES:
            print(f"  {name:9s} {cluster[name].url}  (pid {cluster[name].pid})")
        tasks = ", ".join(f"{t.id} ({t.threat_model})" for t in settings.tasks)
        print(f"  tasks     {tasks}")
        print(f"  try       privbandit demo --threat-model shuffle --users 2000 --config {cfg}")
        print("Ctrl-C stops all three.", flush=True)
        while True:
            dead = [n for n in SERVICES if not cluster[n].alive()]
            if dead:
                print(f"error: {', '.join(dead)} exited; stopping the others", file=sys.stderr)
                return 1
            time.sleep(0.5)
    except LaunchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    finally:
        print("\nstopping ...", flush=True)
        cluster.stop()
        print("stopped.", flush=True)
    return 0
