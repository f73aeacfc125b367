"""Policy configuration objects (one per policy id of spec §5), in the spirit of MABWiser.

A config is pure, validated data: the simulator builds it from the command line, the services
read it from the task section of the shared config file, and ``build_policy`` turns it into a
policy. ``confidence_scale`` and ``regularizer`` change only the published model (post-processing
of private statistics), never the randomizer or the privacy ledger.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from privbandit.shared.core.accounting.ledger import Aggregation
from privbandit.shared.core.design import DEFAULT_TOL
from privbandit.shared.core.policies.bco_config import (
    BCOOnePointConfig,
    BCOTwoPointConfig,
    LDPBCO2Config,
    LDPBCOConfig,
)
from privbandit.shared.core.policies.mab_config import (
    AdaRUCBConfig,
    HeLDPUCBBConfig,
    HeLDPUCBLConfig,
    LDPMABConfig,
    UCBConfig,
)
from privbandit.shared.core.policies.privacy_params import RenyiDP
from privbandit.shared.core.schedule import BatchSchedule

Regularizer = Literal["paper", "clip"]

# The linear policies' math holds at any d; what grows is the cost (O(d²) memory, O(d³) per model
# update, O(K·d²) per decision, d(d+3)/2 numbers per private report). A log read from files
# (OBD's 80 items, disjoint on 20 user features: d = 1,600) needs more than the wire's 64
# (``protocol.messages.MAX_DIM``), which the services' tasks keep (``settings.TaskConfig``).
MAX_FEATURE_DIM = 4096


def public_warm_start_field() -> Any:
    """``public_warm_start``: rounds of a log the operator declares public, learned from exactly
    before the first user (issue 44; ``LinearPolicy.warm_start``). Off (0) by default: the
    ledger labels them public, not protected and not charged
    (``accounting.ledger.with_public_warm_start``)."""
    return Field(0, ge=0, le=10**7, description="rounds of a log the operator declares public, "
                 "learned from exactly before the first user (simulator: drawn from the "
                 "environment under uniform logging); labelled public in the ledger, not "
                 "protected, not charged (0: none)")


class PolicyConfig(BaseModel):
    """Parameters shared by all linear policies."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    d: int = Field(5, ge=1, le=MAX_FEATURE_DIM, description="feature dimension")
    L: float = Field(1.0, gt=0, description="bound on ||x||")
    S: float = Field(1.0, gt=0, description="bound on ||theta*||")
    reward_sigma: float = Field(0.5, gt=0, description="sub-Gaussian constant of reward noise")
    failure_prob: float = Field(0.05, gt=0, lt=1, description="δ of the confidence set")
    lam: float = Field(1.0, gt=0, description="base ridge regularizer λ")
    confidence_scale: float = Field(1.0, ge=0, description="multiplies β; 1 = the paper's width")


class LinUCBConfig(PolicyConfig):
    """Non-private OFUL (Abbasi-Yadkori et al. 2011), rarely switching when ``switching`` > 0."""

    algo: Literal["linucb"] = "linucb"
    switching: float = Field(0.5, ge=0, description="C: update when det V grows by 1+C (0: always)")


# 'auto' → 'centered' weighs ldp-linucb's (y − ½) x by this: measured best of 0.7, 1, 1.5, 2,
# 2.5, 3 on tuning seeds 100 and 300 (docs/benchmarks/ldp.md, section ldpc).
LDP_CENTERED_U_WEIGHT = 2.0
# ldp-linucb's encodings that centre the reward and need the intercept.
LDP_CENTERED = ("centered", "centered-upper")


def resolve_auto_encoding(data: object, fallback: str, centered_weight: float) -> object:
    """A config's input with encoding 'auto' resolved: 'centered' (its reward weight
    ``centered_weight`` unless u_weight is given) where the contexts have an intercept, else
    ``fallback``; any other input unchanged. Shared by ldp-linucb and ddp-linucb."""
    if not isinstance(data, dict) or data.get("encoding") != "auto":
        return data
    if data.get("intercept") is None:
        return {**data, "encoding": fallback}
    if data.get("u_weight") is None:
        return {**data, "encoding": "centered", "u_weight": centered_weight}
    return {**data, "encoding": "centered"}


