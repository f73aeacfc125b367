"""``privbandit demo``: drive simulated users through the running services and reconcile counts.

A seeded ``linear`` environment with the task's d and K plays N users. Each user asks the device
to ``decide`` (sending its K private feature vectors), gets a Bernoulli reward for the chosen arm
from the environment, and sends ``feedback``; C users are in flight at once (asyncio + aiohttp).
Regret is pseudo-regret Σ_t (max_a μ_{t,a} − μ_{t,a_t}), accumulated in completion order.

At the end the demo waits until the system is quiescent and reconciles the counts of all three
services (``reconcile``); when the services were already running, every count is the change
during this run.

``--aggregation`` picks the shuffle transport. If no shuffle task of the config uses the requested
one, the first shuffle task runs with it on freshly started services (a temporary copy of the
config, as ``--paper`` writes). With ``secure-sum`` the analyzer decrypts only batch sums and
counts l reports per sum, so the reconciliation is the same identity, and the ledger printed is
the sum-only one (what an observer of the released sums could learn).

The package: ``config`` (options, config file, task choice, derived configs), ``driver`` (the
simulated users over HTTP), ``reconcile`` (counts, quiescence, reconciliation), ``report``
(progress, simulator reference, summary) and ``run`` (the command).

Randomness: the environment (contexts, true means and reward draws) uses seeded numpy generators;
the device's own randomness is its business (CSPRNG-seeded, not reproducible by design).
"""

from privbandit.demo.config import (
    DEFAULT_USERS,
    THREAT_MODELS,
    DemoError,
    DemoOptions,
    choose_task,
    config_path,
    demo_task,
    derived_config,
    load_settings,
    paper_config,
    pick_task,
)
from privbandit.demo.driver import Driver, DriveResult, fetch_task
from privbandit.demo.reconcile import Snapshot, reconcile, snapshot, wait_quiescent
from privbandit.demo.report import print_result, simulator_reference
from privbandit.demo.run import main_demo, run_demo_against, running_services

__all__ = [
    "DEFAULT_USERS",
    "THREAT_MODELS",
    "DemoError",
    "DemoOptions",
    "DriveResult",
    "Driver",
    "Snapshot",
    "choose_task",
    "config_path",
    "demo_task",
    "derived_config",
    "fetch_task",
    "load_settings",
    "main_demo",
    "paper_config",
    "pick_task",
    "print_result",
    "reconcile",
    "run_demo_against",
    "running_services",
    "simulator_reference",
    "snapshot",
    "wait_quiescent",
]
