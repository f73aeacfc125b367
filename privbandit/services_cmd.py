"""``privbandit up`` and ``privbandit demo`` (spec §6): the services as local processes.

Registered in ``privbandit/cli.py`` with ``add_up_parser(sub)`` and ``add_demo_parser(sub)``; each
sets ``func`` so the CLI calls ``args.func(args)``.
"""

from __future__ import annotations

import argparse
import inspect
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from privbandit.demo.config import (
    DEFAULT_THREAT_MODEL,
    DEFAULT_USERS,
    THREAT_MODELS,
    DemoError,
    config_path,
    load_settings,
)
from privbandit.launcher import (
    SERVICES,
    TOKEN_FILE,
    Cluster,
    LaunchError,
    healthy,
)
from privbandit.shared.settings import Settings
from privbandit.web_page import (
    PageError,
    PageServer,
    browser_tasks,
    build_page,
    page_config,
    with_origin,
)


def _command(
    sub: argparse._SubParsersAction, name: str, func: Callable[[argparse.Namespace], int],
    summary: str, description: str, data_dir_help: str,
) -> argparse.ArgumentParser:
    """A subcommand running ``func(args)``, with the options every services command has: the
    config file and the data directory."""
    p = sub.add_parser(name, help=summary, description=description)
    p.add_argument("--config", type=Path,
                   help="TOML config (default: $PRIVBANDIT_CONFIG or the packaged defaults)")
    p.add_argument("--data-dir", type=Path, help=data_dir_help)
    p.set_defaults(func=func)
    return p


def add_up_parser(sub: argparse._SubParsersAction) -> None:
    p = _command(
        sub, "up", run_up, "run analyzer, shuffler and device locally until Ctrl-C",
        "Start the analyzer, the shuffler and the device as separate processes on loopback, at "
        "the addresses of the config file, with embedded storage (SQLite) under the data "
        "directory, and keep them running until Ctrl-C.",
        "where the services keep their state (default: the config's data_dir)",
    )
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds to wait for each service's /healthz (default 60)")
    p.add_argument("--store", metavar="URL",
                   help="where the analyzer and the shuffler keep their state: 'sqlite' (files "
                        "in the data directory) or a postgresql:// URL (default: the config's)")
    p.add_argument("--shufflers", type=int, default=1, metavar="N",
                   help="shuffler replicas on consecutive ports from the shuffler's, sharing "
                        "the PostgreSQL --store; the device spreads uploads across them")
    p.add_argument("--init", action="store_true",
                   help="create new state files (databases, keys) in place of missing or empty "
                        "ones; without it a service whose data directory was initialised before "
                        "refuses to start when one is lost")
    p.add_argument("--forget-persons", action="store_true",
                   help="with --init: also replace a lost device database that held per-person "
                        "contribution counts (each person can then contribute k more reports "
                        "in the current period)")
    p.add_argument("--web", action="store_true",
                   help="also serve the browser client's demo page (clients/web, built with "
                        "Node.js) and let it call the services (CORS for its origin)")
    p.add_argument("--web-port", type=int, default=8700, metavar="PORT",
                   help="the demo page's port on 127.0.0.1 (default 8700)")


