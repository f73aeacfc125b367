"""Configuration of ``lplr``: RegCB.Elimination over the layered private linear regression
oracle (Li, Simchi-Levi & Wang, arXiv 2404.09413, Algs. 1–6). Derivation: ``docs/lplr.md``.

Every constant of the algorithm is a field here. ``confidence_scale`` multiplies the confidence
widths the oracle hands to the elimination (post-processing of private statistics: it never
changes a report or the ledger), as for the other policies.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from privbandit.shared.core.policies.config import PolicyConfig


class LPLRConfig(PolicyConfig):
    """LPLR with action elimination: ε-LDP per report (Laplace matrix noise) or the paper's
    Wishart matrix noise, which is (ε, 1 − e^{−ε_mat})-LDP (docs/lplr.md §3)."""

    algo: Literal["lplr"] = "lplr"
    K: int = Field(20, ge=2, le=1024, description="number of actions (one oracle per action)")
    epsilon: float = Field(1.0, gt=0, description="LDP ε of one report (all three parts)")
    count_share: float = Field(
        0.2, gt=0, lt=1, description="fraction of ε spent on the bin counts (Laplace)")
    vector_share: float = Field(
        0.4, gt=0, lt=1, description="fraction of ε spent on the vectors y·φ/ρ (Laplace)")
    matrix_noise: Literal["laplace", "wishart"] = Field(
        "laplace", description="noise on φφᵀ/ρ²: Laplace on the upper triangle (pure ε) or the "
        "paper's Wishart W_d(d+1, I/(2ε_mat)) (δ = 1 − e^{−ε_mat}, docs/lplr.md §3.3)")
    gamma: float = Field(
        0.125, gt=0, lt=1, description="γ: residuals with ‖φ^(j)‖ ≤ γ·L are not partitioned "
        "further; J = ⌈log2(1/γ)⌉ norm bins per partitioning bin (Sec. 4.1)")
    first_epoch: int = Field(
        5_000, ge=2, description="τ_1: users of epoch 1; τ_m = τ_1·2^(m−1) (Thm 4.7)")
    activity_sigmas: float = Field(
        2.0, gt=0, description="κ: a bin is active when its noisy count n̂ ≥ κ × its count "
        "noise's sd and n̂·λ̂ ≥ κ × the typical operator norm of its matrix noise "
        "(LPLR-PCR, docs §4.2)")

    @model_validator(mode="after")
    def _shares(self) -> LPLRConfig:
        if self.count_share + self.vector_share >= 1:
            raise ValueError("count_share + vector_share must leave a share for the matrix")
        return self

    @property
    def J(self) -> int:
        """Number of partitioning norm bins under each partitioning bin, J = ⌈log2(1/γ)⌉."""
        return max(1, math.ceil(math.log2(1 / self.gamma) - 1e-12))

    @property
    def residual_bound(self) -> float:
        """Y with |y^(j)| ≤ Y: y ∈ [0, 1] and the prediction Σ_{i<j} β̂_i ⟨v_i, φ⟩ of a path
        of j − 1 ≤ d − 1 fitted bins, each |β̂_i| ≤ S, is at most S·L·√(d − 1) (docs §2)."""
        return 1.0 + self.S * self.L * math.sqrt(max(self.d - 1, 1))