def intercept_field(ignored_by: str) -> Any:
    """The ``intercept`` field of a config with centered encodings: c > 0, optional."""
    return Field(None, gt=0, description="c: every context has x[0] = c (a constant feature), "
                 f"which {ignored_by}")


def u_weight_field(description: str) -> Any:
    """The ``u_weight`` field: w in (0, 100], 1 by default."""
    return Field(1.0, gt=0, le=100, description=description)


def centered_intercept(encoding: str, intercept: float | None, L: float,
                       centered: tuple[str, ...]) -> float | None:
    """The intercept a randomizer uses: c under one of the ``centered`` encodings (ValueError
    unless 0 < c ≤ L: x[0] = c must be a feature of a context of norm ≤ L), None otherwise."""
    if encoding not in centered:
        return None
    if intercept is None or intercept > L:
        raise ValueError(f"the {encoding} encoding needs the intercept c (every context has "
                         f"x[0] = c, 0 < c <= L = {L:g}); got {intercept!r}")
    return intercept


class LDPLinUCBConfig(PolicyConfig):
    """Zheng et al. Alg. 5: (ε, δ)-LDP Gaussian reports."""

    algo: Literal["ldp-linucb"] = "ldp-linucb"
    epsilon: float = Field(1.0, gt=0, description="LDP ε per report")
    delta: float = Field(1e-6, gt=0, lt=1, description="LDP δ per report")
    update_every: int = Field(
        100, ge=1, description="publish a model every this many reports (paper: 1)"
    )
    horizon: int = Field(1_000_000, ge=1, description="T in Υ_t's ln(2T/α) (Alg. 5 line 3)")
    regularizer: Literal["paper", "clip", "noise"] = "paper"
    noise_ridge: float = Field(
        1.0, ge=0, description="regularizer 'noise': c_t = λ + κ·2σ√(t d), κ this factor"
    )
    perturb: float = Field(
        0.0, ge=0, description="publish θ̃ + ρ·σ√(t(1 + ‖θ̃‖²))·Ṽ⁻¹ξ, ξ ~ N(0, I) drawn by the "
        "analyzer per publication (ρ this factor; 0: θ̃ itself)"
    )
    encoding: Literal["plain", "frobenius", "centered", "centered-upper", "auto"] = Field(
        "plain", description="the report (randomizers.gaussian): 'plain' (upper(x xᵀ), y x) "
        "(Alg. 5), 'frobenius' (off-diagonals × √2, y x × u_weight), 'centered' (frobenius "
        "with (y − ½) x; needs the intercept), 'centered-upper' (off-diagonals once, "
        "(y − ½) x × u_weight; needs the intercept) or 'auto' (centered when the intercept is "
        "given, else plain)"
    )
    intercept: float | None = intercept_field("the centered encodings need; the others ignore it")
    u_weight: float = u_weight_field(
        "weight w of the reward part of the report (not 'plain'); 'auto' → 'centered' sets "
        "LDP_CENTERED_U_WEIGHT unless given"
    )

    mechanism: Literal["gaussian", "privunit"] = Field(
        "gaussian", description="the report's randomizer: 'gaussian' (Alg. 5's Gaussian noise, "
        "(ε, δ)-LDP) or 'privunit' (PrivUnit2 on the same report vector, pure ε-LDP: "
        "randomizers.privunit; delta unused)"
    )

    @model_validator(mode="before")
    @classmethod
    def _resolve_encoding(cls, data: object) -> object:
        """encoding 'auto' → 'centered' (with w = LDP_CENTERED_U_WEIGHT unless given) where the
        contexts have an intercept, else 'plain'."""
        return resolve_auto_encoding(data, "plain", LDP_CENTERED_U_WEIGHT)

    @model_validator(mode="after")
    def _check_encoding(self) -> LDPLinUCBConfig:
        centered_intercept(self.encoding, self.intercept, self.L, LDP_CENTERED)
        if self.encoding == "plain" and self.u_weight != 1.0:
            raise ValueError("the plain encoding (Alg. 5's report) has u_weight 1")
        return self

    @property
    def encoding_intercept(self) -> float | None:
        """The intercept the randomizer uses: c under a centered encoding, None otherwise."""
        return centered_intercept(self.encoding, self.intercept, self.L, LDP_CENTERED)


