"""ddp-linucb (shared/core/policies/ddp_linucb.py): estimator, ledger, state, simulate command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from privbandit.cli import main
from privbandit.shared.core.policies import build_policy, make_config
from privbandit.shared.core.randomizers.skellam import clean_statistics


def test_noise_free_sum_recovers_the_statistics() -> None:
    """Fed the exact scaled sum (no rounding, no noise), G̃ and ũ are Σ x xᵀ and Σ r x."""
    policy = build_policy(make_config("ddp-linucb", d=3, batch_size=4, scale=64.0))
    x = np.array([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.6, 0.0, 0.8], [0.0, 0.0, 0.5]])
    r = np.array([1.0, 0.0, 0.5, 0.25])
    stat = policy.config.scale * clean_statistics(x, r, 1.0).sum(axis=0)
    policy.ingest_statistic(stat, 4)
    assert np.allclose(policy.G, x.T @ x)
    assert np.allclose(policy.u, x.T @ r)
    assert policy.reports == 4


def test_ledger_and_aggregation() -> None:
    policy = build_policy(make_config("ddp-linucb", d=5, epsilon=1.0, batch_size=1000,
                                      honest_fraction=0.5, noise="devices"))
    ledger = policy.ledger(T=10**6)
    assert ledger.central_epsilon is not None and ledger.central_epsilon <= 1.0
    assert ledger.ldp_epsilon is None and ledger.threat_model == "shuffle"
    assert ledger.model_dump()["honest_shares"] == 500
    with pytest.raises(ValueError):
        policy.ledger(aggregation="reports")


def test_paper_regularizer_dominates_the_noise() -> None:
    policy = build_policy(make_config("ddp-linucb", d=5, batch_size=100))
    for t in (100, 10_000, 1_000_000):
        assert policy.regularizer(t) >= policy.noise_bound(t) + policy.config.lam


def test_state_round_trip() -> None:
    config = make_config("ddp-linucb", d=3, batch_size=20, regularizer="clip")
    a = build_policy(config)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(20, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    a.ingest(a.randomizer.randomize(x, rng.random(20), rng))
    b = build_policy(config)
    b.set_state(json.loads(json.dumps(a.get_state())))
    assert np.array_equal(a.G, b.G) and a.model.version == b.model.version


def test_simulate_command_with_honest_fraction(tmp_path: Path) -> None:
    out = tmp_path / "ddp.json"
    argv = ["simulate", "--algo", "ddp-linucb", "--epsilon", "1", "--delta", "1e-6",
            "--batch-size", "100", "--honest-fraction", "0.5", "--noise", "devices",
            "--T", "2000", "--d", "3",
            "--K", "5", "--json", str(out), "--no-progress"]
    assert main(argv) == 0
    data = json.loads(out.read_text())
    assert data["params"]["honest_fraction"] == 0.5
    assert data["privacy"]["honest_shares"] == 50
    assert data["privacy"]["central_epsilon"] <= 1.0
    assert main([*argv[:-3], "--aggregation", "reports", "--no-progress"]) == 2


def test_packed_batch_round_trip_and_out_of_range_sum_refused_without_state_change() -> None:
    from privbandit.shared.crypto.slots import SlotRangeError, layout, pack_signed, unpack_signed

    def ingest_plaintexts(policy, plaintexts, lay, n):  # type: ignore[no-untyped-def]
        """The analyzer's order: decode (may refuse), then ingest."""
        sums = unpack_signed(plaintexts, lay, policy.randomizer.sum_bound(n), n_reports=n)
        policy.ingest_statistic(sums, n)

    config = make_config("ddp-linucb", d=3, batch_size=6, epsilon=1.0, noise="devices")
    policy = build_policy(config)
    rz = policy.randomizer
    lay = layout(rz.n, 6, 2 * rz.offset, 1024, offset=rz.offset)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(6, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    rows = [rz.device_report(xi, 0.5) for xi in x]
    total = [sum(col) for col in zip(*(pack_signed(np.asarray(r), lay) for r in rows),
                                     strict=True)]
    ingest_plaintexts(policy, total, lay, 6)
    assert np.allclose(policy.u * rz.scale, np.sum(rows, axis=0)[rz.n_upper:])
    before = json.dumps(policy.get_state())
    # Six reports of value +O everywhere: in the slots, but beyond the honest sum bound.
    forged = np.full(rz.n, rz.offset)
    bad = [sum(col) for col in zip(*(pack_signed(forged, lay) for _ in range(6)), strict=True)]
    assert 6 * rz.offset > rz.sum_bound(6)
    with pytest.raises(SlotRangeError):
        ingest_plaintexts(policy, bad, lay, 6)
    # Bits above the last slot (an overflowed or tampered sum).
    with pytest.raises(SlotRangeError):
        ingest_plaintexts(policy, [total[0] + (1 << (lay.c * lay.slot_bits + 3))], lay, 6)
    assert json.dumps(policy.get_state()) == before


def test_a_ddp_task_is_served_over_the_secure_sum_only() -> None:
    from pydantic import ValidationError

    from privbandit.shared.settings import TaskConfig

    task = TaskConfig(id="ddp", threat_model="shuffle", aggregation="secure-sum",
                      policy={"algo": "ddp-linucb", "d": 5})
    assert task.batch_size == 1000
    with pytest.raises(ValidationError, match="needs secure-sum"):
        TaskConfig(id="ddp", threat_model="shuffle", aggregation="reports",
                   policy={"algo": "ddp-linucb", "d": 5})
    with pytest.raises(ValidationError, match="serves threat model"):
        TaskConfig(id="ddp", threat_model="central", aggregation="secure-sum",
                   policy={"algo": "ddp-linucb", "d": 5})
