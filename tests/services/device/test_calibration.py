"""A device calibrates its randomizers at start (``runtime.task_randomizers``): σ of the Gaussian
reports and a central target's ε0, which the randomizers otherwise compute on first use (so that
a shuffler, which needs only a row's length, never does), are never computed in a request."""

from __future__ import annotations

import functools
import tomllib
from importlib import resources

import pytest

from privbandit.services.device.runtime import task_randomizers
from privbandit.shared.core.randomizers.binary import BinaryRandomizer
from privbandit.shared.core.randomizers.glb import VersionedGLBRandomizer
from privbandit.shared.settings import TaskConfig
from tests.helpers import CRASH_SCHEDULE, SBLB_SCHEDULED, TASKS


def shipped_small_tasks() -> list[TaskConfig]:
    text = (resources.files("privbandit.shared") / "defaults" / "small.toml").read_text("utf-8")
    return [TaskConfig.model_validate(t) for t in tomllib.loads(text)["tasks"]]


def small_tasks() -> list[TaskConfig]:
    tasks = shipped_small_tasks()
    # sblb with ε0 from a central target over a growing schedule: one randomizer per length
    return [t if t.id != TASKS["shuffle"] else TaskConfig.model_validate(
        {**t.model_dump(), "policy": {**t.policy.model_dump(), **SBLB_SCHEDULED,
                                      "batch_schedule": CRASH_SCHEDULE}})
            for t in tasks]


def owner(randomizer: object) -> object:
    return randomizer.inner if isinstance(randomizer, VersionedGLBRandomizer) else randomizer


def lazy(randomizer: object) -> set[str]:
    """The values a randomizer with a ``calibrate`` computes on first use (ddp-linucb's exact
    samplers are built in a thread of their own: ``warm_share_samplers``)."""
    cls = type(owner(randomizer))
    if not hasattr(cls, "calibrate"):
        return set()
    return {n for n in dir(cls) if isinstance(getattr(cls, n, None), functools.cached_property)}


def computed(randomizer: object) -> set[str]:
    return lazy(randomizer) & set(vars(owner(randomizer)))


def test_every_lazy_value_is_computed_at_start() -> None:
    randomizers, sized = task_randomizers(small_tasks())
    every = [*randomizers.values(), *(r for rs in sized.values() for r in rs.values())]
    with_lazy = [r for r in every if lazy(r)]
    # Gaussian (ldp-linucb, ldp-glb), arms (ldp-mab), BCO (two), sblb at each of 4 lengths
    assert len(with_lazy) >= 9, [type(r).__name__ for r in with_lazy]
    for r in with_lazy:
        assert computed(r) == lazy(r), (type(r).__name__, lazy(r) - computed(r))
    per_length = sized[TASKS["shuffle"]]
    assert len(per_length) == 4
    assert all(isinstance(r, BinaryRandomizer) for r in per_length.values())


@pytest.mark.parametrize("algo", ["ldp-linucb", "ldp-mab", "ldp-bco", "sblb"])
def test_a_randomizer_made_without_its_policy_computes_nothing_yet(algo: str) -> None:
    """What the shuffler builds for a row length: nothing calibrated."""
    from privbandit.shared.core.policies import make_config, randomizer_for
    from privbandit.shared.crypto.hpke import row_length

    extra = {"epsilon": 1.0} if algo == "sblb" else {}
    r = randomizer_for(make_config(algo, **extra))
    assert row_length(r) > 0
    assert computed(r) == set()


def test_the_analyzer_publishes_the_eps0_each_batch_length_gets_on_the_device() -> None:
    """``TaskInfo.eps0_by_batch_size`` (for devices without the accountant: the browser
    library) is exactly the ε0 of the Python device's randomizer for each length of the
    schedule; a fixed schedule has one length; other policies publish none."""
    from privbandit.services.analyzer.tasks import task_info
    from privbandit.shared.core.policies import build_policy, randomizer_for

    tasks = small_tasks()
    _, sized = task_randomizers(tasks)
    shuffle = next(t for t in tasks if t.id == TASKS["shuffle"])
    info = task_info(shuffle, build_policy(shuffle.policy))
    table = info.eps0_by_batch_size
    assert table is not None and sorted(table) == sorted(sized[shuffle.id])
    for size, r in sized[shuffle.id].items():
        assert isinstance(r, BinaryRandomizer) and r.batch_size == size
        assert table[size] == r.eps0
    assert len(set(table.values())) == len(table)  # ε0 grows with the batch length
    # Through the wire format: integer lengths survive the JSON round trip.
    again = type(info).model_validate_json(info.model_dump_json())
    assert again.eps0_by_batch_size == table
    # The shipped small config's sblb task: a fixed ε0 and a fixed schedule, one length.
    fixed = next(t for t in shipped_small_tasks() if t.id == TASKS["shuffle"])
    assert fixed.schedule.is_fixed
    assert task_info(fixed, build_policy(fixed.policy)).eps0_by_batch_size == {
        fixed.batch_size: randomizer_for(fixed.policy).eps0}
    for t in tasks:
        if not t.policy.algo.startswith("sblb"):
            assert task_info(t, build_policy(t.policy)).eps0_by_batch_size is None, t.id
