"""Configurations of the bandit convex optimisation policies (issue 12): ``bco``, ``ldp-bco``
(one point per user) and ``bco2``, ``ldp-bco2`` (two points per user).

The loss class is part of the task: losses in [0, B] on the ball of radius R, G-Lipschitz,
β-smooth, μ-strongly convex (μ = 0: merely convex). ``privbandit simulate`` fills these from the
environment; a deployment states them as its assumptions. μ selects the black box (Zheng et al.
Corollary 4 and Theorem 6): Hazan–Levy / ADX with η_t = 1/(μt) when μ > 0, Saha–Tewari / ADX with
η = 1/√T when μ = 0. ``step_scale`` multiplies the paper's step size (1 = the paper's); it is
post-processing of the reports, so it never changes a report or a ledger.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from privbandit.shared.core.randomizers.bco import Calibration


class BCOConfig(BaseModel):
    """Parameters shared by the BCO policies."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # Points a user plays (and losses her feedback carries): 1, or 2 for the two-point ones.
    points_per_user: ClassVar[int] = 1

    d: int = Field(5, ge=1, le=10_000, description="dimension of the decision set")
    radius: float = Field(1.0, gt=0, description="R: the decision set is the ball R·𝔹")
    loss_bound: float = Field(1.0, gt=0, description="B: losses lie in [0, B]")
    lipschitz: float = Field(1.0, gt=0, description="G: losses are G-Lipschitz on the ball")
    smoothness: float = Field(1.0, gt=0, description="β: losses are β-smooth")
    strong_convexity: float = Field(0.0, ge=0, description="μ (0: merely convex)")
    horizon: int = Field(1_000_000, ge=2, description="T in the step sizes")
    step_scale: float = Field(1.0, gt=0, description="multiplies the paper's step size")


class PrivateBCO(BaseModel):
    """Privacy parameters of Algorithms 1 and 2."""

    epsilon: float = Field(1.0, gt=0, description="LDP ε per report")
    delta: float = Field(1e-6, gt=0, lt=1, description="LDP δ per report")
    calibration: Calibration = Field(
        "analytic", description="analytic (Balle–Wang, exact) or paper (2B√(2 ln(1.25/δ))/ε)")


class BCOOnePointConfig(BCOConfig):
    """Non-private one-point BCO: Saha–Tewari (μ = 0) or Hazan–Levy (μ > 0) Algorithm 1."""

    algo: Literal["bco"] = "bco"


class LDPBCOConfig(BCOConfig, PrivateBCO):
    """Zheng et al. Algorithm 1 around the one-point black box."""

    algo: Literal["ldp-bco"] = "ldp-bco"


class BCOTwoPointConfig(BCOConfig):
    """Non-private two-point BCO: Agarwal–Dekel–Xiao (Zheng et al. Algorithm 4, Appendix C)."""

    algo: Literal["bco2"] = "bco2"
    points_per_user: ClassVar[int] = 2


class LDPBCO2Config(BCOConfig, PrivateBCO):
    """Zheng et al. Algorithm 2 around Algorithm 4."""

    algo: Literal["ldp-bco2"] = "ldp-bco2"
    points_per_user: ClassVar[int] = 2


BCO_CONFIGS: dict[str, type[BCOConfig]] = {
    "bco": BCOOnePointConfig,
    "ldp-bco": LDPBCOConfig,
    "bco2": BCOTwoPointConfig,
    "ldp-bco2": LDPBCO2Config,
}
