"""The temporary config a demo run writes (``--paper``, ``--aggregation``): written with tomli-w,
read back by the services exactly as intended."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import pytest

from privbandit.demo.config import DemoError, choose_task, demo_task, derived_config, load_settings
from privbandit.shared.core.policies.bco_config import BCO_CONFIGS
from privbandit.shared.core.policies.registry import entry
from privbandit.shared.settings import DEFAULT_CONFIG
from tests.helpers import write_config


@pytest.fixture(params=["default", "e2e"])
def base(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return DEFAULT_CONFIG if request.param == "default" else write_config(tmp_path / "e2e")


def expected(data: dict[str, Any], task_id: str, paper: bool, aggregation: str | None) -> dict:
    """``data`` with the changes ``derived_config`` promises, made by hand."""
    want = copy.deepcopy(data)
    task = next(t for t in want["tasks"] if t["id"] == task_id)
    if paper:
        if task["policy"]["algo"] not in BCO_CONFIGS:  # BCO tasks run the paper's steps anyway
            task["policy"]["confidence_scale"] = 1.0
        # The policies with a regularizer.
        if task["policy"]["algo"] in ("sblb", "sblb-fixed", "ldp-linucb", "ldp-glb",
                                          "ddp-linucb", "ddp-glb"):
            task["policy"]["regularizer"] = "paper"
        # Every other practical setting back to the config's (the paper's) default: adar-oful's
        # episodes, ddp-linucb's schedule and encoding, sblb's central target, m and schedule,
        # ldp-linucb's encoding and mechanism (Alg. 5's Gaussian report).
        practical = {"adar-oful": ("first_episode", "switching"),
                     "ddp-linucb": ("batch_schedule", "encoding", "noise_ridge"),
                     "ddp-glb": ("batch_schedule", "encoding"),
                     "sblb": ("epsilon", "m", "batch_schedule", "accountant", "noise_ridge"),
                     "sblb-fixed": ("epsilon", "m", "batch_schedule", "accountant", "noise_ridge"),
                     "ldp-linucb": ("noise_ridge", "perturb", "encoding", "mechanism")}
        for key in practical.get(task["policy"]["algo"], ()):
            if task["policy"].pop(key, None) is not None and key == "batch_schedule":
                task["policy"]["batch_size"] = 1000  # the paper's fixed l
        if task["policy"]["algo"] in ("ldp-linucb", "ldp-glb"):  # no perturbed θ̃ (issue 22)
            task["policy"]["perturb"] = 0.0
        if "accountant" in task["policy"] and "epsilon" not in task["policy"]:
            del task["policy"]["accountant"]  # sblb's fixed ε0: no target to size
    if aggregation is not None:
        if aggregation != task.get("aggregation", "reports"):
            # sblb moved to another transport: its accountant and practical defaults follow.
            if "accountant" in task["policy"]:
                task["policy"]["accountant"] = aggregation
            if not paper:
                task["policy"].update(entry(task["policy"]["algo"])
                                      .practical_by_aggregation.get(aggregation, {}))
        task["aggregation"] = aggregation
    return want


def test_unchanged_copy_reads_back_identically(base: Path, tmp_path: Path) -> None:
    data = tomllib.loads(base.read_text())
    out = derived_config(base, "no-such-task", tmp_path / "copy.toml")
    assert tomllib.loads(out.read_text()) == data
    assert load_settings(out) == load_settings(base)


@pytest.mark.parametrize("paper", [False, True])
@pytest.mark.parametrize("aggregation", [None, "reports", "secure-sum"])
def test_derived_config_round_trips(
    base: Path, tmp_path: Path, paper: bool, aggregation: str | None
) -> None:
    data = tomllib.loads(base.read_text())
    shuffle = next(t["id"] for t in data["tasks"] if t["threat_model"] == "shuffle")
    for task in data["tasks"]:
        agg = aggregation if task["id"] == shuffle else None
        out = derived_config(base, task["id"], tmp_path / f"{task['id']}.toml", paper=paper,
                             aggregation=agg)
        assert tomllib.loads(out.read_text()) == expected(data, task["id"], paper, agg)
        # The services read it: every other task is as configured, this one as changed.
        got, was = load_settings(out), load_settings(base)
        for before, after in zip(was.tasks, got.tasks, strict=True):
            if before.id != task["id"]:
                assert after == before
        changed = got.task(task["id"])
        assert changed is not None
        if paper and changed.policy.algo not in BCO_CONFIGS:
            assert changed.policy.confidence_scale == 1.0
        if paper and changed.policy.algo == "adar-oful":  # Alg. 4: switch from the first report
            assert (changed.policy.first_episode, changed.policy.switching) == (1, 0.5)
        if paper:
            assert changed.schedule.is_fixed
        if agg is not None:
            assert changed.aggregation == agg


def test_demo_task_overrides_the_shuffle_transport_when_none_is_configured(
    tmp_path: Path,
) -> None:
    cfg = write_config(tmp_path)  # the e2e shuffle task uses the default "reports" transport
    path, settings, task_id, override = demo_task(cfg, "shuffle", "secure-sum")
    assert (path, task_id, override) == (cfg, "small-shuffle", True)
    assert choose_task(settings, "shuffle", "reports") == ("small-shuffle", False)
    with pytest.raises(DemoError):
        choose_task(settings, "central", "secure-sum")


def test_demo_task_drives_a_named_task_of_any_threat_model(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    _, _, task_id, override = demo_task(cfg, "shuffle", None, task="small-heldp")
    assert (task_id, override) == ("small-heldp", False)
    with pytest.raises(DemoError, match="no task"):
        demo_task(cfg, "shuffle", None, task="no-such-task")
    with pytest.raises(DemoError, match="aggregation"):
        demo_task(cfg, "shuffle", "secure-sum", task="small-heldp")


def test_a_derived_config_can_hold_the_driven_task_only(tmp_path: Path) -> None:
    # Services the demo starts for one task set up nothing else (issue 26 item 8).
    import tomllib

    from privbandit.demo.config import config_path, derived_config, load_settings

    base = config_path(None)
    first = load_settings(base).tasks[0].id
    out = derived_config(base, first, tmp_path / "demo.toml", only=True)
    data = tomllib.loads(out.read_text())
    assert [t["id"] for t in data["tasks"]] == [first]
    assert len(load_settings(base).tasks) > 1  # the packaged config has more
    kept = derived_config(base, first, tmp_path / "all.toml")
    assert len(tomllib.loads(kept.read_text())["tasks"]) == len(load_settings(base).tasks)
