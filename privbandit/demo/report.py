"""What the demo shows: a live progress bar, the simulator's regret on the same users (where a
services run should land), and the printed summary of a run."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from privbandit.demo.bco_users import DEMO_ENV, demo_environment, is_bco_task
from privbandit.demo.config import DemoOptions
from privbandit.demo.driver import Driver, demo_env_name
from privbandit.shared.core.bco_simulator import simulate_bco
from privbandit.shared.core.environments.mab import MABEnvironment, default_means
from privbandit.shared.core.mab_simulator import simulate_mab
from privbandit.shared.core.policies import make_config
from privbandit.shared.core.policies.gope_service import seeded_arms
from privbandit.shared.core.policies.registry import entry
from privbandit.shared.core.simulator import same_users_curves, user_streams
from privbandit.shared.protocol.messages import TaskInfo
from privbandit.summary import ledger_lines, person_lines


def simulator_reference(task: TaskInfo, opts: DemoOptions, regret: float,
                        reps: int = 20) -> dict[str, Any]:
    """The in-process simulator on the very same users (θ*, contexts, reward draws), ``reps``
    times over device/analyzer randomness: where a services run of this task should land."""
    params = {k: v for k, v in task.policy.items() if k != "algo"}
    config = make_config(task.policy["algo"], **params)
    if is_bco_task(task):
        return _bco_reference(config, task, opts, regret, reps)
    if task.d is None:
        return _mab_reference(config, task, opts, regret, reps)
    arms = None
    if task.algo == "adar-gope":
        # The simulator's AdaR-GOPE (fixed play order) on the task's arms: the services' devices
        # sample from the design instead, so a phase's counts vary around the plan.
        arms = seeded_arms(task.K, int(task.d), int(task.policy["arm_seed"]))
        config = make_config("adar-gope", **{k: v for k, v in params.items()
                                            if k not in ("K", "arm_seed")})
    t, curves = same_users_curves(config, demo_env_name(task), task.K, opts.users, opts.seed,
                                  reps, arms=arms)
    return _reference(curves[:, -1], regret, "privbandit's in-process simulator on the same users "
                      "(same θ*, contexts and reward draws), varying only device and analyzer "
                      "randomness", _band(t, curves))


def _mab_reference(config: Any, task: TaskInfo, opts: DemoOptions, regret: float,
                   reps: int) -> dict[str, Any]:
    """A multi-armed task: ``reps`` simulator runs on the demo's instance (same means, seeded
    from the demo's seed; independent reward draws)."""
    env = MABEnvironment(default_means(task.K))
    runs = simulate_mab(config, env, opts.users, reps, opts.seed, points=BAND_POINTS)
    curves = np.array([r.regret for r in runs], dtype=float)
    return _reference(curves[:, -1], regret, "privbandit's in-process simulator on the same arms "
                      "(default_means(K), Bernoulli rewards) with independent draws",
                      _band(runs[0].checkpoints, curves))


def _bco_reference(config: Any, task: TaskInfo, opts: DemoOptions, regret: float,
                   reps: int) -> dict[str, Any]:
    """A BCO task: ``reps`` simulator runs on the demo's instance (the same x*, from the demo's
    seed; independent offsets and directions). The simulator serves every user the latest point;
    the services' devices may play an older version, so a demo may sit a little above it."""
    env = demo_environment(task, user_streams(opts.seed)[0])
    runs, _ = simulate_bco(config, env, opts.users, reps, opts.seed, points=BAND_POINTS)
    curves = np.array([r.regret for r in runs], dtype=float)
    return _reference(curves[:, -1], regret, f"privbandit's in-process simulator on the same "
                      f"{DEMO_ENV} instance (same x*) with independent offsets and directions",
                      _band(runs[0].checkpoints, curves))


# A spread this small relative to the mean is rounding, not variation: the runs agree (e.g. a
# one-batch task whose every run plays before any model), and no z-score means anything.
DEGENERATE_SPREAD = 1e-9


# Checkpoints of the simulator's curves, the band of the demo's plot.
BAND_POINTS = 50


def _band(t: np.ndarray, curves: np.ndarray) -> dict[str, list[float]]:
    """The simulator runs' regret over t: mean, ±1 sd, and the 10–90 % range of the runs."""
    sd = curves.std(axis=0, ddof=1) if curves.shape[0] > 1 else np.zeros(curves.shape[1])
    return {"t": [float(x) for x in t], "mean": curves.mean(axis=0).tolist(),
            "sd": sd.tolist(), "p10": np.percentile(curves, 10, axis=0).tolist(),
            "p90": np.percentile(curves, 90, axis=0).tolist()}


