"""What each party of a secure-sum task sees, as the analyzer's ledger states it (issue 23 item
4): a ddp-linucb task's ledger names its own transport's view — Prio3 (one share per report at
the shuffler) or Paillier (ciphertexts) — and the simulator's, which has no transport, neither."""

from __future__ import annotations

from pathlib import Path

import pytest

from privbandit.shared.core.accounting.ledger import (
    SECURE_SUM_OBSERVERS,
    SECURE_SUM_OBSERVERS_GENERIC,
    with_secure_sum_observers,
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


def test_the_policy_ledger_is_transport_free_and_each_transport_has_its_own() -> None:
    ledger = build_policy(make_config("ddp-linucb", d=3, batch_size=10)).ledger()
    assert SECURE_SUM_OBSERVERS_GENERIC in ledger.accounting
    for transport, sentence in SECURE_SUM_OBSERVERS.items():
        stated = with_secure_sum_observers(ledger, transport)
        assert sentence in stated.accounting
        assert SECURE_SUM_OBSERVERS_GENERIC not in stated.accounting
        assert stated.central_epsilon == ledger.central_epsilon
    with pytest.raises(ValueError, match="transport"):
        with_secure_sum_observers(ledger, "rot13")
    sblb = build_policy(make_config("sblb", d=3, eps0=4.0, batch_size=10)).ledger(
        aggregation="secure-sum")
    assert with_secure_sum_observers(sblb, "prio3") is sblb  # no ddp sentence: unchanged
