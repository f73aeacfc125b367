"""Wire messages of the privbandit protocol, version 1 (spec §4).

Every request and response of the three services is one of these pydantic v2 models: strict types,
no unknown fields, finite numbers, bounded lengths and dimensions. Binary fields travel as
unpadded-or-padded URL-safe base64 strings.

Report plaintext (inside HPKE, never JSON): 16-byte random report id ‖ the randomizer's wire form of
the report row (``Randomizer.to_bytes``). No device id, no timestamp, no decision id. Multi-armed
tasks use the same envelope with the row of ``shared.core.randomizers.arms`` (arm as uint16, then
ε_t and/or p as float64 where the task's layout has them, then the value).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, model_validator

from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger

PROTOCOL_VERSION = "v1"
REPORT_ID_BYTES = 16
MAX_DIM = 64
MAX_ARMS = 1024
MAX_CIPHERTEXT_BYTES = 65536
MAX_REPORTS_PER_UPLOAD = 1000
MAX_BATCH = 100_000
TASK_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"

TaskId = Annotated[str, Field(pattern=TASK_ID_PATTERN)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
HexId = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
# A decision id: opaque base64url (no padding), issued by the device, which seals the decision's
# state in it (``services.device.decision_ids``). Its length grows with that state; the largest,
# a two-point BCO task at d = 10⁴ (3·10⁴ + 1 numbers), is about 320,000 characters.
MAX_DECISION_ID = 400_000
DecisionId = Annotated[str, Field(min_length=1, max_length=MAX_DECISION_ID,
                                  pattern=r"^[A-Za-z0-9_-]+$")]

_B64 = re.compile(r"^[A-Za-z0-9_-]*={0,2}$")


def b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


def b64decode(text: str) -> bytes:
    if not _B64.match(text):
        raise ValueError("not URL-safe base64")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _check_b64(max_bytes: int) -> Callable[[str], str]:
    def check(text: str) -> str:
        raw = b64decode(text)
        if len(raw) == 0 or len(raw) > max_bytes:
            raise ValueError(f"must decode to 1..{max_bytes} bytes")
        return text

    return check


Ciphertext = Annotated[
    str, Field(max_length=4 * MAX_CIPHERTEXT_BYTES // 3 + 4),
    AfterValidator(_check_b64(MAX_CIPHERTEXT_BYTES)),
]
EncapsulatedKey = Annotated[str, Field(max_length=128), AfterValidator(_check_b64(96))]


# A batch length as a JSON object's key (a string on the wire, an int in Python).
BatchLengthKey = Annotated[int, Strict(False), Field(ge=1, le=MAX_BATCH)]


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# ---------------------------------------------------------------------------------------------
# Errors


class ErrorBody(Message):
    code: str = Field(description="machine-readable error code, e.g. 'batch_too_small'")
    message: str = Field(description="what went wrong, for a human")


# ---------------------------------------------------------------------------------------------
# Analyzer


class HpkeConfig(Message):
    """The analyzer's HPKE public configuration (RFC 9180 base mode)."""

    key_id: int = Field(ge=0, le=255)
    kem: Literal["DHKEM(X25519, HKDF-SHA256)"] = "DHKEM(X25519, HKDF-SHA256)"
    kdf: Literal["HKDF-SHA256"] = "HKDF-SHA256"
    aead: Literal["AES-128-GCM"] = "AES-128-GCM"
    public_key: EncapsulatedKey


