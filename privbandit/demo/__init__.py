"""``privbandit demo``: drive simulated users through the running services and reconcile counts.

A seeded ``linear`` environment with the task's d and K plays N users. Each user asks the device
to ``decide`` (sending its K private feature vectors), gets a Bernoulli reward for the chosen arm
from the environment, and sends ``feedback``; C users are in flight at once (asyncio + httpx).
Regret is pseudo-regret Σ_t (max_a μ_{t,a} − μ_{t,a_t}), accumulated in completion order.

At the end the demo waits until the system is quiescent — the device outbox is empty, every batch
the shuffler formed is acknowledged, and fewer than l reports wait in the shuffler — and then
reconciles the counts of all three services:

    reports_accepted (shuffler) == feedbacks_sent (driver)
    reports_counted (analyzer) + reports_pending (shuffler) == reports_accepted

When the services were already running, every count is the change during this run.

``--aggregation`` picks the shuffle transport. If no shuffle task of the config uses the requested
one, the first shuffle task runs with it on freshly started services (a temporary copy of the
config, as ``--paper`` writes). With ``secure-sum`` the analyzer decrypts only batch sums and
counts l reports per sum, so the reconciliation is the same identity, and the ledger printed is
the sum-only one (what an observer of the released sums could learn).

Randomness: the environment (contexts, true means and reward draws) uses seeded numpy generators;
the device's own randomness is its business (CSPRNG-seeded, not reproducible by design).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from privbandit.launcher import SERVICES, Cluster, LaunchError, free_ports, healthy
from privbandit.summary import ledger_lines
from shared.core.environments import make_environment
from shared.core.policies import make_config
from shared.core.simulator import same_users_regret, user_streams
from shared.protocol.messages import TaskInfo
from shared.settings import DEFAULT_CONFIG, Settings, TaskConfig

THREAT_MODELS = ("ldp", "shuffle", "central")
# Users per default run: enough to watch the model learn, small enough for a minute or two.
DEFAULT_USERS = 10000
CURVE_POINTS = 200
CONTEXT_CHUNK = 256
# Transport retries per request (the device itself never needs the network to answer).
REQUEST_RETRIES = 8


class DemoError(RuntimeError):
    """The demo could not run (no matching task, services unreachable, ...)."""


# ---------------------------------------------------------------------------------------------
# Configuration


def config_path(path: Path | None) -> Path:
    """The config file to use: the given one, else $PRIVBANDIT_CONFIG, else the default."""
    if path is not None:
        return Path(path)
    return Path(os.environ.get("PRIVBANDIT_CONFIG", DEFAULT_CONFIG))


@contextlib.contextmanager
def _config_env(path: Path) -> Iterator[None]:
    old = os.environ.get("PRIVBANDIT_CONFIG")
    os.environ["PRIVBANDIT_CONFIG"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PRIVBANDIT_CONFIG", None)
        else:
            os.environ["PRIVBANDIT_CONFIG"] = old


def load_settings(path: Path, **overrides: Any) -> Settings:
    """Settings as the services would read them from ``path`` (plus the environment)."""
    if not path.exists():
        raise DemoError(f"config file {path} does not exist")
    with _config_env(path):
        return Settings(**overrides)


def pick_task(settings: Settings, threat_model: str, aggregation: str | None) -> str:
    """The id of the first task with this threat model (and aggregation, if given)."""
    for task in settings.tasks:
        if task.threat_model == threat_model and (
            aggregation is None or task.aggregation == aggregation
        ):
            return task.id
    have = ", ".join(f"{t.id} ({t.threat_model}, {t.aggregation})" for t in settings.tasks)
    want = threat_model + (f" with {aggregation} aggregation" if aggregation else "")
    raise DemoError(f"the config has no {want} task; it has: {have or 'no tasks'}")


def choose_task(
    settings: Settings, threat_model: str, aggregation: str | None
) -> tuple[str, bool]:
    """(task id, whether its aggregation must be overridden to ``aggregation``).

    A task configured with the requested aggregation is preferred. Otherwise, for the shuffle
    model (the only one with two transports), the first shuffle task whose policy supports the
    requested transport is run with its aggregation overridden."""
    try:
        return pick_task(settings, threat_model, aggregation), False
    except DemoError:
        if aggregation is None or threat_model != "shuffle":
            raise
    errors = []
    for task in settings.tasks:
        if task.threat_model != threat_model:
            continue
        try:
            TaskConfig.model_validate({**task.model_dump(), "aggregation": aggregation})
        except ValueError as exc:
            errors.append(f"{task.id}: {exc}")
            continue
        return task.id, True
    raise DemoError(f"no shuffle task of the config can run with {aggregation} aggregation"
                    + (f" ({'; '.join(errors)})" if errors else ""))


def dump_toml(data: dict[str, Any]) -> str:
    """Serialise the nested dicts/lists ``tomllib`` produces for a config file back to TOML."""

    def scalar(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            if math.isnan(v):
                return "nan"
            if math.isinf(v):
                return "inf" if v > 0 else "-inf"
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)  # JSON string escapes are valid TOML basic-string escapes
        if isinstance(v, list):
            return "[" + ", ".join(scalar(x) for x in v) + "]"
        raise TypeError(f"cannot write {type(v).__name__} to TOML")

    def is_table_array(v: Any) -> bool:
        return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)

    lines: list[str] = []

    def table(prefix: str, d: dict[str, Any]) -> None:
        for k, v in d.items():
            if not isinstance(v, dict) and not is_table_array(v):
                lines.append(f"{k} = {scalar(v)}")
        for k, v in d.items():
            name = f"{prefix}.{k}" if prefix else k
            if isinstance(v, dict):
                lines.extend(["", f"[{name}]"])
                table(name, v)
            elif is_table_array(v):
                for item in v:
                    lines.extend(["", f"[[{name}]]"])
                    table(name, item)

    table("", data)
    return "\n".join(lines).lstrip("\n") + "\n"


def derived_config(
    base: Path, task_id: str, out: Path, *, paper: bool = False, aggregation: str | None = None
) -> Path:
    """A copy of ``base`` where ``task_id`` is changed for this demo run:

    - ``paper``: the paper's widths, confidence_scale = 1 and regularizer = "paper" (where the
      policy has a regularizer);
    - ``aggregation``: the task's shuffle transport (``reports`` or ``secure-sum``).
    """
    from shared.core.policies.config import CONFIGS

    data = tomllib.loads(base.read_text())
    for task in data.get("tasks", []):
        if task.get("id") == task_id:
            policy = task.setdefault("policy", {})
            if paper:
                policy["confidence_scale"] = 1.0
                if "regularizer" in CONFIGS[policy["algo"]].model_fields:
                    policy["regularizer"] = "paper"
            if aggregation is not None:
                task["aggregation"] = aggregation
    out.write_text(dump_toml(data))
    return out


def paper_config(base: Path, task_id: str, out: Path) -> Path:
    """``derived_config`` with the paper's widths only."""
    return derived_config(base, task_id, out, paper=True)


