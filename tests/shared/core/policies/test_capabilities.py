"""The capabilities (issue 45 item 1): what the registry checks at import, what it derives, and the
summable randomizers' contract with the secure sum."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from privbandit.shared.core.policies.base import Scheduled
from privbandit.shared.core.policies.exact import LinUCB
from privbandit.shared.core.policies.families import FAMILIES
from privbandit.shared.core.policies.registry import REGISTRY, _check_capabilities, entry
from privbandit.shared.core.policies.registry import randomizer_for as task_randomizer
from privbandit.shared.core.randomizers.base import Summable
from privbandit.shared.core.randomizers.binary import BinaryRandomizer
from privbandit.shared.core.randomizers.skellam import SkellamRandomizer


class _SumsButIdentity(LinUCB):
    """Learns from sums, but its randomizer (the identity) has no integer encoding."""

    def ingest_statistic(self, stat: np.ndarray, n: int) -> None:
        raise NotImplementedError


def test_a_secure_sum_entry_needs_a_sum_ingesting_class_and_a_summable_randomizer() -> None:
    linucb = entry("linucb")
    with pytest.raises(TypeError, match="no ingest_statistic"):
        _check_capabilities(dataclasses.replace(linucb, transports=("secure-sum",)))
    with pytest.raises(TypeError, match="not Summable"):
        _check_capabilities(dataclasses.replace(linucb, policy=_SumsButIdentity,
                                                transports=("secure-sum",)))
    for e in REGISTRY.values():  # the registered ones pass (they did at import)
        _check_capabilities(e)


def test_scheduled_is_derived_from_the_class() -> None:
    """The services run growing schedules for the policies that size noise per batch length:
    the three of the former hand-kept SCHEDULED_IN_SERVICES and ddp-glb (a DDPLinUCB), no more,
    no fewer."""
    assert {a for a, e in REGISTRY.items() if e.scheduled} == {
        "ddp-linucb", "ddp-glb", "sblb", "sblb-fixed"}
    assert all(e.scheduled == issubclass(e.policy, Scheduled) for e in REGISTRY.values())


def test_the_families_choose_the_simulator_loop_and_whether_the_ledger_moves() -> None:
    assert {n: f.simulator for n, f in FAMILIES.items()} == {
        "linear": "contextual", "glb": "contextual", "phase": "contextual", "arms": "mab",
        "bco": "bco"}
    assert [n for n, f in FAMILIES.items() if f.ledger_moves] == ["arms"]
    assert entry("lplr").simulator == "lplr" and entry("linucb").simulator == "contextual"


@pytest.mark.parametrize("algo,params", [
    ("sblb", {"d": 3, "epsilon": 1.0, "m": 3, "batch_size": 20}),
    ("ddp-linucb", {"d": 3, "epsilon": 1.0, "batch_size": 20, "noise": "devices"}),
    ("ddp-linucb", {"d": 3, "epsilon": 1.0, "batch_size": 20, "noise": "aggregators"}),
])
def test_the_summands_of_a_batch_add_up_to_its_statistic_within_the_encoding(
        algo: str, params: dict[str, object]) -> None:
    """Σ summand(row_i) is what the estimator reads as ``sufficient(rows)``, and every summand
    lies in the ranges its ``SumEncoding`` states (what Paillier's slots and Prio3's proof
    check)."""
    from privbandit.shared.core.policies import make_config

    config = make_config(algo, **params)
    rz = task_randomizer(config)
    assert isinstance(rz, Summable) and isinstance(rz, (BinaryRandomizer, SkellamRandomizer))
    rng = np.random.default_rng(np.random.SeedSequence(45))
    x = rng.normal(size=(20, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True) * 1.25
    rows = rz.randomize(x, rng.random(20), rng)
    summands = np.array([rz.summand(row) for row in rows])
    assert np.array_equal(summands.sum(axis=0), rz.sufficient(rows))
    enc = rz.sum_encoding()
    assert summands.shape[1] == enc.c
    offsets = np.array(enc.offsets if enc.offsets is not None else [enc.offset] * enc.c)
    maxima = np.array(enc.maxima if enc.maxima is not None else [enc.m] * enc.c)
    digits = summands + offsets
    assert (digits >= 0).all() and (digits <= maxima).all()
    assert (enc.noise_variance > 0) == (params.get("noise") == "aggregators")
