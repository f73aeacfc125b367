"""Configurations of the multi-armed policies of spec §5 (``ucb``, ``heldp-ucb-l``,
``heldp-ucb-b``, ``ldp-mab``, ``adar-ucb``).

As for the linear policies, a config is validated data; ``confidence_scale`` multiplies the
paper's width (for ``ldp-mab`` with the Tsallis-INF black box, which has no width, it divides the
learning rate instead: c < 1 explores less). It is post-processing of what the analyzer received,
so it never changes a report or a ledger.

Per-user privacy levels (HeLDP): ``epsilon`` is every user's level unless ``epsilon_dist`` gives a
distribution (``shared.core.privacy_levels``), from which the simulator draws each user's ε_t
(in the services, a user states her own ε_t and ``epsilon`` is the device's default).
``eps_min`` defaults to ε itself for homogeneous levels (the paper's choice, Corollaries 8 and 11)
and otherwise to the threshold minimising the V_L / V_B heuristic.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from privbandit.shared.core.policies.privacy_params import RenyiDP
from privbandit.shared.core.privacy_levels import EPS_MAX, PrivacyLevels, choose_eps_min, levels_for


class MABConfig(BaseModel):
    """Parameters shared by all multi-armed policies."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    K: int = Field(20, ge=2, le=65_535, description="number of arms")
    confidence_scale: float = Field(1.0, ge=0, description="multiplies the width; 1 = the paper's")


class UCBConfig(MABConfig):
    """Non-private UCB1 (Auer et al. 2002): μ̂_a + √(2σ² ln t⁴ / N_a)."""

    algo: Literal["ucb"] = "ucb"
    reward_sigma: float = Field(
        0.5, gt=0, description="sub-Gaussian constant of the rewards (1/2 for rewards in [0, 1])")


class HeLDPConfig(MABConfig):
    """HeLDP-UCB (file 003): per-user levels ε_t, threshold ε_min, optional sigmoid (-LS/-BS)."""

    mechanism: ClassVar[str] = "bernoulli"

    epsilon: float = Field(1.0, gt=0, le=EPS_MAX, description="users' level when homogeneous")
    epsilon_dist: str | None = Field(None, description="fixed:E | choice:e1,... | normal:M,SD")
    # None only before the "before" validator fills in the default: always a float afterwards.
    eps_min: float = Field(None, gt=0, description="responses with ε_t < ε_min are discarded")  # type: ignore[assignment]  # see above
    sigmoid: bool = Field(False, description="map rewards through s(r) = 1/(1+e^-r) first")

    @model_validator(mode="before")
    @classmethod
    def _default_eps_min(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("eps_min") is not None:
            return data
        fields = cls.model_fields
        eps = data.get("epsilon", fields["epsilon"].default)
        levels = levels_for(eps, data.get("epsilon_dist"))
        value = levels.common if levels.homogeneous else choose_eps_min(levels, cls.mechanism)
        return {**data, "eps_min": value}

    @model_validator(mode="after")
    def _check_levels(self) -> HeLDPConfig:
        levels = levels_for(self.epsilon, self.epsilon_dist)  # raises on a malformed spec
        if levels.prob_at_least(self.eps_min) <= 0:
            raise ValueError(f"eps_min={self.eps_min:g} discards every user of {levels.spec}")
        return self

    @property
    def levels(self) -> PrivacyLevels:
        return levels_for(self.epsilon, self.epsilon_dist)


class HeLDPUCBLConfig(HeLDPConfig):
    """Agent 2 (HeLDP-UCB-L) with CTL, or HeLDP-UCB-LS with ``sigmoid``."""

    algo: Literal["heldp-ucb-l"] = "heldp-ucb-l"
    mechanism: ClassVar[str] = "laplace"


class HeLDPUCBBConfig(HeLDPConfig):
    """Agent 4 (HeLDP-UCB-B) with CTB, or HeLDP-UCB-BS with ``sigmoid``."""

    algo: Literal["heldp-ucb-b"] = "heldp-ucb-b"
    mechanism: ClassVar[str] = "bernoulli"


class LDPMABConfig(MABConfig):
    """Zheng et al. Alg. 1 around a non-private MAB black box (App. B.1, Thm 11)."""

    algo: Literal["ldp-mab"] = "ldp-mab"
    epsilon: float = Field(1.0, gt=0, description="LDP ε per report")
    delta: float = Field(1e-6, gt=0, lt=1, description="LDP δ per report")
    black_box: Literal["tsallis-inf", "ucb"] = Field(
        "tsallis-inf", description="Tsallis-INF (the paper's, Thm 11) or sub-Gaussian UCB")
    horizon: int = Field(1_000_000, ge=1, description="T in the loss range B + σ√(2 ln 2T²)")


class AdaRUCBConfig(RenyiDP, MABConfig):
    """Azize & Basu Alg. 2 (AdaR-UCB): (α, ε)-RDP, trusted analyzer."""

    algo: Literal["adar-ucb"] = "adar-ucb"
    beta: float = Field(4.0, gt=3, description="optimism parameter β > 3 (Thm 5)")


MAB_CONFIGS: dict[str, type[MABConfig]] = {
    "ucb": UCBConfig,
    "heldp-ucb-l": HeLDPUCBLConfig,
    "heldp-ucb-b": HeLDPUCBBConfig,
    "ldp-mab": LDPMABConfig,
    "adar-ucb": AdaRUCBConfig,
}
