"""What each party of a secure-sum task sees, as the analyzer's ledger states it (issue 23 item
4): a ddp-linucb task's ledger names its own transport's view — Prio3 (one share per report at
the shuffler) or Paillier (ciphertexts) — and the simulator's, which has no transport, neither."""

from __future__ import annotations

from pathlib import Path

import pytest

from privbandit.shared.core.accounting.ledger import (
    SECURE_SUM_OBSERVERS,
    SECURE_SUM_OBSERVERS_GENERIC,
)
from privbandit.shared.core.policies import build_policy, make_config

from .support import ddp_prio3_task, settings_for, stack


async def test_the_analyzer_ledger_names_the_prio3_view(tmp_path: Path) -> None:
    task = ddp_prio3_task()
    async with stack(settings_for(tmp_path, [task])) as s:
        report = await s.privacy("ddp")
    text = report.ledger.accounting
    assert SECURE_SUM_OBSERVERS["prio3"] in text
    assert "Paillier" not in text and SECURE_SUM_OBSERVERS_GENERIC not in text


@pytest.mark.parametrize("noise", ["devices", "aggregators"])
def test_the_policy_ledger_is_transport_free_unless_given_a_transport(noise: str) -> None:
    """Without a transport (the simulator) the generic sentence; with one, that transport's
    sentence in its place and the same figures."""
    policy = build_policy(make_config("ddp-linucb", d=3, batch_size=10, noise=noise))
    ledger = policy.ledger()
    assert SECURE_SUM_OBSERVERS_GENERIC in ledger.accounting
    for transport, sentence in SECURE_SUM_OBSERVERS.items():
        stated = policy.ledger(secure_sum=transport)
        assert sentence in stated.accounting
        assert SECURE_SUM_OBSERVERS_GENERIC not in stated.accounting
        assert stated.accounting == ledger.accounting.replace(SECURE_SUM_OBSERVERS_GENERIC,
                                                              sentence)
        assert stated.model_dump(exclude={"accounting"}) == ledger.model_dump(
            exclude={"accounting"})
    sblb = build_policy(make_config("sblb", d=3, eps0=4.0, batch_size=10))
    # No ddp sentence: the transport changes nothing.
    assert sblb.ledger(aggregation="secure-sum", secure_sum="prio3") == sblb.ledger(
        aggregation="secure-sum")
