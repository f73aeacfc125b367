"""Policy configuration objects (one per policy id of spec §5), in the spirit of MABWiser.

A config is pure, validated data: the simulator builds it from the command line, the services
read it from the task section of the shared config file, and ``build_policy`` turns it into a
policy. ``confidence_scale`` and ``regularizer`` change only the published model (post-processing
of private statistics), never the randomizer or the privacy ledger.
"""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shared.core.design import DEFAULT_TOL
from shared.core.policies.bco_config import (
    BCOOnePointConfig,
    BCOTwoPointConfig,
    LDPBCO2Config,
    LDPBCOConfig,
)
from shared.core.policies.mab_config import (
    AdaRUCBConfig,
    HeLDPUCBBConfig,
    HeLDPUCBLConfig,
    LDPMABConfig,
    UCBConfig,
)
from shared.core.policies.privacy_params import RenyiDP
from shared.core.policies.schedule import BatchSchedule

Regularizer = Literal["paper", "clip"]


class PolicyConfig(BaseModel):
    """Parameters shared by all linear policies."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    d: int = Field(5, ge=1, le=64, description="feature dimension")
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

    # What ``privbandit simulate`` uses unless the flags say otherwise or ``--paper`` is given:
    # the best measured settings (BENCHMARKS.md, "Issue 22 — the local model"): greedy (Han et
    # al. 2021's greedy estimation on diverse contexts) on the ridge sized by the noise of the
    # reports so far, c_t = λ + ¼·2σ√(t d), with θ̃ perturbed by 0.3 × a draw of its own noise
    # (``LDPLinUCB._publish``: keeps greedy from locking in); the paper's are the field defaults.
    PRACTICAL: ClassVar[dict[str, object]] = {
        "regularizer": "noise",
        "noise_ridge": 0.25,
        "confidence_scale": 0.0,
        "perturb": 0.3,
    }


class SBLBConfig(PolicyConfig):
    """Garcelon et al. Alg. 1 (SBLB): 0/1 randomizer, fixed shuffler batch, det-based switching."""

    algo: Literal["sblb"] = "sblb"
    eps0: float = Field(1.0, gt=0, description="LDP ε0 of one report")
    m: int = Field(1, ge=1, le=64, description="bits per encoded coordinate")
    batch_size: int = Field(1000, ge=1, description="shuffler batch length l")
    delta: float = Field(1e-6, gt=0, lt=1, description="δ of the central (shuffle) guarantee")
    eta: float = Field(0.5, ge=0, description="switching: update when det Ṽ grows by 1+η")
    regularizer: Regularizer = "paper"


class SBLBFixedConfig(SBLBConfig):
    """Garcelon et al. Alg. 4 (App. C): the model is updated after every shuffler batch."""

    algo: Literal["sblb-fixed"] = "sblb-fixed"  # type: ignore[assignment]  # its own policy id


class AdaROFULConfig(RenyiDP, PolicyConfig):
    """Azize & Basu Alg. 4: (α, ε)-RDP via Gaussian noise per adaptive episode."""

    algo: Literal["adar-oful"] = "adar-oful"
    switching: float = Field(0.5, gt=0, description="C of the doubling schedule (line 6)")


# 'geometric:auto,…': the first batch in units of one batch's noise sd (``DDPLinUCBConfig``).
AUTO_FIRST_PER_SIGMA = 50.0


class DDPLinUCBConfig(PolicyConfig):
    """Distributed DP over the secure sum: devices add Skellam shares to their rounded statistics
    (``randomizers.skellam``); the batch sum is central (ε, δ)-DP (``accounting.skellam``)."""

    algo: Literal["ddp-linucb"] = "ddp-linucb"
    epsilon: float = Field(1.0, gt=0, description="central ε of the batch sums")
    delta: float = Field(1e-6, gt=0, lt=1, description="central δ of the batch sums")
    batch_size: int = Field(1000, ge=1, description="secure-sum batch length l")
    honest_fraction: float = Field(
        1.0, gt=0, le=1, description="γ: guarantee holds if ⌈γ l⌉ devices per batch add a share"
    )
    scale: float = Field(128.0, ge=1, le=2.0**20, description="quantization scale s")
    eta: float = Field(0.5, ge=0, description="switching: update when det Ṽ grows by 1+η")
    regularizer: Literal["paper", "clip", "noise"] = "paper"
    batch_schedule: str | None = Field(
        None, description="None: fixed batches of batch_size; 'geometric:L0,GROWTH,CAP' "
        "(``policies.schedule``; batch_size is then L0; L0 'auto' sizes it from the noise); "
        "'fixed:L' is read as batch_size = L"
    )
    noise_ridge: float = Field(
        1.0, ge=0, description="regularizer 'noise': c_t = λ + κ·2σ_t√d, κ this factor"
    )

    # What ``privbandit simulate`` uses unless the flags say otherwise or ``--paper`` is given:
    # the best measured settings (BENCHMARKS.md, "Issue 22"); the paper's are the field defaults.
    PRACTICAL: ClassVar[dict[str, object]] = {
        "batch_schedule": "geometric:auto,2,100000",
        "regularizer": "noise",
        "confidence_scale": 0.1,
    }

    @model_validator(mode="before")
    @classmethod
    def _normalize_schedule(cls, data: object) -> object:
        """One spelling per schedule: 'fixed:L' becomes batch_size = L; a geometric schedule
        sets batch_size to its first batch (what the shuffler fills first)."""
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
        """'geometric:auto,G,CAP' → L0 = ⌈AUTO_FIRST_PER_SIGMA · σ_b⌉ with σ_b = √μ/s the
        per-entry standard deviation (real units) of one batch's central Skellam noise at this
        (ε, δ) (``randomizers.skellam.batch_noise_sd``): the first model is useful once its
        signal, ≈ l/d per direction, stands well above a batch's noise matrix, ≈ 2σ_b√d — a first
        batch proportional to σ_b (measured best: ≈ 600 at ε = 1, ≈ 150 at ε = 4, ≈ 1200 at
        ε = 0.5; BENCHMARKS.md, issue 22). The cap is raised to L0 if below it."""
        from shared.core.randomizers.skellam import batch_noise_sd

        def get(name: str) -> float:
            value = data.get(name, cls.model_fields[name].default)
            if not isinstance(value, int | float | str):  # the field's own validation says why
                raise ValueError(f"{name} must be a number, not {value!r}")
            return float(value)

        growth, _, cap = text.removeprefix("geometric:auto,").partition(",")
        sigma = batch_noise_sd(int(get("d")), get("epsilon"), get("delta"), get("scale"),
                               get("L"))
        first = math.ceil(AUTO_FIRST_PER_SIGMA * sigma)
        return f"geometric:{first},{growth},{max(first, int(cap))}"

    @property
    def schedule(self) -> BatchSchedule:
        if self.batch_schedule is None:
            return BatchSchedule(self.batch_size)
        return BatchSchedule.parse(self.batch_schedule)


class LDPGLBConfig(LDPLinUCBConfig):
    """Zheng et al. Alg. 3: GLOC with (ε, δ)-LDP reports and noisy online gradient descent
    (``policies.ldp_glb``)."""

    algo: Literal["ldp-glb"] = "ldp-glb"  # type: ignore[assignment]  # its own policy id
    S: float = Field(3.0, gt=0, description="radius of W ∋ θ* (logistic env: ‖θ*‖ = 2√2)")
    ogd_step: float | None = Field(None, gt=0, description="ζ (default 2S/((L + σ√d)√T))")

    # ``simulate``'s defaults unless ``--paper`` (BENCHMARKS.md, "Issue 22 — the local model"):
    # greedy on the eigen-clipped Gram matrix — the same regret as width 0.1, ten times faster.
    PRACTICAL: ClassVar[dict[str, object]] = {  # its own, not ldp-linucb's
        "regularizer": "clip",
        "confidence_scale": 0.0,
    }


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
    | LDPGLBConfig | AdaRGOPEConfig
    | UCBConfig | HeLDPUCBLConfig | HeLDPUCBBConfig | LDPMABConfig | AdaRUCBConfig
    | BCOOnePointConfig | LDPBCOConfig | BCOTwoPointConfig | LDPBCO2Config,
    Field(discriminator="algo"),
]
