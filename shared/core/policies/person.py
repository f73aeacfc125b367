"""A policy's ledger with its guarantee per person (issue 24; ``accounting.persons``): the
per-report ledger of ``Policy.ledger`` and, beside it, ``per_person`` for at most k reports per
person and period. Shared by the simulator and the analyzer's ``/privacy``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from privbandit.shared.core.accounting import persons
from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger
from privbandit.shared.core.policies.base import Eps0Scheduled

DEFAULT_DELTA = 1e-6


def central_at(policy: Any, aggregation: Aggregation) -> tuple[Callable[[int], tuple[float, float]],
                                                       int] | None:
    """For a shuffled 0/1-report task on fixed batches (sblb, sblb-fixed): the central (ε, δ)
    of one report in a batch of length n, at the task's ε0, and the batch length. None for
    every other policy (their per-person figure needs no such thing, or falls back on the
    local composition, which bounds it)."""
    from privbandit.shared.core.accounting import ledgers

    if not isinstance(policy, Eps0Scheduled) or not policy.schedule.is_fixed:
        return None
    config, eps0_for = policy.config, policy.eps0_for
    length = int(config.batch_size)
    if length <= 1:
        return None
    eps0, delta = float(eps0_for(length)), float(config.delta)
    agg: Aggregation = (
        "secure-sum" if aggregation == "secure-sum" else "reports")

    def at(n: int) -> tuple[float, float]:
        lg = ledgers.shuffle_ledger(eps0, n, delta, d=config.d, m=config.m, aggregation=agg)
        assert lg.central_epsilon is not None  # a shuffle ledger states its central ε
        return lg.central_epsilon, delta

    return at, length


def person_ledger(policy: Any, ledger: PrivacyLedger, k: int | None, period: str = "forever",
                  aggregation: Aggregation = "reports") -> PrivacyLedger:
    """``ledger`` (the policy's, per report) with ``per_person`` for at most ``k`` reports per
    person and ``period`` (k None: no bound, no per-person figures). Pure-ε figures are stated
    at the policy's δ (``DEFAULT_DELTA`` for a policy without one)."""
    # A policy without δ (pure ε, or the uniform logging policy without a config).
    delta = getattr(getattr(policy, "config", None), "delta", None) or DEFAULT_DELTA
    hook = central_at(policy, aggregation) if k is not None else None
    figures = persons.person_figures(
        ledger, k, float(delta), period,
        central_at=None if hook is None else hook[0],
        batch_size=None if hook is None else hook[1])
    return persons.with_person(ledger, figures)
