"""What a demo run is: its options, the config file, the task it drives, and the temporary copy of
the config a run writes when it changes a task (``--paper``, ``--aggregation``)."""

from __future__ import annotations

import contextlib
import os
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from privbandit.shared.core.accounting.ledger import Aggregation
from privbandit.shared.settings import DEFAULT_CONFIG, Settings, TaskConfig

THREAT_MODELS = ("ldp", "shuffle", "central")
# The threat model `privbandit demo` drives when none is given (the one `make demo` shows).
DEFAULT_THREAT_MODEL = "shuffle"
# Users per default run: enough to watch the model learn, small enough for a minute or two.
DEFAULT_USERS = 10000


class DemoError(RuntimeError):
    """The demo could not run (no matching task, services unreachable, ...)."""


@dataclass
class DemoOptions:
    threat_model: str
    users: int = DEFAULT_USERS
    concurrency: int = 1
    seed: int = 0
    aggregation: Aggregation | None = None
    settle_timeout: float = 120.0
    progress: bool = True
    # Returning users (issue 24): the users are visits of this many persons (None: one each).
    persons: int | None = None


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


def pick_task(settings: Settings, threat_model: str, aggregation: Aggregation | None) -> str:
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
    settings: Settings, threat_model: str, aggregation: Aggregation | None
) -> tuple[str, bool]:
    """(task id, whether its aggregation must be overridden to ``aggregation``).

    The threat model's first task (in config order). For the shuffle model (the only one with two
    transports) and a requested ``aggregation``: the first shuffle task that runs with it, as
    configured or with its aggregation overridden when its policy supports that transport. First
    in order, so a later task configured with the transport (e.g. the small config's
    ``ddp-linucb`` task) does not displace the threat model's first one; ``--task`` runs it."""
    if aggregation is None or threat_model != "shuffle":
        return pick_task(settings, threat_model, aggregation), False
    errors = []
    for task in settings.tasks:
        if task.threat_model != threat_model:
            continue
        if task.aggregation == aggregation:
            return task.id, False
        try:
            TaskConfig.model_validate({**task.model_dump(), "aggregation": aggregation})
        except ValueError as exc:
            errors.append(f"{task.id}: {exc}")
            continue
        return task.id, True
    raise DemoError(f"no shuffle task of the config can run with {aggregation} aggregation"
                    + (f" ({'; '.join(errors)})" if errors else ""))


def named_task(settings: Settings, task_id: str, aggregation: Aggregation | None
               ) -> tuple[str, bool]:
    """``--task ID``: that task of the config, whatever its threat model (``--aggregation``
    may only repeat the task's own transport)."""
    task = settings.task(task_id)
    if task is None:
        have = ", ".join(t.id for t in settings.tasks)
        raise DemoError(f"the config has no task {task_id!r}; it has: {have or 'no tasks'}")
    if aggregation is not None and aggregation != task.aggregation:
        raise DemoError(f"task {task_id} uses {task.aggregation} aggregation; --aggregation "
                        "applies to a threat model's first task, not to --task")
    return task.id, False


def demo_task(
    config: Path | None, threat_model: str, aggregation: Aggregation | None, task: str | None = None
) -> tuple[Path, Settings, str, bool]:
    """The config file a run reads, its settings, the id of the task to drive (``task``, else
    the first of ``threat_model``) and whether that task's aggregation must be overridden
    (``choose_task``)."""
    base = config_path(config)
    settings = load_settings(base)
    if task is not None:
        task_id, override = named_task(settings, task, aggregation)
    else:
        task_id, override = choose_task(settings, threat_model, aggregation)
    return base, settings, task_id, override


def derived_config(
    base: Path, task_id: str, out: Path, *, paper: bool = False,
    aggregation: Aggregation | None = None,
    contributions: int | None = None,
    only: bool = False,
) -> Path:
    """A copy of ``base`` where ``task_id`` is changed for this demo run:

    - ``paper``: the paper's widths, confidence_scale = 1 and regularizer = "paper" (where the
      policy has a regularizer), and every other setting of its entry's ``practical`` back to
      the config's (the paper's) default, e.g. adar-oful's first_episode and switching,
      no perturbation of the published θ̃ (``perturb = 0``), and fixed batches of the
      config's default length (1000) in place of a batch schedule;
    - ``aggregation``: the task's shuffle transport (``reports`` or ``secure-sum``);
    - ``contributions``: each person's bound k (forever), the devices enforce it (issue 24).
    - ``only``: ``task_id`` is the config's only task (the services set up nothing else).
    """
    from privbandit.shared.core.policies.registry import entry

    data = tomllib.loads(base.read_text())
    for task in data.get("tasks", []):
        if task.get("id") == task_id:
            policy = task.setdefault("policy", {})
            if paper:
                known = entry(policy["algo"]).config.model_fields
                if "confidence_scale" in known:  # BCO tasks have the paper's steps already
                    policy["confidence_scale"] = 1.0
                if "regularizer" in known:
                    policy["regularizer"] = "paper"
                practical = entry(policy["algo"]).practical
                for key in set(practical) - {"confidence_scale", "regularizer"}:
                    if policy.pop(key, None) is not None and key == "batch_schedule":
                        policy["batch_size"] = known["batch_size"].default
                if "accountant" in known and "epsilon" not in policy:
                    policy.pop("accountant", None)  # sblb's fixed ε0: no central target to size
                if "perturb" in known:  # ldp-linucb's perturbed publication is not the paper's
                    policy["perturb"] = 0.0
            if aggregation is not None:
                if aggregation != task.get("aggregation", "reports"):
                    _follow_aggregation(policy, aggregation, paper)
                task["aggregation"] = aggregation
            if contributions is not None:
                task["contributions"] = {"k": contributions}
    if only:
        data["tasks"] = [t for t in data.get("tasks", []) if t.get("id") == task_id]
    out.write_text(tomli_w.dumps(data))
    return out


def _follow_aggregation(policy: dict[str, object], aggregation: Aggregation, paper: bool) -> None:
    """An sblb task moved to another transport: ε0 sized by that transport's accountant (a
    secure-sum accountant over whole reports would overstate the amplification) and, unless
    ``paper``, that transport's practical defaults where they differ
    (``PolicyEntry.practical_by_aggregation``: over reports, m = 1 and batches doubling on)."""
    from privbandit.shared.core.policies.registry import entry

    if "accountant" in policy:
        policy["accountant"] = aggregation
    if not paper:
        policy.update(entry(str(policy.get("algo"))).practical_by_aggregation.get(
            aggregation, {}))


def paper_config(base: Path, task_id: str, out: Path) -> Path:
    """``derived_config`` with the paper's widths only."""
    return derived_config(base, task_id, out, paper=True)