def add_demo_parser(sub: argparse._SubParsersAction) -> None:
    """The demo's options; their destinations are the parameters of ``main_demo``."""
    p = _command(
        sub, "demo", run_demo,
        "drive simulated users through the services; print regret, privacy, counts",
        "Drive N simulated users of a seeded linear environment through the device API "
        "(decide -> reward -> feedback), C at a time. Uses the services at the config's "
        "addresses if they answer, else starts them on free loopback ports with a fresh "
        "temporary data directory (so the demo starts from model version 0) and stops them "
        "afterwards. Prints regret, the privacy ledger and the reconciliation of the counts "
        "of all three services; exits 1 if the counts do not reconcile.",
        "data directory for services the demo starts (default: a fresh temporary one, "
        "removed afterwards)",
    )
    p.add_argument("--threat-model", choices=THREAT_MODELS, default=DEFAULT_THREAT_MODEL,
                   help=f"which task of the config to drive (default {DEFAULT_THREAT_MODEL})")
    p.add_argument("--task", metavar="ID",
                   help="drive this task of the config (any threat model, e.g. a multi-armed "
                        "task such as demo-heldp) instead of the first --threat-model task")
    p.add_argument("--users", type=int, default=DEFAULT_USERS,
                   help=f"simulated users (default {DEFAULT_USERS})")
    p.add_argument("--concurrency", type=int, default=8,
                   help="users in flight at once (default 8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulated environment")
    p.add_argument("--aggregation", choices=["reports", "secure-sum"],
                   help="the shuffle transport: pick a task configured with it, or else run "
                        "the config's first shuffle task with it on freshly started services "
                        "(a temporary config, as --paper does); default: the task's own")
    p.add_argument("--paper", action="store_true",
                   help="run the task with the paper's widths (confidence_scale = 1, "
                        "regularizer = paper) and settings (the policy's practical ones back "
                        "to the paper's, e.g. adar-oful's episodes) on freshly started services")
    p.add_argument("--fresh", action="store_true",
                   help="always start fresh services, even if some are running")
    p.add_argument("--returning", type=int, metavar="P",
                   help="returning users: the --users visits come from P persons (visit i is "
                        "person i mod P's), each feedback carrying its person's user key")
    p.add_argument("--contributions", type=int, metavar="K",
                   help="bound each person of the task to K reports (the device withholds the "
                        "rest; the ledger states the per-person guarantee); runs the task on "
                        "freshly started services")
    p.add_argument("--json", dest="json_out", type=Path, help="write the result (JSON) here")
    p.add_argument("--plot", type=Path, help="write a regret plot (PNG) here")
    p.add_argument("--logs", type=Path, metavar="DIR",
                   help="services the demo starts write their logs (one file each) to DIR and "
                        "leave them there; without it they go to the data directory's logs/, "
                        "removed with a fresh one after a successful run")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no live progress bar")


def run_demo(args: argparse.Namespace) -> int:
    from privbandit.demo.run import main_demo

    parameters = inspect.signature(main_demo).parameters
    return main_demo(**{name: getattr(args, name) for name in parameters})


def _page_server(settings: Settings, port: int) -> PageServer:
    """The demo page, built and bound (not yet serving), offering the browser's tasks."""
    tasks = browser_tasks(settings.tasks)
    if not tasks:
        raise PageError("no task the browser client serves (sblb, sblb-fixed, ddp-linucb or "
                        "ldp-linucb over reports or Prio3) in the configuration")
    config = page_config(settings.analyzer.url, settings.shuffler.all_urls[0], tasks)
    return PageServer(build_page(), config, port=port)


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
    page = None
    extra_env: dict[str, str] = {}
    if args.web:
        try:
            page = _page_server(settings, args.web_port)
        except (PageError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        extra_env["PRIVBANDIT_BROWSER_ORIGINS"] = with_origin(settings, page.origin)
    try:
        cluster = Cluster(data_dir.resolve(), ports, config=cfg.resolve(), store=args.store,
                          shufflers=args.shufflers, extra_env=extra_env)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def on_signal(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # Explicit handlers: a shell starts background jobs with SIGINT ignored, and SIGTERM (e.g.
    # from a process manager) must stop the services too, not orphan them.
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(f"starting services (config {cfg}, data in {data_dir.resolve()}) ...", flush=True)
    try:
        cluster.start(timeout=args.timeout, init=args.init, forget_persons=args.forget_persons)
        print("\nprivbandit is up:", flush=True)
        for name, svc in cluster.services.items():
            print(f"  {name:10s} {svc.url}  (pid {svc.pid})")
        if page is not None:
            page.start()
            print(f"  web page   {page.origin}/  (the device role in your browser)")
        tasks = ", ".join(f"{t.id} ({t.threat_model})" for t in settings.tasks)
        print(f"  tasks     {tasks}")
        if settings.shuffler_token is None:
            print(f"  token     {data_dir.resolve() / TOKEN_FILE} (the shuffler's, generated)")
        print(f"  try       privbandit demo --threat-model shuffle --users 2000 --config {cfg}")
        print("Ctrl-C stops all three." if len(cluster.services) == 3 else
              f"Ctrl-C stops all {len(cluster.services)}.", flush=True)
        while True:
            dead = [n for n, svc in cluster.services.items() if not svc.alive()]
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
        if page is not None:
            page.stop()
        cluster.stop()
        print("stopped.", flush=True)
    return 0