class TaskInfo(Message):
    """Public parameters of one task: enough for a device to decide, randomise and encrypt."""

    id: TaskId
    threat_model: Literal["none", "ldp", "shuffle", "central"]
    algo: str
    d: int | None = Field(ge=1, le=MAX_DIM, description="feature dimension; null for a "
                          "multi-armed task (decide takes no features); for a BCO task "
                          "(bco, ldp-bco, bco2, ldp-bco2) the dimension of the decision set")
    K: int = Field(ge=2, le=MAX_ARMS)
    batch_size: int = Field(ge=1, le=MAX_BATCH)
    aggregation: Aggregation = "reports"
    secure_sum: Literal["prio3", "paillier"] | None = Field(
        None, description="a secure-sum task's transport: prio3 (reports secret-shared with a "
        "validity proof, POST /v1/tasks/{task}/prio3-reports) or paillier (encrypted counts)")
    policy: dict[str, Any] = Field(description="the task's full policy configuration")
    eps0_by_batch_size: dict[BatchLengthKey, FiniteFloat] | None = Field(
        None, max_length=MAX_BATCH, description="sblb, sblb-fixed: ε0 for each batch length "
        "of the task's schedule (one under a fixed schedule), as the analyzer's accountant finds "
        "it from a central target (or the config's fixed eps0; issue 22). Under a growing "
        "schedule a device sizes a report for the largest length not above the newest model's "
        "batch_size (else the first), randomises at its ε0 and states that length with the "
        "report; null for other policies")
    contributions: dict[str, Any] | None = Field(
        None, description="the bound on each person's reports (issue 24): {k, period_seconds} "
                          "(period_seconds null: forever); null when the task bounds no one, "
                          "else feedback must carry the person's user key")

    @property
    def max_batch(self) -> int:
        """The longest batch of the task's schedule (``policy.batch_schedule``, issue 22; a
        fixed schedule's ``batch_size``)."""
        from privbandit.shared.core.schedule import BatchSchedule

        spec = self.policy.get("batch_schedule")
        return BatchSchedule.parse(str(spec)).max_size if spec else self.batch_size


class ModelMessage(Message):
    """A published model: devices choose argmax ⟨x, θ̃⟩ + β ‖x‖_{V⁻¹}. ETag = version."""

    task: TaskId
    version: int = Field(ge=0)
    theta: list[FiniteFloat] = Field(max_length=MAX_DIM)
    V: list[list[FiniteFloat]] = Field(max_length=MAX_DIM)
    beta: FiniteFloat = Field(ge=0)
    reports: int = Field(ge=0, description="reports counted into this model")
    batch_size: int | None = Field(
        None, ge=1, le=MAX_BATCH, description="a growing batch schedule (ddp-linucb, sblb, "
        "sblb-fixed): the batch length l the reports of this model's users are sized for "
        "(ddp-linucb: their Skellam share has variance μ/⌈γl⌉; sblb: their ε0 is the largest "
        "whose batch of l meets the task's central ε; issue 22); null: the task's batch_size")


class GLBModelMessage(ModelMessage):
    """A published model of an ``ldp-glb`` task (Zheng et al. Alg. 3): devices choose as for
    ``ModelMessage`` and anchor their report at ``theta_hat``, the online-gradient-descent
    iterate θ̂ (‖θ̂‖ ≤ S): z = ⟨x, θ̂⟩ and the gradient (g(z) − y) x. The report names this
    model's version. ETag = version."""

    theta_hat: list[FiniteFloat] = Field(min_length=1, max_length=MAX_DIM)


Probability = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


class ArmModelMessage(Message):
    """A published model of a multi-armed task; a device picks its arm locally from exactly one of:
    ``indices`` (argmax, ties to the lowest arm; null = +∞, an arm to pull now), ``probabilities``
    (Tsallis-INF: sample a ~ p with the device's own uniform, inverse CDF; the report carries
    p_a) or ``arm`` (AdaR-UCB: the current episode's arm). ETag = version."""

    task: TaskId
    version: int = Field(ge=0)
    reports: int = Field(ge=0, description="reports counted into this model")
    indices: list[FiniteFloat | None] | None = Field(None, min_length=2, max_length=MAX_ARMS)
    probabilities: list[Probability] | None = Field(None, min_length=2, max_length=MAX_ARMS)
    arm: int | None = Field(None, ge=0, lt=MAX_ARMS)

    @model_validator(mode="after")
    def _one_rule(self) -> ArmModelMessage:
        given = [self.indices is not None, self.probabilities is not None, self.arm is not None]
        if sum(given) != 1:
            raise ValueError("an arm model has exactly one of indices, probabilities, arm")
        if self.probabilities is not None and not sum(self.probabilities) > 0:
            raise ValueError("probabilities must not all be 0")
        return self

    def arms(self) -> int | None:
        """K, when the model lists every arm."""
        vec = self.indices if self.indices is not None else self.probabilities
        return None if vec is None else len(vec)


