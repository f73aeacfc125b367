"""Run audits: ``audit(mechanism, samples, confidence, seed)`` → one result per mechanism.

Each mechanism (``pairs.mechanisms``) gets its own stream: the seed's SeedSequence spawns one
child per mechanism in the order of the list (so a mechanism's result does not depend on which
others run), and that child two, for D₀ and D₁. ``samples`` is the number of outputs drawn on
each input; half of them choose the test, half measure it (``bounds.split_audit``).
``audit_task`` audits one task's own report instead: the mechanism its config names
(``pairs.ldp_report``), from the seed's SeedSequence alone.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from privbandit.shared.core.audit.bounds import split_audit
from privbandit.shared.core.audit.pairs import Mechanism, ldp_report, mechanisms

DEFAULT_SAMPLES = 200_000
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class AuditResult:
    """One row of ``privbandit audit``'s output (``--json``: these fields)."""

    mechanism: str
    family: str
    claimed_epsilon: float
    delta: float
    audited_epsilon_lower: float
    samples: int
    confidence: float
    tight: bool
    attained: float | None
    false_positive_rate: float
    false_negative_rate: float
    cpu_seconds: float
    planted: str | None
    note: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def names() -> list[str]:
    """The auditable mechanisms, in the order ``all`` runs them."""
    return list(mechanisms())


def audit(mechanism: str = "all", samples: int = DEFAULT_SAMPLES,
          confidence: float = DEFAULT_CONFIDENCE, seed: int = 0, plant: bool = False,
          progress: Callable[[str], None] | None = None) -> list[AuditResult]:
    """Audit ``mechanism`` (a name of ``names()`` or ``"all"``): ``samples`` outputs on each of
    its two inputs, ε_lo at ``confidence``. ``plant``: run the planted-bug variant (the claim
    stays the honest one's). ``progress`` is called with each mechanism's name when it starts."""
    table = mechanisms()
    if mechanism != "all" and mechanism not in table:
        raise ValueError(f"unknown mechanism {mechanism!r}; known: all, {', '.join(table)}")
    _check(samples, confidence)
    streams = dict(zip(table, np.random.SeedSequence(seed).spawn(len(table)), strict=True))
    chosen = list(table) if mechanism == "all" else [mechanism]
    out = []
    for name in chosen:
        if progress is not None:
            progress(name)
        out.append(_audit_one(table[name], streams[name], samples, confidence, plant))
    return out


def audit_task(policy: Any, samples: int = DEFAULT_SAMPLES,
               confidence: float = DEFAULT_CONFIDENCE, seed: int = 0,
               plant: bool = False) -> AuditResult:
    """Audit the report of a task whose policy config is ``policy`` (an ``ldp-linucb`` config,
    a task's ``policy``): the mechanism that config names — the Gaussian report or PrivUnit2 —
    at its own d, ε (δ), encoding and intercept (``pairs.ldp_report``), against its ledger."""
    if getattr(policy, "algo", None) != "ldp-linucb":
        raise ValueError("a task's own report is audited for ldp-linucb tasks; for the other "
                         "policies, audit their mechanism by name (--mechanism, --list)")
    _check(samples, confidence)
    return _audit_one(functools.partial(ldp_report, policy), np.random.SeedSequence(seed),
                      samples, confidence, plant)


def _check(samples: int, confidence: float) -> None:
    if samples < 8:
        raise ValueError(f"need at least 8 samples per input, got {samples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")


def _audit_one(build: Callable[[bool], Mechanism], stream: np.random.SeedSequence, samples: int,
               confidence: float, plant: bool) -> AuditResult:
    """One mechanism's row: ``samples`` outputs on each input, drawn from two children of
    ``stream``."""
    start = time.process_time()
    mech = build(plant)
    s0, s1 = (np.random.default_rng(s) for s in stream.spawn(2))
    result = split_audit(mech.sample(0, samples, s0), mech.sample(1, samples, s1),
                         mech.delta, confidence)
    return AuditResult(
        mechanism=mech.name, family=mech.family, claimed_epsilon=mech.claimed_epsilon,
        delta=mech.delta, audited_epsilon_lower=result.epsilon_lower, samples=samples,
        confidence=confidence, tight=mech.tight, attained=mech.attained,
        false_positive_rate=result.false_positive_rate,
        false_negative_rate=result.false_negative_rate,
        cpu_seconds=time.process_time() - start, planted=mech.planted, note=mech.note)