def _reference(finals: np.ndarray, regret: float, what: str,
               band: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """Mean, sd and range of the simulator's final regrets, and ``demo_z`` = (this run − mean)/sd;
    ``demo_z`` is None, with ``demo_z_note`` saying why, when the runs' spread is degenerate.
    ``band``: the runs' curves summarised (``_band``), drawn beside the demo's curve."""
    mean = float(finals.mean())
    sd = float(finals.std(ddof=1)) if finals.shape[0] > 1 else 0.0
    degenerate = not sd > DEGENERATE_SPREAD * max(1.0, abs(mean))
    out: dict[str, Any] = {
        "runs": int(finals.shape[0]),
        "mean": mean,
        "sd": sd,
        "min": float(finals.min()),
        "max": float(finals.max()),
        "demo_z": None if degenerate else (regret - mean) / sd,
        "what": what,
        **({"curve": band} if band is not None else {}),
    }
    if degenerate:
        out["demo_z_note"] = (f"the {out['runs']} simulator runs agree to rounding (sd {sd:.2g}): "
                              f"no z-score; this run is {regret - mean:+.1f} from their mean")
    return out


class ProgressBar:
    """A live rich progress bar: users done, users/s, regret so far, model version. When the
    output is not a terminal (a pipe, a file, CI) a live bar shows nothing until the end, so one
    plain line is printed instead at every tenth of the users, and at least every
    ``LINE_EVERY`` seconds."""

    LINE_EVERY = 30.0

    def __init__(self, opts: DemoOptions, task: TaskInfo, console: Any | None) -> None:
        self.started = time.perf_counter()
        self._last = 0.0
        self._console: Any = console
        self._lines = console is not None and not console.is_terminal
        if self._lines:
            self._users = opts.users
            self._next_tenth = 1
            self._last_line = self.started
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        # Every column on a wide terminal; at 80 columns (or fewer) the ones that fit on one
        # line, the bar shortened (a wrapped live bar redraws as a column of fragments).
        narrow = console is not None and console.width < 120
        columns = [TextColumn("[bold]{task.description}"),
                   BarColumn(bar_width=10 if narrow else 40), MofNCompleteColumn()]
        if not narrow:
            columns.append(TextColumn("{task.fields[rate]:>7.0f} users/s"))
        columns += [TextColumn("regret {task.fields[regret]:>7.1f}"),
                    TextColumn("(random {task.fields[random]:>7.1f})")]
        if not narrow:
            columns += [TextColumn("model v{task.fields[version]}"), TimeElapsedColumn()]
        columns.append(TimeRemainingColumn())
        self._bar = Progress(*columns, console=console, refresh_per_second=8)
        self._task = self._bar.add_task(f"{task.id}", total=opts.users, rate=0.0, regret=0.0,
                                        random=0.0, version=0)

    def __enter__(self) -> ProgressBar:
        if not self._lines:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._lines:
            self._bar.stop()

    def _line(self, driver: Driver, now: float) -> None:
        """One plain progress line, when a tenth of the users is done or time has passed."""
        tenth = driver.done * 10 // self._users
        if tenth < self._next_tenth and now - self._last_line < self.LINE_EVERY:
            return
        self._next_tenth = tenth + 1
        self._last_line = now
        elapsed = max(now - self.started, 1e-9)
        self._console.print(
            f"  {driver.done}/{self._users} users, {driver.done / elapsed:.0f} users/s, regret "
            f"{driver.regret:.1f} (random {driver.random_regret:.1f}), model "
            f"v{driver.model_version}, {elapsed:.0f} s", highlight=False)

    def update(self, driver: Driver) -> None:
        now = time.perf_counter()
        if self._lines:
            self._line(driver, now)
            return
        if now - self._last < 0.05 and driver.done < driver.users:
            return  # the bar refreshes 8×/s; no need to update it on every user
        self._last = now
        elapsed = max(now - self.started, 1e-9)
        self._bar.update(self._task, completed=driver.done, rate=driver.done / elapsed,
                         regret=driver.regret, random=driver.random_regret,
                         version=driver.model_version)


def _reference_line(ref: dict[str, Any] | None, note: str | None = None) -> list[str]:
    if not ref:
        return [f"  simulator         — ({note})"] if note else []
    return [
        f"  simulator         {ref['mean']:.1f} ± {ref['sd']:.1f} (mean ± sd of {ref['runs']} "
        f"in-process runs on the same {'arms' if 'same arms' in ref['what'] else 'users'}; "
        + (f"this run is {ref['demo_z']:+.1f} sd)" if ref.get("demo_z") is not None
           else f"{ref.get('demo_z_note', 'no z-score')})")
    ]


def _batches(params: dict[str, Any]) -> str:
    """The task's batches for the summary's first line: l, or its growing schedule."""
    schedule = params.get("batch_schedule")
    return f"batches {schedule}" if schedule else f"l={params['batch_size']}"


def _shape(out: dict[str, Any]) -> str:
    """The task's shape for the summary's first line."""
    params = out["params"]
    if out["env"] == DEMO_ENV:
        return f"BCO, d={params['d']}, "
    if params["d"] is None:
        return f"multi-armed, K={params['K']}, "
    return f"d={params['d']}, K={params['K']}, "


def print_result(out: dict[str, Any], console: Any) -> None:
    from rich.markup import escape

    p = out["privacy"]
    rec = out["reconciliation"]

    lines = [
        f"[bold]{out['threat_model']}[/bold] demo: task {out['task']} ({out['algo']}, "
        + _shape(out) + _batches(out["params"]) + "), "
        f"{out['users']} users, concurrency {out['concurrency']}, seed {out['seed']}",
        f"  regret            {out['final_regret']:.1f}   (uniformly random policy: "
        f"{out['random_regret']:.1f})",
        *_reference_line(out.get("simulator_reference"), out.get("simulator_reference_note")),
        f"  throughput        {out['users_per_second']:.0f} users/s "
        f"({out['wall_seconds']:.1f} s)",
    ]
    aggregation = out.get("aggregation", "reports")
    secure = aggregation == "secure-sum"
    prio3 = False
    if out["threat_model"] == "shuffle":
        prio3 = secure and out.get("secure_sum") == "prio3"
        how = ("prio3: each report secret-shared between shuffler and analyzer with a validity "
               "proof, verified jointly, invalid ones refused alone; the analyzer sees only "
               "batch sums of valid reports" if prio3 else
               "the shuffler forwards only the encrypted sum of each batch; the analyzer "
               "decrypts only the sums" if secure else
               "the analyzer decrypts each shuffled report")
        overridden = " (overridden for this run)" if out.get("aggregation_overridden") else ""
        lines.append(f"  aggregation       {aggregation}{overridden}: {how}")
    ledger = ""
    if entry(out["algo"]).transports == ("secure-sum",):  # ddp-linucb, ddp-glb
        ledger = " — distributed DP (Skellam shares in the batch sums), central only"
    elif out["threat_model"] == "shuffle":
        ledger = (" — sum-only ledger (observer of the released batch sums)" if secure
                  else " — whole-report ledger (observer of the shuffled reports)")
    lines += ledger_lines(p, ledger, escape)
    lines += person_lines(out.get("per_person"), "  per person      ")
    if out.get("persons") is not None:
        lines.append(f"  returning users   {out['users']} visits of {out['persons']} persons")
    mark = "[green]✓[/green]" if rec["consistent"] else "[bold red]✗[/bold red]"
    lines += [
        f"  reconciliation    {mark}",
        f"    feedbacks_sent    {rec['feedbacks_sent']}  (device API, 202)",
        *([f"    feedbacks_withheld {rec['feedbacks_withheld']}  (device: the person's bound "
           "was reached, no report made)"] if rec.get("feedbacks_withheld") else []),
        f"    reports_accepted  {rec['reports_accepted']}  (shuffler)",
        f"    reports_counted   {rec['reports_counted']}  (analyzer"
        + (": the valid reports of each batch sum)" if prio3
           else ": l per decrypted batch sum)" if secure else ")"),
        f"    reports_refused   {rec.get('reports_refused', 0)}  (analyzer: invalid or "
        "duplicate" + (", or in a quarantined batch sum)" if secure else ")"),
        f"    reports_pending   {rec['reports_pending']}  (shuffler, waiting for a batch of "
        f"{out.get('next_batch_size') or out['params']['batch_size']})",
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


def make_console(stderr: bool = False) -> Any:
    """rich's console: at a terminal, its width; piped or to a file, lines are not wrapped
    (``soft_wrap``: rich would otherwise cut them at 80 columns, inside numbers and URLs)."""
    from rich.console import Console

    console = Console(stderr=stderr)
    if console.is_terminal:
        return console
    return Console(stderr=stderr, soft_wrap=True)