class PhaseModelMessage(Message):
    """A published phase of an ``adar-gope`` task (Azize & Basu Alg. 3 on the task's fixed arms,
    rebuilt from its ``arm_seed``): a device draws its arm from ``weights`` over ``support``
    with its own uniform (inverse CDF, as for ``ArmModelMessage.probabilities``) and reports
    (arm, ``phase``, reward). ``counts`` are the planned plays T_ℓ(a) of the support arms; the
    phase ends after ``length`` = Σ counts counted reports (null: one arm is left, played for
    ever). ETag = version (one per phase)."""

    task: TaskId
    version: int = Field(ge=0)
    reports: int = Field(ge=0, description="reports counted before this phase began")
    phase: int = Field(ge=1, description="ℓ: reports name it")
    beta: FiniteFloat = Field(gt=0, description="β_ℓ = 2^−ℓ, the phase's accuracy")
    active: list[Annotated[int, Field(ge=0, lt=MAX_ARMS)]] = Field(min_length=1,
                                                                 max_length=MAX_ARMS)
    support: list[Annotated[int, Field(ge=0, lt=MAX_ARMS)]] = Field(min_length=1,
                                                                  max_length=MAX_ARMS)
    weights: list[Probability] = Field(min_length=1, max_length=MAX_ARMS,
                                       description="π_ℓ on support (sums to 1)")
    counts: list[Annotated[int, Field(ge=1)]] = Field(min_length=1, max_length=MAX_ARMS)
    length: int | None = Field(None, ge=1, description="Σ counts; null with one arm left")

    @model_validator(mode="after")
    def _consistent(self) -> PhaseModelMessage:
        if not len(self.support) == len(self.weights) == len(self.counts):
            raise ValueError("support, weights and counts must have one entry per support arm")
        if not set(self.support) <= set(self.active):
            raise ValueError("the support must be a subset of the active arms")
        if not sum(self.weights) > 0:
            raise ValueError("weights must not all be 0")
        return self


class BCOModelMessage(Message):
    """A published model of a bandit-convex-optimisation task: the point y and what the device
    needs to play around it with its own unit direction u (``shared.core.policies.bco_model``):
    one point (``A``, ``delta``): x = y + δ A u; two points (``rho``): x = y ± ρu. ETag =
    version; reports carry the version (``protocol.md``: BCO report rows)."""

    task: TaskId
    version: int = Field(ge=0)
    reports: int = Field(ge=0, description="reports counted into this model")
    y: list[FiniteFloat] = Field(min_length=1, max_length=MAX_DIM)
    radius: FiniteFloat = Field(gt=0, description="R: the decision set is the ball R·𝔹")
    A: list[list[FiniteFloat]] | None = Field(None, max_length=MAX_DIM,
                                              description="one point: the exploration matrix")
    delta: FiniteFloat | None = Field(None, gt=0, description="one point: δ")
    rho: FiniteFloat | None = Field(None, gt=0, description="two points: ρ")

    @model_validator(mode="after")
    def _one_kind(self) -> BCOModelMessage:
        one = self.A is not None and self.delta is not None
        if one == (self.rho is not None) or (self.A is None) != (self.delta is None):
            raise ValueError("a BCO model has either (A, delta) or rho")
        d = len(self.y)
        if self.A is not None and (len(self.A) != d or any(len(r) != d for r in self.A)):
            raise ValueError("A must be d×d for d = len(y)")
        return self


# What ``GET /v1/tasks/{task}/model`` and the stream carry: a linear model (with θ̂ for
# ``ldp-glb``), an arm model, a phase model (``adar-gope``) or a BCO model.
AnyModelMessage = (GLBModelMessage | ModelMessage | ArmModelMessage | PhaseModelMessage
                   | BCOModelMessage)


