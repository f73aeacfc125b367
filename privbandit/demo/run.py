"""``privbandit demo`` itself: drive a run through given services (``run_demo_against``), or find
or start the services, run, print and write the result (``main_demo``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from privbandit.demo.config import DEFAULT_USERS, DemoError, DemoOptions, demo_task, derived_config
from privbandit.demo.driver import Driver, demo_env_name, fetch_task
from privbandit.demo.reconcile import reconcile, snapshot, wait_quiescent
from privbandit.demo.report import ProgressBar, make_console, print_result, simulator_reference
from privbandit.launcher import (
    SERVICES,
    Cluster,
    LaunchError,
    free_ports,
    healthy,
    tls_context,
)
from privbandit.shared.core.accounting.ledger import Aggregation
from privbandit.shared.settings import Settings


async def run_demo_against(
    urls: dict[str, str], task_id: str, opts: DemoOptions, console: Any | None = None,
    driver_hook: Callable[[Driver], Any] | None = None, compare: bool = True,
) -> dict[str, Any]:
    """Drive ``opts.users`` users through running services and return the demo's result.

    ``driver_hook(driver)`` may return an awaitable run alongside the users (tests use it to
    crash services mid-run). ``compare``: run the simulator on the same users for reference —
    only meaningful for services started afresh for this run (their models start at version 0).
    """
    task = await fetch_task(urls["analyzer"], task_id)
    async with httpx.AsyncClient(timeout=10.0, verify=tls_context()) as client:
        before = await snapshot(urls, task.id, client)
    progress = ProgressBar(opts, task, console) if opts.progress else None
    driver = Driver(urls["device"], task, opts.users, opts.concurrency, opts.seed,
                    on_progress=progress.update if progress else None, persons=opts.persons)
    extra = driver_hook(driver) if driver_hook is not None else None
    with progress if progress is not None else contextlib.nullcontext():
        if extra is not None:
            result, _ = await asyncio.gather(driver.run(), extra)
        else:
            result = await driver.run()
    if console is not None:
        console.print(f"[dim]waiting for the outbox to drain and the last batches to be "
                      f"acknowledged (l = {task.batch_size})...[/dim]")
    after = await wait_quiescent(urls, task.id, task.max_batch, opts.settle_timeout)
    rec = reconcile(result.feedbacks_sent, before, after)
    # The in-process reference replays every user's report: not a run whose persons return
    # and are bounded (their later feedbacks make no report), so none is given for those.
    returning = opts.persons is not None or task.contributions is not None
    reference = None
    if compare and not returning:
        if console is not None:
            console.print(f"[dim]the simulator on the same users for reference (20 in-process "
                          f"runs of {opts.users} users)...[/dim]")
        reference = simulator_reference(task, opts, result.final_regret)
    return {
        "threat_model": task.threat_model,
        "task": task.id,
        "algo": task.algo,
        "env": demo_env_name(task),
        "users": opts.users,
        "persons": opts.persons,
        "contributions": task.contributions,
        "concurrency": opts.concurrency,
        "seed": opts.seed,
        "aggregation": task.aggregation,
        "secure_sum": task.secure_sum,
        "params": {**task.policy, "d": task.d, "K": task.K, "batch_size": task.batch_size,
                   "aggregation": task.aggregation},
        "final_regret": result.final_regret,
        "random_regret": result.random_regret,
        "regret_curve": result.regret_curve,
        "privacy": after.privacy,
        "per_person": after.per_person,
        "users_per_second": result.users_per_second,
        "wall_seconds": result.wall_seconds,
        "reconciliation": rec,
        "simulator_reference": reference,
        **({} if compare else {"simulator_reference_note": NOT_COMPARED}),
        "model_version": after.model_version,
        "next_batch_size": after.next_batch,
        "request_retries": result.errors,
        "services": urls,
    }


# Why a run through services the demo did not start is not compared with the simulator.
NOT_COMPARED = ("not compared: these services were not started by this demo, so their models may "
                "already have learned from earlier users (--fresh starts services of its own)")


def running_services(settings: Settings) -> dict[str, str] | None:
    """The configured service URLs if all three answer /healthz, else None."""
    urls = {name: getattr(settings, name).url for name in SERVICES}
    return urls if all(healthy(u) for u in urls.values()) else None


def main_demo(
    threat_model: str,
    users: int = DEFAULT_USERS,
    concurrency: int = 1,
    seed: int = 0,
    config: Path | None = None,
    data_dir: Path | None = None,
    aggregation: Aggregation | None = None,
    paper: bool = False,
    fresh: bool = False,
    json_out: Path | None = None,
    plot: Path | None = None,
    progress: bool = True,
    task: str | None = None,
    returning: int | None = None,
    contributions: int | None = None,
    logs: Path | None = None,
) -> int:
    """The ``privbandit demo`` command; returns the exit status. ``logs``: where the services
    it starts write their logs, kept after the run (default: the data directory's logs/)."""
    console = make_console()
    err = make_console(stderr=True)
    if users < 1 or concurrency < 1:
        err.print("[red]error:[/red] --users and --concurrency must be >= 1")
        return 2
    if (returning is not None and returning < 1) or (contributions is not None
                                                     and contributions < 1):
        err.print("[red]error:[/red] --returning and --contributions must be >= 1")
        return 2
    try:
        base, settings, task_id, override = demo_task(config, threat_model, aggregation, task)
    except (DemoError, ValueError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        return 2
    opts = DemoOptions(threat_model, users, concurrency, seed, aggregation, progress=progress,
                       persons=returning)
    # A bound on each person changes the task: services of their own, as --aggregation does.
    changed = override or contributions is not None

    # Running services cannot change a task's transport or widths: those runs start their own.
    urls = None if (paper or fresh or changed) else running_services(settings)
    cluster: Cluster | None = None
    tmp: Path | None = None  # fresh data dir and/or the --paper config; removed after success
    ok = False
    try:
        if urls is not None:
            console.print(f"using the running services: device {urls['device']}, shuffler "
                          f"{urls['shuffler']}, analyzer {urls['analyzer']}")
            err.print("[yellow]warning:[/yellow] these services were not started by this demo: "
                      "their models may already have learned from earlier users, so this run "
                      "is not compared with the simulator (--fresh starts services of its own)")
        else:
            tmp = Path(tempfile.mkdtemp(prefix="privbandit-demo-"))
            if data_dir is None:
                data = tmp / "data"
                console.print(f"starting analyzer, shuffler and device with a fresh data "
                              f"directory {data} (so the models start from version 0)")
            else:
                data = Path(data_dir)
                console.print(f"starting analyzer, shuffler and device with data directory "
                              f"{data}")
            cfg_file = base
            # Services of its own serve only the task driven (no other task's state or keys to
            # set up); a data directory of the user's keeps the whole config it may hold.
            only = data_dir is None
            if paper or changed or only:
                cfg_file = derived_config(
                    base, task_id, tmp / "demo.toml", paper=paper,
                    aggregation=aggregation if override else None,
                    contributions=contributions, only=only)
            if paper:
                console.print(f"--paper: task {task_id} with confidence_scale = 1 and the "
                              f"paper's regularizer ({cfg_file})")
            if contributions is not None:
                console.print(f"--contributions {contributions}: task {task_id} bounds each "
                              f"person to {contributions} reports ({cfg_file})")
            if override:
                configured = settings.task(task_id).aggregation  # type: ignore[union-attr]  # demo_task's
                console.print(f"--aggregation {aggregation}: task {task_id} runs with "
                              f"{aggregation} aggregation instead of its configured "
                              f"{configured} ({cfg_file})")
            ports = dict(zip(SERVICES, free_ports(3), strict=True))
            log_dir = logs if logs is not None else data / "logs"
            log_dir.mkdir(parents=True, exist_ok=True)
            cluster = Cluster(data, ports, config=cfg_file, log_dir=log_dir)
            cluster.start()
            urls = cluster.urls
            console.print("  " + ", ".join(f"{n} {u}" for n, u in urls.items())
                          + f"  (logs in {log_dir})")
        out = asyncio.run(run_demo_against(urls, task_id, opts, console,
                                           compare=cluster is not None))
        ok = out["reconciliation"]["consistent"]
    except (DemoError, LaunchError, httpx.HTTPError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        return 1
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    finally:
        if cluster is not None:
            cluster.stop()
        if tmp is not None:
            if ok:
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                err.print(f"kept {tmp} (data and service logs) for inspection")
    out["paper"] = paper
    out["aggregation_overridden"] = override
    print_result(out, console)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(out, indent=2, allow_nan=False) + "\n")
        console.print(f"wrote {json_out}")
    if plot is not None:
        from privbandit.plots import regret_plot

        curve = out["regret_curve"]
        regret_plot(
            {"algo": out["algo"], "env": out["env"], "regret_curve": curve,
             "random_regret_mean": out["random_regret"], "privacy": out["privacy"],
             "reference": out.get("simulator_reference")},
            plot,
            title=f"{out['algo']} via the services, {out['users']} users",
        )
        console.print(f"wrote {plot}")
    return 0 if out["reconciliation"]["consistent"] else 1
