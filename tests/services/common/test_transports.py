"""The three services' transport registries (``services/*/transports``) agree with each other and
with the configuration, and a name none of them knows is an error, never a silent default."""

from __future__ import annotations

import typing

import pytest

from privbandit.services.analyzer.transports import TRANSPORTS as ANALYZER
from privbandit.services.analyzer.transports import transport_for
from privbandit.services.common.transports import lookup, tasks_by_transport
from privbandit.services.device.transports import TRANSPORTS as DEVICE
from privbandit.services.shuffler.transports import TRANSPORTS as SHUFFLER
from privbandit.services.shuffler.transports import transport_class
from privbandit.shared.protocol.messages import TaskInfo
from privbandit.shared.settings import Settings, TaskConfig
from tests.helpers import central_task, ldp_task, shuffle_task


def test_every_configurable_transport_is_registered_on_every_side_in_one_order() -> None:
    aggregations = list(typing.get_args(TaskConfig.model_fields["aggregation"].annotation))
    assert aggregations == list(typing.get_args(TaskInfo.model_fields["aggregation"].annotation))
    # A secure-sum task runs the transport its ``secure_sum`` names, ``prio3`` or ``paillier``
    # (``TaskConfig.secure_sum``, issue 23; the Paillier one's name was ``secure-sum`` until
    # issue 45: now that word names any secure sum only).
    secure_sums = list(typing.get_args(TaskConfig.model_fields["secure_sum"].annotation))
    assert secure_sums == ["prio3", "paillier"]
    names = ["reports", "paillier", "prio3"]
    assert set(names) == {*aggregations, *secure_sums} - {"secure-sum"}
    for registry in (DEVICE, SHUFFLER, ANALYZER):
        assert list(registry) == names
        assert all(t.name == name for name, t in registry.items())


def test_the_endpoints_of_each_transport_are_distinct() -> None:
    for registry in (DEVICE, ANALYZER):
        endpoints = [t.endpoint for t in registry.values()]
        assert len(set(endpoints)) == len(endpoints)
    # The shuffler's upload routes (``UploadRoute``), where the device's transports send.
    routes = [t.route.endpoint for t in SHUFFLER.values()]
    assert len(set(routes)) == len(routes)
    assert routes == [t.endpoint for t in DEVICE.values()]


@pytest.mark.parametrize("name", ["reports", "paillier", "prio3"])
def test_a_task_gets_the_transport_it_names(name: str) -> None:
    task = (shuffle_task(aggregation="reports") if name == "reports"
            else shuffle_task(aggregation="secure-sum", secure_sum=name))
    assert task.transport == name
    assert transport_class(task) is SHUFFLER[name]
    assert transport_for(task) is ANALYZER[name]
    assert lookup(DEVICE, task, "device") is DEVICE[name]


def test_an_unknown_transport_is_an_error_naming_the_known_ones() -> None:
    # Not a configurable name: built without validation, as a newer config might carry it.
    task = shuffle_task().model_copy(update={"aggregation": "mixnet"})
    for lookup_one in (transport_class, transport_for,
                       lambda t: lookup(DEVICE, t, "device")):
        with pytest.raises(ValueError, match=r"'mixnet' \(known: paillier, prio3, reports\)"):
            lookup_one(task)


def test_tasks_are_grouped_by_transport_with_every_name_present() -> None:
    settings = Settings.model_construct(tasks=[
        shuffle_task("a", aggregation="secure-sum"), ldp_task(), central_task(),
        shuffle_task("b", aggregation="secure-sum", secure_sum="prio3")])
    grouped = tasks_by_transport(SHUFFLER, settings, "shuffler")
    assert {name: [t.id for t in tasks] for name, tasks in grouped.items()} == {
        "reports": ["loc", "cen"], "paillier": ["a"], "prio3": ["b"]}