class EncryptedReport(Message):
    """One HPKE ciphertext (base mode): encapsulated key and AEAD ciphertext."""

    key_id: int = Field(ge=0, le=255)
    enc: EncapsulatedKey
    ct: Ciphertext


class BatchUpload(Message):
    """Shuffler → analyzer: exactly l reports in CSPRNG order, nothing else."""

    batch_id: HexId
    reports: list[EncryptedReport] = Field(min_length=1, max_length=MAX_BATCH)


class BatchAck(Message):
    batch_id: HexId
    replayed: bool = Field(description="true when this batch id was already processed")
    counted: int = Field(ge=0, description="reports newly counted from this batch")
    rejected: int = Field(ge=0, description="reports that failed decryption or validation")
    duplicates: int = Field(ge=0, description="reports whose id had already been counted")
    model_version: int = Field(ge=0)
    quarantined: bool = Field(
        False,
        description="true when the whole batch was refused as one (a secure-sum batch whose "
                    "sum, ciphertext or report tags are invalid): nothing of it was counted, "
                    "its reports are in ``rejected``, and its id is processed (re-delivery "
                    "answers ``replayed``)",
    )


class PrivacyReport(Message):
    """The analyzer's privacy ledger for one task, with what it covers."""

    task: TaskId
    ledger: PrivacyLedger
    per_person: dict[str, Any] | None = Field(
        None,
        description="the guarantee per person beside the ledger's per report (issue 24): "
                    "{k, period, ldp_epsilon, ldp_delta, central_epsilon, central_delta, "
                    "rdp_alpha, rdp_epsilon, accounting} for at most k reports per person and "
                    "period, composed; k null when the task bounds no person (no figures)",
    )
    reports_counted: int = Field(ge=0)
    reports_refused: int = Field(
        0, ge=0,
        description="reports the shuffler delivered that were not counted: rejected when "
                    "decoded (decryption or range checks), dropped as a duplicate report id, or "
                    "members of a quarantined secure-sum batch; accepted = counted + refused + "
                    "pending",
    )
    batches: int = Field(ge=0, description="batches processed, quarantined ones included")
    model_version: int = Field(ge=0)


# ---------------------------------------------------------------------------------------------
# Shuffler


class UploadedReport(EncryptedReport):
    """Device → shuffler: one HPKE report as uploaded, with the batch length its noise is sized
    for when the task's ε0 follows a growing batch schedule (sblb, issue 22). The length is for
    the shuffler alone: it refuses a report sized for a longer batch than its next one, and
    forwards only (key id, enc, ct), so the analyzer never learns which report was sized for
    which length (``docs/services.md``, "Batch schedules in the services")."""

    batch_size: int | None = Field(
        None, ge=1, le=MAX_BATCH, description="sblb/sblb-fixed with a growing batch schedule: "
        "the batch length l its ε0 is sized for (the model's ``batch_size``); the shuffler "
        "refuses it if l exceeds the task's next batch (issue 22); never forwarded")


class ReportUpload(Message):
    """Device → shuffler: one or many ciphertexts for one task."""

    reports: list[UploadedReport] = Field(min_length=1, max_length=MAX_REPORTS_PER_UPLOAD)


class ReportsAccepted(Message):
    accepted: int = Field(ge=0, description="new reports made durable")
    duplicates: int = Field(ge=0, description="identical ciphertexts already held")
    refused: int = Field(0, ge=0, description="secure-sum reports refused and not stored: their "
                         "noise share is sized for a longer batch than the task's next one "
                         "(issue 22; an honest device never sends one)")


class TaskQueueStatus(Message):
    task: TaskId
    batch_size: int
    pending: int = Field(description="accepted reports waiting for a batch to fill")
    accepted: int = Field(description="reports accepted since the store was created")
    batches_formed: int
    batches_acknowledged: int
    batches_in_flight: int
    refused_stale_key: int = Field(
        0, description="accepted secure-sum reports dropped because the analyzer's Paillier key "
        "changed (an explicit --init): nobody can decrypt them any more",
    )
    refused_oversized: int = Field(
        0, description="secure-sum reports refused at intake: their noise share was sized for a "
        "longer batch than the task's next one (``ReportsAccepted.refused``)",
    )
    next_batch_size: int | None = Field(
        None, description="the length of the task's next batch under its schedule (issue 22); "
        "batch_size is the first batch's",
    )
    last_error: str | None = Field(
        None, description="the last failure forwarding a batch to the analyzer (None once acked)"
    )


