"""Contract tests over the policy registry: every registered policy, parametrised by id, so a new
policy gets them without a line of its own (``docs/adding-a-policy.md``).

- its state survives get_state → JSON → set_state exactly, and the restored policy publishes the
  same next model after the same reports;
- ``ingest`` consumes at least one of the rows its randomizer makes on a device (the device's
  family handler: decide with the policy's model, then the report row of that decision);
- its ledger has every field of spec §6 ``privacy`` (null where it does not apply);
- its model survives model → message → model through its family;
- the threat models and transports ``TaskConfig`` accepts are exactly the declared ones.

Each case is cheap: d = 3, batches of 4 reports, a handful of rows.
"""

from __future__ import annotations

import functools
import json
import typing
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from privbandit.services.device.families import HANDLERS
from privbandit.shared.core.policies import (
    REGISTRY,
    build_policy,
    entry,
    make_config,
    randomizer_for,
)
from privbandit.shared.core.policies.base import Policy
from privbandit.shared.core.policies.config import AnyPolicyConfig
from privbandit.shared.core.policies.registry import PolicyEntry
from privbandit.shared.settings import TaskConfig

ALGOS = list(REGISTRY)
SERVICE_ALGOS = [a for a in ALGOS if REGISTRY[a].services]
THREAT_MODELS = ("none", "ldp", "shuffle", "central")
TRANSPORTS = ("reports", "secure-sum")
# spec §6: the ``privacy`` object of every simulate and demo output.
PRIVACY_FIELDS = {"threat_model", "ldp_epsilon", "ldp_delta", "central_epsilon",
                  "central_delta", "rdp_alpha", "rdp_epsilon", "accounting"}
# Small instances (only the fields a config has are set). A phase task of the services defines
# its own K fixed arms from a seed.
SMALL = {"d": 3, "batch_size": 4, "K": 4, "arm_seed": 7, "horizon": 1000}
ROWS = 8
REWARD_RNG_SEED = 3


def small_config(algo: str, threat_model: str | None = None) -> Any:
    fields = REGISTRY[algo].config.model_fields
    params = {k: v for k, v in SMALL.items() if k in fields}
    if threat_model == "ldp" and "batch_size" in fields:
        params["batch_size"] = 1  # ldp tasks are pass-through
    return make_config(algo, **params)


def K_of(config: Any) -> int:
    return int(getattr(config, "K", None) or SMALL["K"])


def device_rows(e: PolicyEntry, policy: Policy[Any, Any], n: int,
                rng: np.random.Generator) -> np.ndarray:
    """n report rows as devices make them from the policy's current model."""
    config, handler = policy.config, HANDLERS[e.family.name]
    K = K_of(config)
    rows = []
    for _ in range(n):
        X = None
        if e.family.takes_features:
            X = rng.standard_normal((K, config.d))
            X *= float(config.L) * rng.random((K, 1)) / np.linalg.norm(X, axis=1, keepdims=True)
        decision = handler.decide(policy.model, X, rng)
        points = getattr(config, "points_per_user", None)
        value: float | list[float] = (
            [float(rng.random()) * config.loss_bound for _ in range(points)] if points
            else float(rng.random() < 0.5))
        eps = config.epsilon if getattr(policy.randomizer, "per_user_epsilon", False) else None
        rows.append(handler.report_row(policy.randomizer, decision.state, value, eps, rng))
    return np.asarray(rows)


def fresh(algo: str) -> tuple[PolicyEntry, Any, Policy[Any, Any], np.random.Generator]:
    """A small policy of ``algo`` (analyzer seed 1) and the devices' generator."""
    config = small_config(algo)
    policy = build_policy(config, np.random.default_rng(1))
    return entry(algo), config, policy, np.random.default_rng(REWARD_RNG_SEED)


def via_json(state: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(state))  # type: ignore[no-any-return]


@pytest.mark.parametrize("algo", ALGOS)
def test_the_registry_entry_names_its_config_and_class(algo: str) -> None:
    e = entry(algo)
    assert e.config.model_fields["algo"].default == algo
    assert e.policy.algo == algo
    assert e.threat_models and set(e.threat_models) <= set(THREAT_MODELS)
    assert e.transports and set(e.transports) <= set(TRANSPORTS)
    if e.services:
        assert e.family.name in HANDLERS, "the device has no handler for the family"


def test_tasks_accept_exactly_the_policies_the_services_run() -> None:
    union = typing.get_args(typing.get_args(AnyPolicyConfig)[0])
    assert {c.model_fields["algo"].default for c in union} == set(SERVICE_ALGOS)