# ---------------------------------------------------------------------------------------------
# The driver


@dataclass
class DriveResult:
    users: int
    concurrency: int
    feedbacks_sent: int
    final_regret: float
    random_regret: float
    regret_curve: list[list[float]]
    wall_seconds: float
    model_version: int
    errors: int

    @property
    def users_per_second(self) -> float:
        return self.users / self.wall_seconds if self.wall_seconds > 0 else 0.0


@dataclass
class Driver:
    """N simulated users, C at a time, against one device task over HTTP."""

    device_url: str
    task: TaskInfo
    users: int
    concurrency: int = 1
    seed: int = 0
    on_progress: Callable[[Driver], None] | None = None
    transport: httpx.AsyncBaseTransport | None = None
    # Stop starting new users after this many seconds (load tests); None = run all users.
    time_limit: float | None = None
    # live state (read by progress displays and tests)
    done: int = 0
    regret: float = 0.0
    random_regret: float = 0.0
    feedbacks_sent: int = 0
    model_version: int = 0
    errors: int = 0
    curve: list[list[float]] = field(default_factory=list)
    # Seconds per successful request, by endpoint ("decide", "feedback").
    latencies: dict[str, list[float]] = field(
        default_factory=lambda: {"decide": [], "feedback": []}
    )

    def __post_init__(self) -> None:
        if self.users < 1 or self.concurrency < 1:
            raise ValueError("users and concurrency must be >= 1")
        env_rng, self._reward_rng = user_streams(self.seed)
        self.env = make_environment("linear", self.task.d, self.task.K, env_rng)
        # Features are drawn with ||x|| <= 1; a task with a smaller bound L gets them scaled.
        self._scale = min(1.0, float(self.task.policy.get("L", 1.0)))
        self._next = 0
        self._buffer: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._buffer_start = 0
        self._every = max(1, self.users // CURVE_POINTS)

    def _user(self, i: int) -> tuple[np.ndarray, np.ndarray, float]:
        """User i's contexts, true means and reward draw (drawn in user order, so a run's users
        do not depend on the concurrency)."""
        if self._buffer is None or i >= self._buffer_start + self._buffer[0].shape[0]:
            X, mu = self.env.contexts(CONTEXT_CHUNK)
            u = self._reward_rng.random(CONTEXT_CHUNK)
            self._buffer_start = i
            self._buffer = (X * self._scale, mu, u)
        j = i - self._buffer_start
        X, mu, u = self._buffer
        return X[j], mu[j], float(u[j])

    async def run(self) -> DriveResult:
        limits = httpx.Limits(max_connections=self.concurrency + 2,
                              max_keepalive_connections=self.concurrency + 2)
        started = time.perf_counter()
        self._stop_at = None if self.time_limit is None else started + self.time_limit
        async with httpx.AsyncClient(base_url=self.device_url, limits=limits, timeout=30.0,
                                     transport=self.transport) as client:
            await asyncio.gather(*(self._worker(client) for _ in range(self.concurrency)))
        wall = time.perf_counter() - started
        if not self.curve or self.curve[-1][0] != self.done:
            self.curve.append([self.done, self.regret])
        return DriveResult(
            users=self.done,
            concurrency=self.concurrency,
            feedbacks_sent=self.feedbacks_sent,
            final_regret=self.regret,
            random_regret=self.random_regret,
            regret_curve=self.curve,
            wall_seconds=wall,
            model_version=self.model_version,
            errors=self.errors,
        )

    async def _worker(self, client: httpx.AsyncClient) -> None:
        task = self.task.id
        while self._next < self.users:
            if self._stop_at is not None and time.perf_counter() > self._stop_at:
                return
            i = self._next
            self._next += 1
            X, mu, u = self._user(i)
            t0 = time.perf_counter()
            resp = await self._post(client, f"/v1/tasks/{task}/decide",
                                    {"features": X.tolist()})
            t1 = time.perf_counter()
            if resp.status_code != 200:
                raise DemoError(f"decide failed: {resp.status_code} {resp.text[:300]}")
            out = resp.json()
            a = int(out["action"])
            self.model_version = max(self.model_version, int(out["model_version"]))
            best = float(mu.max())
            self.regret += best - float(mu[a])
            self.random_regret += best - float(mu.mean())
            reward = 1.0 if u < mu[a] else 0.0
            body = {"decision_id": out["decision_id"], "reward": reward}
            resp = await self._post(client, f"/v1/tasks/{task}/feedback", body, retry_409=True)
            if resp.status_code != 202:
                raise DemoError(f"feedback failed: {resp.status_code} {resp.text[:300]}")
            self.latencies["decide"].append(t1 - t0)
            self.latencies["feedback"].append(time.perf_counter() - t1)
            self.feedbacks_sent += 1
            self.done += 1
            if self.done % self._every == 0:
                self.curve.append([self.done, self.regret])
            if self.on_progress is not None:
                self.on_progress(self)

    async def _post(self, client: httpx.AsyncClient, path: str, body: dict[str, Any],
                    retry_409: bool = False) -> httpx.Response:
        """POST with retries on transport errors and 5xx. A 409 on a *retried* feedback means
        the first attempt was recorded (only its answer was lost): report it as the 202."""
        delay = 0.05
        for attempt in range(REQUEST_RETRIES):
            try:
                resp = await client.post(path, json=body)
            except httpx.TransportError:
                self.errors += 1
            else:
                if retry_409 and attempt > 0 and resp.status_code == 409:
                    return httpx.Response(202, json={"queued": True, "outbox_pending": 0})
                if resp.status_code < 500:
                    return resp
                self.errors += 1
            await asyncio.sleep(delay)
            delay = min(2 * delay, 2.0)
        raise DemoError(f"POST {path}: the device did not answer after {REQUEST_RETRIES} tries")


# ---------------------------------------------------------------------------------------------
# Counts and reconciliation


@dataclass
class Snapshot:
    """The counters the reconciliation compares, at one moment."""

    accepted: int
    pending: int
    batches_formed: int
    batches_acknowledged: int
    batches_in_flight: int
    counted: int
    batches: int
    model_version: int
    outbox_pending: int
    device_feedbacks: int
    privacy: dict[str, Any]

    def quiescent(self, batch_size: int) -> bool:
        """Nothing in flight: outbox empty, every formed batch acknowledged, < l pending."""
        return (
            self.outbox_pending == 0
            and self.pending < batch_size
            and self.batches_formed == self.batches_acknowledged
            and self.batches_in_flight == 0
        )


async def snapshot(urls: dict[str, str], task: str, client: httpx.AsyncClient) -> Snapshot:
    dev, shf, prv = await asyncio.gather(
        client.get(f"{urls['device']}/v1/status"),
        client.get(f"{urls['shuffler']}/v1/status"),
        client.get(f"{urls['analyzer']}/v1/tasks/{task}/privacy"),
    )
    for name, resp in (("device", dev), ("shuffler", shf), ("analyzer", prv)):
        if resp.status_code != 200:
            raise DemoError(f"{name} status: {resp.status_code} {resp.text[:300]}")
    queue = next((q for q in shf.json()["tasks"] if q["task"] == task), None)
    if queue is None:
        raise DemoError(f"the shuffler does not know task {task}")
    p = prv.json()
    d = dev.json()
    return Snapshot(
        accepted=int(queue["accepted"]),
        pending=int(queue["pending"]),
        batches_formed=int(queue["batches_formed"]),
        batches_acknowledged=int(queue["batches_acknowledged"]),
        batches_in_flight=int(queue["batches_in_flight"]),
        counted=int(p["reports_counted"]),
        batches=int(p["batches"]),
        model_version=int(p["model_version"]),
        outbox_pending=int(d["outbox_pending"]),
        device_feedbacks=int(d["feedbacks"]),
        privacy=p["ledger"],
    )


async def wait_quiescent(
    urls: dict[str, str], task: str, batch_size: int, timeout: float = 120.0,
    on_wait: Callable[[Snapshot], None] | None = None,
) -> Snapshot:
    """Poll until two consecutive snapshots are quiescent and equal in their counts."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    prev: Snapshot | None = None
    async with httpx.AsyncClient(timeout=10.0) as client:
        while True:
            try:
                snap = await snapshot(urls, task, client)
            except httpx.TransportError:
                snap = None  # a service restarting: keep waiting
            if snap is not None:
                if on_wait is not None:
                    on_wait(snap)
                if snap.quiescent(batch_size) and prev is not None and _same(prev, snap):
                    return snap
                prev = snap if snap.quiescent(batch_size) else None
            if loop.time() > deadline:
                raise DemoError(
                    f"the services did not settle within {timeout:.0f}s (last: {snap})"
                )
            await asyncio.sleep(0.25)


def _same(a: Snapshot, b: Snapshot) -> bool:
    return (a.accepted, a.pending, a.counted, a.batches) == (b.accepted, b.pending, b.counted,
                                                              b.batches)


def reconcile(sent: int, before: Snapshot, after: Snapshot) -> dict[str, Any]:
    """The spec §6 reconciliation for this run, and whether it holds.

    Accepted, counted, batches and model versions are changes during the run; pending is what
    waits in the shuffler at the end. With services that were already running, reports left
    pending by earlier runs (``reports_pending_before``) may fill this run's batches, so the
    identity is  counted + pending == accepted + pending_before  (pending_before = 0 for fresh
    services, which is the spec's  counted + pending == accepted).
    """
    rec = {
        "feedbacks_sent": sent,
        "reports_accepted": after.accepted - before.accepted,
        "reports_counted": after.counted - before.counted,
        "reports_pending": after.pending,
        "reports_pending_before": before.pending,
        "batches": after.batches - before.batches,
        "model_versions": after.model_version - before.model_version,
    }
    problems = []
    if rec["reports_accepted"] != sent:
        problems.append(
            f"reports_accepted ({rec['reports_accepted']}) != feedbacks_sent ({sent})"
        )
    if rec["reports_counted"] + rec["reports_pending"] != (
        rec["reports_accepted"] + rec["reports_pending_before"]
    ):
        problems.append(
            f"reports_counted ({rec['reports_counted']}) + reports_pending "
            f"({rec['reports_pending']}) != reports_accepted ({rec['reports_accepted']})"
            + (f" + reports_pending_before ({before.pending})" if before.pending else "")
        )
    rec["consistent"] = not problems
    rec["problems"] = problems
    return rec


# ---------------------------------------------------------------------------------------------
# Putting it together


@dataclass
class DemoOptions:
    threat_model: str
    users: int = DEFAULT_USERS
    concurrency: int = 1
    seed: int = 0
    aggregation: str | None = None
    settle_timeout: float = 120.0
    progress: bool = True


async def fetch_task(analyzer_url: str, task_id: str) -> TaskInfo:
    async with httpx.AsyncClient(timeout=10.0) as client:
        resp = await client.get(f"{analyzer_url}/v1/tasks/{task_id}")
    if resp.status_code != 200:
        raise DemoError(f"the analyzer does not serve task {task_id}: {resp.status_code} "
                        f"{resp.text[:200]}")
    return TaskInfo.model_validate_json(resp.content)


async def run_demo_against(
    urls: dict[str, str], task_id: str, opts: DemoOptions, console: Any | None = None,
    driver_hook: Callable[[Driver], Any] | None = None,
) -> dict[str, Any]:
    """Drive ``opts.users`` users through running services and return the spec §6 result.

    ``driver_hook(driver)`` may return an awaitable run alongside the users (tests use it to
    crash services mid-run).
    """
    task = await fetch_task(urls["analyzer"], task_id)
    async with httpx.AsyncClient(timeout=10.0) as client:
        before = await snapshot(urls, task.id, client)
    progress = _Progress(opts, task, console) if opts.progress else None
    driver = Driver(urls["device"], task, opts.users, opts.concurrency, opts.seed,
                    on_progress=progress.update if progress else None)
    extra = driver_hook(driver) if driver_hook is not None else None
    with progress if progress is not None else contextlib.nullcontext():
        if extra is not None:
            result, _ = await asyncio.gather(driver.run(), extra)
        else:
            result = await driver.run()
    if console is not None:
        console.print(f"[dim]waiting for the outbox to drain and the last batches to be "
                      f"acknowledged (l = {task.batch_size})...[/dim]")
    after = await wait_quiescent(urls, task.id, task.batch_size, opts.settle_timeout)
    rec = reconcile(result.feedbacks_sent, before, after)
    reference = simulator_reference(task, opts, result.final_regret)
    return {
        "threat_model": task.threat_model,
        "task": task.id,
        "algo": task.algo,
        "env": "linear",
        "users": opts.users,
        "concurrency": opts.concurrency,
        "seed": opts.seed,
        "aggregation": task.aggregation,
        "params": {**task.policy, "d": task.d, "K": task.K, "batch_size": task.batch_size,
                   "aggregation": task.aggregation},
        "final_regret": result.final_regret,
        "random_regret": result.random_regret,
        "regret_curve": result.regret_curve,
        "privacy": after.privacy,
        "users_per_second": result.users_per_second,
        "wall_seconds": result.wall_seconds,
        "reconciliation": rec,
        "simulator_reference": reference,
        "model_version": after.model_version,
        "request_retries": result.errors,
        "services": urls,
    }


def simulator_reference(task: TaskInfo, opts: DemoOptions, regret: float,
                        reps: int = 20) -> dict[str, Any]:
    """The in-process simulator on the very same users (θ*, contexts, reward draws), ``reps``
    times over device/analyzer randomness: where a services run of this task should land."""
    params = {k: v for k, v in task.policy.items() if k != "algo"}
    config = make_config(task.policy["algo"], **params)
    finals = same_users_regret(config, "linear", task.K, opts.users, opts.seed, reps)
    sd = float(finals.std(ddof=1))
    return {
        "runs": reps,
        "mean": float(finals.mean()),
        "sd": sd,
        "min": float(finals.min()),
        "max": float(finals.max()),
        "demo_z": (regret - float(finals.mean())) / sd if sd > 0 else 0.0,
        "what": "privbandit's in-process simulator on the same users (same θ*, contexts and "
                "reward draws), varying only device and analyzer randomness",
    }


class _Progress:
    """A live rich progress bar: users done, users/s, regret so far, model version."""

    def __init__(self, opts: DemoOptions, task: TaskInfo, console: Any | None) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.started = time.perf_counter()
        self._bar = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:>7.0f} users/s"),
            TextColumn("regret {task.fields[regret]:>9.1f}"),
            TextColumn("(random {task.fields[random]:>9.1f})"),
            TextColumn("model v{task.fields[version]}"),
            TimeElapsedColumn(), TimeRemainingColumn(),
            console=console, refresh_per_second=8,
        )
        self._task = self._bar.add_task(f"{task.id}", total=opts.users, rate=0.0, regret=0.0,
                                        random=0.0, version=0)
        self._last = 0.0

    def __enter__(self) -> _Progress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def update(self, driver: Driver) -> None:
        now = time.perf_counter()
        if now - self._last < 0.05 and driver.done < driver.users:
            return  # the bar refreshes 8×/s; no need to update it on every user
        self._last = now
        elapsed = max(now - self.started, 1e-9)
        self._bar.update(self._task, completed=driver.done, rate=driver.done / elapsed,
                         regret=driver.regret, random=driver.random_regret,
                         version=driver.model_version)


def _reference_line(ref: dict[str, Any] | None) -> list[str]:
    if not ref:
        return []
    return [
        f"  simulator         {ref['mean']:.1f} ± {ref['sd']:.1f} (mean ± sd of {ref['runs']} "
        f"in-process runs on the same users; this run is {ref['demo_z']:+.1f} sd)"
    ]


def print_result(out: dict[str, Any], console: Any) -> None:
    from rich.markup import escape

    p = out["privacy"]
    rec = out["reconciliation"]

    lines = [
        f"[bold]{out['threat_model']}[/bold] demo: task {out['task']} ({out['algo']}, "
        f"d={out['params']['d']}, K={out['params']['K']}, l={out['params']['batch_size']}), "
        f"{out['users']} users, concurrency {out['concurrency']}, seed {out['seed']}",
        f"  regret            {out['final_regret']:.1f}   (uniformly random policy: "
        f"{out['random_regret']:.1f})",
        *_reference_line(out.get("simulator_reference")),
        f"  throughput        {out['users_per_second']:.0f} users/s "
        f"({out['wall_seconds']:.1f} s)",
    ]
    aggregation = out.get("aggregation", "reports")
    secure = aggregation == "secure-sum"
    if out["threat_model"] == "shuffle":
        how = ("the shuffler forwards only the encrypted sum of each batch; the analyzer "
               "decrypts only the sums" if secure else
               "the analyzer decrypts each shuffled report")
        overridden = " (overridden for this run)" if out.get("aggregation_overridden") else ""
        lines.append(f"  aggregation       {aggregation}{overridden}: {how}")
    ledger = ""
    if out["threat_model"] == "shuffle":
        ledger = (" — sum-only ledger (observer of the released batch sums)" if secure
                  else " — whole-report ledger (observer of the shuffled reports)")
    lines += ledger_lines(p, ledger, escape)
    mark = "[green]✓[/green]" if rec["consistent"] else "[bold red]✗[/bold red]"
    lines += [
        f"  reconciliation    {mark}",
        f"    feedbacks_sent    {rec['feedbacks_sent']}  (device API, 202)",
        f"    reports_accepted  {rec['reports_accepted']}  (shuffler)",
        f"    reports_counted   {rec['reports_counted']}  (analyzer"
        + (": l per decrypted batch sum)" if secure else ")"),
        f"    reports_pending   {rec['reports_pending']}  (shuffler, waiting for a batch of "
        f"{out['params']['batch_size']})",
    ]
    if rec["reports_pending_before"]:
        lines.append(f"    (+ {rec['reports_pending_before']} reports already pending in the "
                     "shuffler before this run)")
    lines += [
        f"    batches           {rec['batches']}",
        f"    model_versions    {rec['model_versions']}",
    ]
    console.print("\n".join(lines), highlight=False)
    if not rec["consistent"]:
        console.print(
            "[bold red]RECONCILIATION FAILED: " + escape("; ".join(rec["problems"]))
            + "[/bold red]"
        )


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr)


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
    aggregation: str | None = None,
    paper: bool = False,
    fresh: bool = False,
    json_out: Path | None = None,
    plot: Path | None = None,
    progress: bool = True,
) -> int:
    """The ``privbandit demo`` command; returns the exit status."""
    console = _console()
    err = _console(stderr=True)
    if users < 1 or concurrency < 1:
        err.print("[red]error:[/red] --users and --concurrency must be >= 1")
        return 2
    base = config_path(config)
    try:
        settings = load_settings(base)
        task_id, override = choose_task(settings, threat_model, aggregation)
    except (DemoError, ValueError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        return 2
    opts = DemoOptions(threat_model, users, concurrency, seed, aggregation, progress=progress)

    # Running services cannot change a task's transport or widths: those runs start their own.
    urls = None if (paper or fresh or override) else running_services(settings)
    cluster: Cluster | None = None
    tmp: Path | None = None  # fresh data dir and/or the --paper config; removed after success
    ok = False
    try:
        if urls is not None:
            console.print(f"using the running services: device {urls['device']}, shuffler "
                          f"{urls['shuffler']}, analyzer {urls['analyzer']}")
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
            if paper or override:
                cfg_file = derived_config(base, task_id, tmp / "demo.toml", paper=paper,
                                          aggregation=aggregation if override else None)
            if paper:
                console.print(f"--paper: task {task_id} with confidence_scale = 1 and the "
                              f"paper's regularizer ({cfg_file})")
            if override:
                configured = settings.task(task_id).aggregation  # type: ignore[union-attr]
                console.print(f"--aggregation {aggregation}: task {task_id} runs with "
                              f"{aggregation} aggregation instead of its configured "
                              f"{configured} ({cfg_file})")
            ports = dict(zip(SERVICES, free_ports(3), strict=True))
            cluster = Cluster(data, ports, config=cfg_file, log_dir=data / "logs")
            cluster.start()
            urls = cluster.urls
            console.print("  " + ", ".join(f"{n} {u}" for n, u in urls.items())
                          + f"  (logs in {data / 'logs'})")
        out = asyncio.run(run_demo_against(urls, task_id, opts, console))
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
            {"algo": out["algo"], "env": "linear", "regret_curve": curve,
             "random_regret_mean": out["random_regret"], "privacy": out["privacy"]},
            plot,
            title=f"{out['algo']} via the services ({out['threat_model']}, "
                  f"{out['users']} users)",
        )
        console.print(f"wrote {plot}")
    return 0 if out["reconciliation"]["consistent"] else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main_demo(sys.argv[1] if len(sys.argv) > 1 else "central"))
