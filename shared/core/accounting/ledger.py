"""The privacy ledger: what each observer could learn about one user (spec §3 and §6).

A ledger is pure data. Every accountant in this package returns one; the simulator, the
`privbandit privacy` command and the analyzer's `/privacy` endpoint all serialise the same object,
so the JSON field names below are the contract of spec §6 and must not change.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

ThreatModel = Literal["none", "ldp", "shuffle", "central"]


class PrivacyLedger(BaseModel):
    """Privacy spent, per observer. Fields that do not apply are ``None`` (JSON ``null``).

    - ``ldp_epsilon`` / ``ldp_delta``: the guarantee of one report against an observer between the
      device and the shuffler (Garcelon threat model "a").
    - ``central_epsilon`` / ``central_delta``: the guarantee against an observer of everything the
      analyzer sees (threat model "b"; in ``central`` mode the trusted curator's (ε, δ) conversion).
    - ``rdp_alpha`` / ``rdp_epsilon``: the Rényi-DP guarantee of ``central`` mode (Azize–Basu).
    - ``accounting``: which bound and which composition produced the figures, in words.
    """

    model_config = ConfigDict(extra="allow")

    threat_model: ThreatModel
    ldp_epsilon: float | None = None
    ldp_delta: float | None = None
    central_epsilon: float | None = None
    central_delta: float | None = None
    rdp_alpha: float | None = None
    rdp_epsilon: float | None = None
    accounting: str = ""


# What the parties between the devices and the public see of a secure-sum task (issue 23 item 4).
# A policy's ledger states the transport-free sentence; the analyzer, which knows the task's
# transport, states its own (``with_secure_sum_observers``).
SECURE_SUM_OBSERVERS_GENERIC = (
    "the secure sum shows the analyzer and the public only the batch sums and the models")
SECURE_SUM_OBSERVERS = {
    "prio3": (
        "the shuffler (Prio3 leader) sees one secret share of each report (statistically "
        "hiding), its own verification messages and which reports form a batch; the analyzer "
        "(Prio3 helper) sees the other share, the verification messages and the batch sum; the "
        "public sees the models (the shuffler and the analyzer must not collude)"),
    "paillier": (
        "the shuffler sees only Paillier ciphertexts and multiplies them; the analyzer and the "
        "public see the batch sums and the models"),
}


def with_secure_sum_observers(ledger: PrivacyLedger, transport: str) -> PrivacyLedger:
    """``ledger`` with the generic observers sentence replaced by ``transport``'s
    (``SECURE_SUM_OBSERVERS``); unchanged where it has none (not a ddp-linucb ledger)."""
    if transport not in SECURE_SUM_OBSERVERS:
        raise ValueError(f"unknown secure-sum transport {transport!r}")
    text = ledger.accounting.replace(SECURE_SUM_OBSERVERS_GENERIC, SECURE_SUM_OBSERVERS[transport])
    return ledger if text == ledger.accounting else ledger.model_copy(update={"accounting": text})


def with_public_warm_start(ledger: PrivacyLedger, rounds: int) -> PrivacyLedger:
    """``ledger`` labelled with a public warm start (issue 44): the policy learned from
    ``rounds`` rounds of a log its operator declared public before its first user. Those rounds
    are not protected (the field says so) and charge nothing to the users' guarantee: the
    warm-start statistics are exact, public inputs to every model, so each model is still
    post-processing of the users' private releases and of public data. ``rounds`` 0: unchanged."""
    if rounds < 0:
        raise ValueError("a public warm start has rounds >= 0")
    if rounds == 0:
        return ledger
    note = (f"public warm start: {rounds} logged rounds the operator declared public are learned "
            "from exactly before the first user; they are not protected and are not charged to "
            "the users' guarantee (the models are post-processing of the users' private releases "
            "and of public data)")
    accounting = f"{ledger.accounting}; {note}" if ledger.accounting else note
    return ledger.model_copy(update={
        "accounting": accounting,
        "public_warm_start": {"rounds": rounds, "privacy": "public", "charged": False},
    })