class ShufflerStatus(Message):
    tasks: list[TaskQueueStatus]


# ---------------------------------------------------------------------------------------------
# Device


# A person's opaque key on the device (issue 24): printable ASCII, up to 256 characters.
UserKey = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[\x21-\x7e]+$")]


class DecideRequest(Message):
    """A user's private per-arm features, K rows of d numbers (never leave the device).

    A multi-armed task has no features: its decide request is ``{}`` (features given to one are
    refused with 422 ``unexpected_features``; none given to a linear task: 422
    ``missing_features``)."""

    features: list[list[FiniteFloat]] | None = Field(None, min_length=2, max_length=MAX_ARMS)


class DecideResponse(Message):
    """``points``: a BCO task's point(s) to play (one, or two for a two-point task; ``action`` is
    then 0); null for the bandit tasks. ``propensity``: the probability with which the model
    that decided took ``action`` — 1 for a deterministic argmax (linear, GLB and index models;
    ties go to the lowest index by rule, so the chosen arm still has probability 1), π(a) for
    an arm the device sampled (Tsallis-INF's distribution, uniform before its first report;
    ``adar-gope``'s G-optimal design); null for a BCO task (continuous points: a density, not
    a probability). What off-policy evaluation needs as the logged ``pscore``."""

    decision_id: DecisionId
    action: int = Field(ge=0)
    model_version: int = Field(ge=0)
    points: list[list[FiniteFloat]] | None = Field(None, min_length=1, max_length=2)
    propensity: FiniteFloat | None = Field(None, gt=0.0, le=1.0)


class FeedbackRequest(Message):
    """The reward of a decision; ``epsilon``: the user's own privacy level ε_t for a task with
    per-user levels (``heldp-ucb-l``/``-b``; 0 = she declines, absent = the task's default),
    refused (422) by any other task. The device checks both against the task: a reward in [0, 1]
    unless the task takes unbounded rewards (sigmoid variants), ε_t within the task's range.
    A BCO task takes ``losses`` (one per point played, each in [0, B]) and no reward; a bandit
    task a reward and no losses (422 ``missing_reward`` / ``unexpected_losses`` otherwise)."""

    decision_id: DecisionId
    reward: FiniteFloat | None = Field(None, description="the reward (bandit tasks)")
    epsilon: FiniteFloat | None = Field(None, description="the user's privacy level ε_t")
    losses: list[FiniteFloat] | None = Field(
        None, min_length=1, max_length=2,
        description="a BCO task's loss at each point played, in [0, B] (one or two)")
    user: UserKey | None = Field(
        None,
        description="the person's opaque key (issue 24), required by a task that bounds each "
                    "person's reports (``contributions``; 422 ``missing_user`` without it), "
                    "ignored by the others; it never leaves the device")


class FeedbackResponse(Message):
    """``queued``: the report is in the device's outbox. ``withheld``: the feedback was accepted
    but its person had reached the task's bound, so no report was made (``queued`` false)."""

    queued: bool
    outbox_pending: int = Field(ge=0, description="reports not yet accepted by the shuffler")
    withheld: bool = Field(
        False, description="the person's bound was reached: accepted, no report made")


class DeviceStatus(Message):
    tasks: dict[str, int] = Field(description="cached model version per task")
    feedbacks: int
    outbox_pending: int
    uploaded: int
    dropped: int = Field(
        0, ge=0,
        description="secure-sum reports dropped because they were encrypted under a Paillier key "
                    "the analyzer no longer has (they could never be counted)",
    )
    withheld: int = Field(
        0, ge=0,
        description="feedbacks accepted whose report was withheld: their person had reached "
                    "the task's bound (sent = feedbacks + withheld, refusals aside)",
    )
