"""Policies of spec §5 behind one interface (``shared.core.policies.base.Policy``)."""

from __future__ import annotations

import numpy as np

from shared.core.policies.base import Policy
from shared.core.policies.config import CONFIGS, PolicyConfig
from shared.core.policies.exact import AdaROFUL, LinUCB
from shared.core.policies.ldp_linucb import LDPLinUCB
from shared.core.policies.model import Model
from shared.core.policies.sblb import SBLB, SBLBFixed
from shared.core.randomizers.base import Randomizer

POLICIES: dict[str, type[Policy]] = {
    "linucb": LinUCB,
    "ldp-linucb": LDPLinUCB,
    "sblb": SBLB,
    "sblb-fixed": SBLBFixed,
    "adar-oful": AdaROFUL,
}


def build_policy(config: PolicyConfig, rng: np.random.Generator | None = None) -> Policy:
    """The policy a config describes (its ``algo`` field selects the class)."""
    algo = getattr(config, "algo", None)
    if algo not in POLICIES:
        raise ValueError(f"unknown policy {algo!r}; known: {', '.join(POLICIES)}")
    return POLICIES[algo](config, rng)  # type: ignore[arg-type]


def randomizer_for(config: PolicyConfig) -> Randomizer:
    """The device-side local randomizer a task's policy uses (no analyzer state is built)."""
    return build_policy(config).randomizer


def make_config(algo: str, **params: object) -> PolicyConfig:
    """Validated config for ``algo`` from keyword parameters (unknown keys are an error)."""
    if algo not in CONFIGS:
        raise ValueError(f"unknown policy {algo!r}; known: {', '.join(CONFIGS)}")
    return CONFIGS[algo](**params)


__all__ = [
    "POLICIES",
    "Model",
    "Policy",
    "PolicyConfig",
    "build_policy",
    "make_config",
    "randomizer_for",
]
