"""The privacy ledger: what each observer could learn about one user (spec §3 and §6).

A ledger is pure data. Every accountant in this package returns one; the simulator, the
`privbandit privacy` command and the analyzer's `/privacy` endpoint all serialise the same object,
so the JSON field names below are the contract of spec §6 and must not change.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

ThreatModel = Literal["none", "ldp", "shuffle", "central"]
# How a task's reports reach the analyzer: each sealed and shuffled (``reports``), or only
# their batch sums (``secure-sum``: Paillier or Prio3, ``TaskConfig.secure_sum``).
Aggregation = Literal["reports", "secure-sum"]
# The secure sum a ``secure-sum`` task of the services runs (``TaskConfig.secure_sum``).
SecureSum = Literal["prio3", "paillier"]


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

    # Typed reading of the mechanism fields a ledger carries beside spec §6's (its JSON extras,
    # unchanged on the wire): the one place their names are spelled on the reading side, in the
    # spirit of dp_accounting's DpEvent. The per-person accountant and the analyzer read these.

    @property
    def mechanism(self) -> GaussianReports | SkellamSums | None:
        """The noise mechanism the figures were computed for, when an accountant needs more of
        it than the figures (the per-person composition): the Skellam sums of ``ddp-linucb``
        (``skellam_mu`` …), the analytic Gaussian report (``noise_multiplier``), else None."""
        extra = self.model_extra or {}
        if extra.get("skellam_mu") is not None:
            return SkellamSums.model_validate(extra)
        if extra.get("noise_multiplier"):
            return GaussianReports.model_validate(extra)
        return None

    @property
    def levels(self) -> UserLevels | None:
        """``per_user_epsilon``: a task with per-user privacy levels ε_t (HeLDP), their law and
        the fractions so far."""
        value = (self.model_extra or {}).get("per_user_epsilon")
        return None if value is None else UserLevels.model_validate(value)

    @property
    def person(self) -> dict[str, Any] | None:
        """``per_person``: the guarantee per person beside the per-report one
        (``accounting.persons``)."""
        value = (self.model_extra or {}).get("per_person")
        return None if value is None else dict(value)

    @property
    def single_order_epsilon(self) -> float | None:
        """``central_epsilon_single_order``: a central RDP ledger's ε by the single-order
        conversion at α (the looser figure its sentence quotes beside dp-accounting's)."""
        value = (self.model_extra or {}).get("central_epsilon_single_order")
        return None if value is None else float(value)


class _Mechanism(BaseModel):
    # Read from a ledger's fields: the others (the figures, the prose) are ignored here.
    model_config = ConfigDict(extra="ignore", frozen=True)


class GaussianReports(_Mechanism):
    """Each report is an analytic Gaussian mechanism at σ/Δ = ``noise_multiplier``."""

    kind: Literal["gaussian"] = "gaussian"
    noise_multiplier: float


class SkellamSums(_Mechanism):
    """The distributed Skellam mechanism on batch sums (``accounting.skellam``): variance
    ``skellam_mu`` per coordinate at sensitivities (Δ1, Δ2); ``noise`` says who adds it — the
    devices (shares of ``share_variance``, ``honest_shares`` honest ones per batch needed) or
    the two aggregators (``aggregator_variance`` each)."""

    kind: Literal["skellam"] = "skellam"
    skellam_mu: float
    l1_sensitivity: float
    l2_sensitivity: float
    noise: Literal["devices", "aggregators"] = "devices"
    share_variance: float | None = None
    honest_shares: int | None = None
    aggregator_variance: float | None = None


class UserLevels(_Mechanism):
    """Per-user privacy levels: their law (``privacy_levels.parse_levels``) and, for a running
    task, the mean level and the fractions of reports used and declined."""

    model_config = ConfigDict(extra="allow", frozen=True)

    distribution: str | None = None


# What the parties between the devices and the public see of a secure-sum task (issue 23 item 4).
# A ledger built without a transport states the transport-free sentence; the analyzer passes
# its task's transport to ``Policy.ledger`` (``secure_sum``), which states that one instead.
SECURE_SUM_OBSERVERS_GENERIC = (
    "the secure sum shows the analyzer and the public only the batch sums and the models")
SECURE_SUM_OBSERVERS: dict[SecureSum, str] = {
    "prio3": (
        "the shuffler (Prio3 leader) sees one secret share of each report (statistically "
        "hiding), its own verification messages and which reports form a batch; the analyzer "
        "(Prio3 helper) sees the other share, the verification messages and the batch sum; the "
        "public sees the models (the shuffler and the analyzer must not collude)"),
    "paillier": (
        "the shuffler sees only Paillier ciphertexts and multiplies them; the analyzer and the "
        "public see the batch sums and the models"),
}


def observers_sentence(secure_sum: SecureSum | None) -> str:
    """What the parties between the devices and the public see of a secure sum run by
    ``secure_sum`` (the task's transport, ``TaskConfig.secure_sum``); None (the simulator, the
    command line: no transport chosen) states the transport-free sentence."""
    return SECURE_SUM_OBSERVERS_GENERIC if secure_sum is None else SECURE_SUM_OBSERVERS[secure_sum]


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