def test_an_unknown_policy_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        entry("nope")
    with pytest.raises(ValidationError):
        TaskConfig(id="t", threat_model="none", policy={"algo": "nope"})  # type: ignore[arg-type]


@pytest.mark.parametrize("algo", ALGOS)
def test_state_survives_json_exactly_and_the_next_model_is_the_same(algo: str) -> None:
    e, config, policy, rng = fresh(algo)
    if e.services:
        policy.ingest(device_rows(e, policy, ROWS, rng))
    state = policy.get_state()
    restored = build_policy(config, np.random.default_rng(99))
    restored.set_state(via_json(state))
    assert via_json(restored.get_state()) == via_json(state)
    if not e.services:
        return
    rows = device_rows(e, policy, ROWS, rng)
    for p in (policy, restored):
        p.rng = np.random.default_rng(5)  # the analyzer's noise, drawn alike from here on
        p.ingest(rows)
    assert via_json(restored.get_state()) == via_json(policy.get_state())
    assert json.dumps(restored.model.to_dict()) == json.dumps(policy.model.to_dict())


@pytest.mark.parametrize("algo", SERVICE_ALGOS)
def test_ingest_consumes_at_least_one_row(algo: str) -> None:
    e, _, policy, rng = fresh(algo)
    for _ in range(3):
        rows = device_rows(e, policy, ROWS, rng)
        before = policy.reports
        consumed = policy.ingest(rows)
        assert 1 <= consumed <= rows.shape[0]
        assert policy.reports >= before  # counted (a skipped update counts the rows it used)


def same_value(a: Any, b: Any) -> bool:
    """Equal values, through arrays, containers and objects' attributes."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return bool(np.array_equal(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "__dict__") and not isinstance(a, type):
        # What an object computes on first use (e.g. a randomizer's σ) is part of its value.
        for name in dir(type(a)):
            if isinstance(getattr(type(a), name, None), functools.cached_property):
                getattr(a, name), getattr(b, name)
        return same_value(vars(a), vars(b))
    return bool(a == b)


@pytest.mark.parametrize("algo", SERVICE_ALGOS)
def test_the_first_model_is_version_0(algo: str) -> None:
    """What a device reports for a task whose model has not come yet (``ModelCache.versions``)
    without building its policy."""
    assert build_policy(small_config(algo), np.random.default_rng(0)).model.version == 0


@pytest.mark.parametrize("algo", SERVICE_ALGOS)
def test_randomizer_for_makes_the_built_policys_randomizer(algo: str) -> None:
    """``randomizer_for`` — the shuffler's and the device's, made without the analyzer's state
    (``Policy.randomizer_of``) — is the built policy's randomizer: same type, same parameters."""
    config = small_config(algo)
    direct = randomizer_for(config)
    built = build_policy(config, np.random.default_rng(0)).randomizer
    assert same_value(direct, built), (vars(direct), vars(built))


@pytest.mark.parametrize("algo", ALGOS)
def test_the_ledger_has_every_privacy_field(algo: str) -> None:
    e = entry(algo)
    policy = build_policy(small_config(algo), np.random.default_rng(1))
    for transport in e.transports:
        ledger = json.loads(policy.ledger(T=1000, aggregation=transport).model_dump_json())
        assert PRIVACY_FIELDS <= set(ledger), PRIVACY_FIELDS - set(ledger)
        assert ledger["threat_model"] in e.threat_models


@pytest.mark.parametrize("algo", SERVICE_ALGOS)
def test_a_model_survives_its_message(algo: str) -> None:
    e, config, policy, rng = fresh(algo)
    for _ in range(3):
        msg = e.family.publish("t", policy.model)
        assert isinstance(msg, e.family.message)
        back = e.family.read_back(config, K_of(config), e.family.parse(msg.model_dump_json()))
        assert e.family.publish("t", back) == msg
        assert back.version == policy.model.version
        policy.ingest(device_rows(e, policy, ROWS, rng))


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("threat_model", THREAT_MODELS)
def test_tasks_accept_exactly_the_declared_threat_models_and_transports(
        algo: str, threat_model: str) -> None:
    e = entry(algo)
    config = small_config(algo, threat_model)
    for transport in TRANSPORTS:
        declared = e.services and threat_model in e.threat_models and transport in e.transports
        task = {"id": "t", "threat_model": threat_model, "K": K_of(config),
                "aggregation": transport, "policy": config.model_dump()}
        if declared:
            cfg = TaskConfig.model_validate(task)
            assert cfg.entry is e and cfg.family is e.family
        else:
            with pytest.raises(ValidationError):
                TaskConfig.model_validate(task)