class ScheduledBatches(BaseModel):
    """A batch schedule (``core.schedule``) for a config with ``batch_size`` and
    ``batch_schedule`` fields: one spelling per schedule, and the ``schedule`` a policy, the
    simulator and the shuffler read (``config.schedule``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _normalize_schedule(cls, data: object) -> object:
        """'fixed:L' becomes batch_size = L; a geometric schedule sets batch_size to its first
        batch (what the shuffler fills first)."""
        if not isinstance(data, dict) or data.get("batch_schedule") is None:
            return data
        text = str(data["batch_schedule"]).strip()
        if text.startswith("geometric:auto,"):
            text = cls._auto_first_batch(data, text)
        schedule = BatchSchedule.parse(text)
        return {**data, "batch_size": schedule.first,
                "batch_schedule": None if schedule.is_fixed else schedule.spec()}

    @classmethod
    def _auto_first_batch(cls, data: dict[str, object], text: str) -> str:
        raise ValueError(f"{text!r}: an automatic first batch is not defined for this policy")

    @property
    def schedule(self) -> BatchSchedule:
        batch_schedule = getattr(self, "batch_schedule", None)
        if batch_schedule is None:
            return BatchSchedule(getattr(self, "batch_size"))  # noqa: B009  # the config's field
        return BatchSchedule.parse(batch_schedule)


class SBLBConfig(ScheduledBatches, PolicyConfig):
    """Garcelon et al. Alg. 1 (SBLB): 0/1 randomizer, shuffler batches, det-based switching.

    Privacy is given either as the LDP ε0 of one report (``eps0``, fixed: the paper's form; the
    central ε follows from the batch length) or as the central target ``epsilon`` at ``delta``
    after shuffling: then each batch length l gets the largest ε0 meeting it under the accountant
    of ``accountant`` (``accounting.shuffle_schedule.max_eps0``), announced with the model whose
    users fill that batch. Neither given: ε0 = 1 (the former default)."""

    algo: Literal["sblb"] = "sblb"
    eps0: float | None = Field(None, gt=0, description="LDP ε0 of one report (fixed)")
    m: int = Field(1, ge=1, le=64, description="bits per encoded coordinate")
    batch_size: int = Field(1000, ge=1, description="shuffler batch length l")
    delta: float = Field(1e-6, gt=0, lt=1, description="δ of the central (shuffle) guarantee")
    eta: float = Field(0.5, ge=0, description="switching: update when det Ṽ grows by 1+η")
    regularizer: Literal["paper", "clip", "noise"] = "paper"
    epsilon: float | None = Field(
        None, gt=0, description="central ε target at δ after shuffling (instead of eps0): ε0 per "
        "batch length is the largest meeting it"
    )
    accountant: Aggregation = Field(
        "reports", description="with epsilon: the aggregation whose central accountant sizes ε0 "
        "(reports: FMT whole-report bound, sound for both; secure-sum: the sum-only bound, only "
        "for tasks whose shuffler releases batch sums)"
    )
    batch_schedule: str | None = Field(
        None, description="None: fixed batches of batch_size; 'geometric:L0,GROWTH,CAP' "
        "(``core.schedule``; batch_size is then L0); 'fixed:L' is read as batch_size = L"
    )
    noise_ridge: float = Field(
        1.0, ge=0, description="regularizer 'noise': c_t = λ + κ·2σ_t√d, κ this factor"
    )


    @model_validator(mode="after")
    def _one_privacy_parameter(self) -> SBLBConfig:
        if self.eps0 is not None and self.epsilon is not None:
            raise ValueError("give eps0 (fixed LDP ε0) or epsilon (central target), not both")
        return self

    @property
    def fixed_eps0(self) -> float | None:
        """ε0 of every report when it does not follow the schedule (None: it does)."""
        if self.epsilon is not None:
            return None
        return 1.0 if self.eps0 is None else self.eps0


class SBLBFixedConfig(SBLBConfig):
    """Garcelon et al. Alg. 4 (App. C): the model is updated after every shuffler batch."""

    algo: Literal["sblb-fixed"] = "sblb-fixed"  # type: ignore[assignment]  # its own policy id


class AdaROFULConfig(RenyiDP, PolicyConfig):
    """Azize & Basu Alg. 4: (α, ε)-RDP via Gaussian noise per adaptive episode."""

    algo: Literal["adar-oful"] = "adar-oful"
    switching: float = Field(0.5, gt=0, description="C of the doubling schedule (line 6)")
    first_episode: int = Field(
        1, ge=1, description="reports before the first release (paper: 1, switch from the "
        "start); 'auto' is read as ⌈ADAR_AUTO_FIRST_PER_SIGMA · σ_Y/L⌉ (``_auto_first_episode``)"
    )
    public_warm_start: int = public_warm_start_field()


    @property
    def noise_sigma(self) -> float:
        """σ_Y = √(α Δ² / (2ε)) with Δ = L (rewards in [0, 1]): the Gaussian mechanism's
        (α, ε)-RDP noise per episode (RDP of the Gaussian: α Δ²/(2σ²))."""
        return math.sqrt(self.alpha * self.L**2 / (2 * self.epsilon))

    @model_validator(mode="before")
    @classmethod
    def _auto_first_episode(cls, data: object) -> object:
        """first_episode 'auto' → ⌈A · σ_Y/L⌉ = ⌈A √(α/(2ε))⌉ reports, A =
        ``ADAR_AUTO_FIRST_PER_SIGMA``: the first release is useful once its signal u, ≈ t/d per
        direction, stands well above the noise vector Y₁ (sd σ_Y per coordinate), i.e. t
        proportional to σ_Y (measured best: 150–300 at central ε = 1, where this gives 227;
        docs/benchmarks/adar.md). Resolved here, like ddp-linucb's 'geometric:auto',
        so the config, the JSON and the task state carry the length actually used."""
        if not isinstance(data, dict) or data.get("first_episode") != "auto":
            return data

        def get(name: str) -> float:
            value = data.get(name, cls.model_fields[name].default)
            if not isinstance(value, int | float | str):  # the field's own validation says why
                raise ValueError(f"{name} must be a number, not {value!r}")
            return float(value)

        alpha, epsilon = get("alpha"), get("epsilon")
        if alpha <= 1 or epsilon <= 0:  # the fields' own validation says why
            return {**data, "first_episode": 1}
        first = math.ceil(ADAR_AUTO_FIRST_PER_SIGMA * math.sqrt(alpha / (2 * epsilon)))
        return {**data, "first_episode": max(1, first)}


# adar-oful's 'first_episode = auto': the first episode in units of σ_Y/L (``AdaROFULConfig``).
ADAR_AUTO_FIRST_PER_SIGMA = 50.0


# 'geometric:auto,…': the first batch in units of one batch's noise sd (``DDPLinUCBConfig``):
# with the aggregators' noise (issue 40's design, σ_b from 2μ_a) 37.5, measured on tuning seeds
# 101–103 against 50 (issue 44; docs/benchmarks/first-batch.md: first batches of 450 against 603
# on ``linear`` at ε = 1, −31 ± 4 at T = 10⁴ and −24 ± 4 at T = 10⁵, paired); with the devices'
# shares (issue 22's design, σ_b from μ) 50, as measured then.
AUTO_FIRST_PER_SIGMA = 37.5
AUTO_FIRST_PER_SIGMA_DEVICES = 50.0


# 'auto' → 'centered' weighs (r − ½) x by 1.5 (measured best of 1, 1.3, 1.5, 1.7, 2 on three
# tuning seeds; docs/benchmarks/ddp-linucb.md, "the centered encoding").
CENTERED_U_WEIGHT = 1.5




class DDPLinUCBConfig(ScheduledBatches, PolicyConfig):
    """Distributed DP over the secure sum: devices send rounded statistics, each aggregator adds
    Skellam noise to its share of the batch sum (or, ``noise = "devices"``, the devices add
    Skellam shares; ``randomizers.skellam``); the batch sum is central (ε, δ)-DP
    (``accounting.skellam``)."""

    algo: Literal["ddp-linucb"] = "ddp-linucb"
    epsilon: float = Field(1.0, gt=0, description="central ε of the batch sums")
    delta: float = Field(1e-6, gt=0, lt=1, description="central δ of the batch sums")
    batch_size: int = Field(1000, ge=1, description="secure-sum batch length l")
    noise: Literal["aggregators", "devices"] = Field(
        "aggregators", description="who adds the Skellam noise: 'aggregators' (each of the "
        "shuffler and the analyzer adds μ to its aggregate share; no device can lower it) or "
        "'devices' (each device adds a share; holds only while ⌈γ l⌉ devices per batch do, "
        "and needs the wider report range ±O: issue 10's design, the one Paillier supports)"
    )
    honest_fraction: float = Field(
        1.0, gt=0, le=1, description="γ (noise 'devices' only): the guarantee holds if ⌈γ l⌉ "
        "devices per batch add a share"
    )
    scale: float = Field(128.0, ge=1, le=2.0**20, description="quantization scale s")
    eta: float = Field(0.5, ge=0, description="switching: update when det Ṽ grows by 1+η")
    regularizer: Literal["paper", "clip", "noise"] = "paper"
    batch_schedule: str | None = Field(
        None, description="None: fixed batches of batch_size; 'geometric:L0,GROWTH,CAP' "
        "(``core.schedule``; batch_size is then L0; L0 'auto' sizes it from the noise); "
        "'fixed:L' is read as batch_size = L"
    )
    noise_ridge: float = Field(
        1.0, ge=0, description="regularizer 'noise': c_t = λ + κ·2σ_t√d, κ this factor"
    )
    encoding: Literal["upper", "frobenius", "centered", "auto"] = Field(
        "upper", description="released statistics: 'upper' (upper(x xᵀ), r x), 'frobenius' "
        "(off-diagonals × √2, r x × u_weight, exact joint sensitivity), 'centered' (frobenius "
        "with (r − ½) x, needs the intercept; randomizers.skellam) or 'auto' (centered when "
        "the intercept is given, else frobenius)"
    )
    intercept: float | None = intercept_field(
        "the 'centered' encoding needs; the other encodings ignore it")
    intercept_coords: tuple[int, ...] = Field(
        (0,), min_length=1, description="the coordinates E of the intercept: every context has "
        "Σ_{i∈E} x_i = c ((0,): x[0] = c; per-arm (disjoint) features, whose every block starts "
        "with c: the block starts 0, p, 2p, …; randomizers.skellam, *Encodings*); 'centered' "
        "only"
    )
    u_weight: float = u_weight_field(
        "weight w of r x in the released vector (the sensitivity and the noise left on ũ, σ/w, "
        "follow it)"
    )
    batch_weight_power: float = Field(
        0.0, ge=0, le=2, description="p: the estimate weights batch j's sums by (l_j/l_ref)^p, "
        "l_ref the longest batch so far (0: all alike; policies.batched.ScheduledBatchPolicy)"
    )
    public_warm_start: int = public_warm_start_field()


    @model_validator(mode="before")
    @classmethod
    def _resolve_encoding(cls, data: object) -> object:
        """encoding 'auto' → 'centered' where the contexts have an intercept, else 'frobenius'
        (the best encoding the contexts allow; docs/benchmarks/ddp-linucb.md)."""
        return resolve_auto_encoding(data, "frobenius", CENTERED_U_WEIGHT)

    @model_validator(mode="after")
    def _centered_needs_intercept(self) -> DDPLinUCBConfig:
        from privbandit.shared.core.randomizers.skellam import check_intercept_coords

        centered_intercept(self.encoding, self.intercept, self.L, ("centered",))
        coords = check_intercept_coords(self.intercept_coords, self.d)
        if coords != self.intercept_coords:
            raise ValueError("intercept_coords must be increasing, got "
                             f"{list(self.intercept_coords)}")
        return self

    @property
    def encoding_intercept(self) -> float | None:
        """The intercept the randomizer uses: c under 'centered', None otherwise."""
        return centered_intercept(self.encoding, self.intercept, self.L, ("centered",))

    @classmethod
    def _auto_first_batch(cls, data: dict[str, object], text: str) -> str:
        """'geometric:auto,G,CAP' → L0 = ⌈A · σ_b⌉ with σ_b the per-entry standard deviation (real
        units) of one batch's central Skellam noise at this (ε, δ)
        (``randomizers.skellam.batch_noise_sd``: √(2μ_a)/s when the two aggregators each add μ_a,
        √μ/s when the devices add shares) and A = ``AUTO_FIRST_PER_SIGMA`` (37.5, the aggregators'
        design; issue 44, docs/benchmarks/first-batch.md) or ``AUTO_FIRST_PER_SIGMA_DEVICES`` (50,
        issue 22's): the first model is useful once its signal, ≈ l/d per direction, stands well
        above a batch's noise matrix, ≈ 2σ_b√d — a first batch proportional to σ_b (measured best: ≈
        600 at ε = 1, ≈ 150 at ε = 4, ≈ 1200 at ε = 0.5; docs/benchmarks/ddp-linucb.md). With the
        ``"frobenius"`` encoding σ_b is that of a released coordinate (the diagonal's; off-diagonal
        entries carry σ_b/√2): with the devices' shares 497 at ε = 1, where first batches of 350,
        497 and 650 learned alike (docs/benchmarks/ddp-linucb.md, "a tighter sensitivity"). With the
        aggregators' noise at ε = 1: 453 (centered, ``linear``), 527 (frobenius). The cap is raised
        to L0 if below it."""
        from privbandit.shared.core.randomizers.skellam import batch_noise_sd

        def get(name: str) -> float:
            value = data.get(name, cls.model_fields[name].default)
            if not isinstance(value, int | float | str):  # the field's own validation says why
                raise ValueError(f"{name} must be a number, not {value!r}")
            return float(value)

        growth, _, cap = text.removeprefix("geometric:auto,").partition(",")
        # This validator may run before _resolve_encoding: resolve 'auto' the same way here.
        resolved = resolve_auto_encoding(data, "frobenius", CENTERED_U_WEIGHT)
        assert isinstance(resolved, dict)
        data = resolved
        encoding = str(data.get("encoding", cls.model_fields["encoding"].default))
        intercept = get("intercept") if encoding == "centered" else None
        noise = str(data.get("noise", cls.model_fields["noise"].default))
        coords = data.get("intercept_coords", (0,))
        coords = tuple(coords) if isinstance(coords, list | tuple) and coords else (0,)
        sigma = batch_noise_sd(int(get("d")), get("epsilon"), get("delta"), get("scale"),
                               get("L"), encoding, get("u_weight"), intercept, noise, coords)
        per_sigma = AUTO_FIRST_PER_SIGMA if noise == "aggregators" else AUTO_FIRST_PER_SIGMA_DEVICES
        first = math.ceil(per_sigma * sigma)
        return f"geometric:{first},{growth},{max(first, int(cap))}"


class LDPGLBConfig(LDPLinUCBConfig):
    """Zheng et al. Alg. 3: GLOC with (ε, δ)-LDP reports and noisy online gradient descent
    (``policies.ldp_glb``)."""

    algo: Literal["ldp-glb"] = "ldp-glb"  # type: ignore[assignment]  # its own policy id
    S: float = Field(3.0, gt=0, description="radius of W ∋ θ* (logistic env: ‖θ*‖ = 2√2)")
    ogd_step: float | None = Field(None, gt=0, description="ζ (default 2S/((L + σ√d)√T))")


    @model_validator(mode="after")
    def _own_report(self) -> LDPGLBConfig:
        """ldp-glb's report is its own (``randomizers.glb``): it carries ldp-linucb's encoding
        fields (an ``intercept`` the simulator passes is kept, unused) but takes no encoding."""
        if self.encoding != "plain" or self.u_weight != 1.0:
            raise ValueError("ldp-glb has its own report (randomizers.glb): encoding must be "
                             f"'plain' and u_weight 1, got {self.encoding!r}, {self.u_weight:g}")
        if self.mechanism != "gaussian":
            raise ValueError("ldp-glb's report is Gaussian (randomizers.glb): mechanism must be "
                             f"'gaussian', got {self.mechanism!r}")
        return self


class DDPGLBConfig(DDPLinUCBConfig):
    """Distributed-DP GLM (logistic) bandit (``policies.ddp_glb``): ddp-linucb's secure sum and
    Skellam noise over the GLM statistics (upper(4g'(z) x xᵀ), (g'(z) z + y − g(z)) x) at the
    served anchor z = ⟨x, θ̂⟩ (``randomizers.glm_skellam``). Only the ``"upper"`` encoding: its
    bounds hold for these statistics, the joint ones of the others do not."""

    algo: Literal["ddp-glb"] = "ddp-glb"  # type: ignore[assignment]  # its own policy id
    S: float = Field(3.0, gt=0, description="bound on ‖θ*‖ (logistic env: ‖θ*‖ = 2√2); the "
                     "published anchor θ̂ is projected on this ball")
    reward_sigma: float = Field(
        2.0, gt=0, description="sub-Gaussian constant of the weighted working response: "
        "4(y − g)/√(4g') has variance 4")
    encoding: Literal["upper", "frobenius"] = Field(  # a subset of ddp-linucb's
        "upper", description="the released statistics' encoding: 'upper' or 'frobenius' "
        "(off-diagonals × √2, the GLM statistics' own joint bound; randomizers.glm_skellam); "
        "'auto' is 'frobenius'")

    @model_validator(mode="before")
    @classmethod
    def _resolve_encoding(cls, data: object) -> object:
        """'auto' is 'frobenius' (the tighter of the GLM statistics' two encodings); an intercept
        and its coordinates the simulator passes are dropped (no centered encoding here)."""
        if not isinstance(data, dict):
            return data
        out = {k: v for k, v in data.items() if k not in ("intercept", "intercept_coords")}
        if out.get("encoding") == "auto":
            out["encoding"] = "frobenius"
        return out

    @model_validator(mode="after")
    def _no_linear_warm_start(self) -> DDPGLBConfig:
        """A public warm start adds linear statistics (Σ x xᵀ, Σ r x); the GLM's are others."""
        if self.public_warm_start:
            raise ValueError("ddp-glb takes no public warm start (its statistics are the GLM's, "
                             "not the linear (Σ x xᵀ, Σ r x) a warm start adds)")
        return self


class AdaRGOPEConfig(RenyiDP, PolicyConfig):
    """Azize & Basu Alg. 3: phased elimination with G-optimal designs, (α, ε)-RDP
    (``policies.adar_gope``).

    The simulator binds the environment's fixed arms (``--env fixed-linear``); a task of the
    services defines its own: ``K`` arms drawn from ``arm_seed`` with ``fixed-linear``'s
    construction (``policies.adar_gope.seeded_arms``), public like every task parameter."""

    algo: Literal["adar-gope"] = "adar-gope"
    design_tol: float = Field(DEFAULT_TOL, gt=0, le=1,
                              description="G-optimal design tolerance: g(π) ≤ d (1 + tol)")
    K: int | None = Field(None, ge=2, le=1024,
                          description="services: number of fixed arms (with arm_seed)")
    arm_seed: int | None = Field(None, ge=0, lt=2**63,
                                 description="services: seed the fixed arms are drawn from")


    @model_validator(mode="after")
    def _arms_given_together(self) -> AdaRGOPEConfig:
        if (self.K is None) != (self.arm_seed is None):
            raise ValueError("adar-gope: give both K and arm_seed (the services' fixed arm "
                             "set) or neither (the simulator's environment arms)")
        return self


# Every policy a task can run: the linear ones, the multi-armed ones (``mab_config``) and the
# bandit-convex-optimisation ones (``bco_config``).
AnyPolicyConfig = Annotated[
    LinUCBConfig | LDPLinUCBConfig | SBLBConfig | SBLBFixedConfig | AdaROFULConfig | DDPLinUCBConfig
    | DDPGLBConfig | LDPGLBConfig | AdaRGOPEConfig
    | UCBConfig | HeLDPUCBLConfig | HeLDPUCBBConfig | LDPMABConfig | AdaRUCBConfig
    | BCOOnePointConfig | LDPBCOConfig | BCOTwoPointConfig | LDPBCO2Config,
    Field(discriminator="algo"),
]
