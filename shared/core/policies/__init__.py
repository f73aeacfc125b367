"""Policies of spec §5 behind one interface (``shared.core.policies.base.Policy``): the linear
policies and the multi-armed ones (``MAB_POLICIES``, configs in ``mab_config``)."""

from __future__ import annotations

import numpy as np

from shared.core.policies.adar_gope import AdaRGOPE
from shared.core.policies.adar_ucb import AdaRUCB
from shared.core.policies.base import Policy
from shared.core.policies.bco_config import BCO_CONFIGS
from shared.core.policies.bco_service import BCO, BCO2, LDPBCO, LDPBCO2
from shared.core.policies.config import CONFIGS, PolicyConfig
from shared.core.policies.ddp_linucb import DDPLinUCB
from shared.core.policies.exact import AdaROFUL, LinUCB
from shared.core.policies.gope_service import AdaRGOPEService
from shared.core.policies.ldp_glb import LDPGLB
from shared.core.policies.ldp_linucb import LDPLinUCB
from shared.core.policies.ldp_mab import LDPMAB
from shared.core.policies.lplr import LPLR
from shared.core.policies.mab_config import MAB_CONFIGS
from shared.core.policies.model import Model
from shared.core.policies.sblb import SBLB, SBLBFixed
from shared.core.policies.ucb import UCB, HeLDPUCBB, HeLDPUCBL
from shared.core.randomizers.base import Randomizer

POLICIES: dict[str, type[Policy]] = {
    "linucb": LinUCB,
    "ldp-linucb": LDPLinUCB,
    "sblb": SBLB,
    "sblb-fixed": SBLBFixed,
    "adar-oful": AdaROFUL,
    "adar-gope": AdaRGOPE,
    "ldp-glb": LDPGLB,
    "lplr": LPLR,
    "ddp-linucb": DDPLinUCB,
}

MAB_POLICIES: dict[str, type[Policy]] = {
    "ucb": UCB,
    "heldp-ucb-l": HeLDPUCBL,
    "heldp-ucb-b": HeLDPUCBB,
    "ldp-mab": LDPMAB,
    "adar-ucb": AdaRUCB,
}
POLICIES.update(MAB_POLICIES)

# Bandit convex optimisation in the services (``bco_service``; the simulator's vectorised
# learners are ``bco.BCO_POLICIES``).
BCO_SERVICE_POLICIES: dict[str, type[Policy]] = {
    "bco": BCO,
    "ldp-bco": LDPBCO,
    "bco2": BCO2,
    "ldp-bco2": LDPBCO2,
}
POLICIES.update(BCO_SERVICE_POLICIES)


def build_policy(config: PolicyConfig, rng: np.random.Generator | None = None) -> Policy:
    """The policy a config describes (its ``algo`` field selects the class)."""
    algo = getattr(config, "algo", None)
    if algo not in POLICIES:
        raise ValueError(f"unknown policy {algo!r}; known: {', '.join(POLICIES)}")
    if algo == "adar-gope" and getattr(config, "arm_seed", None) is not None:
        # A task's own fixed arms: the services' variant (devices sample from the design).
        return AdaRGOPEService(config, rng)  # type: ignore[arg-type]
    return POLICIES[algo](config, rng)  # type: ignore[arg-type]


def randomizer_for(config: PolicyConfig) -> Randomizer:
    """The device-side local randomizer a task's policy uses (no analyzer state is built)."""
    return build_policy(config).randomizer


def make_config(algo: str, **params: object) -> PolicyConfig:
    """Validated config for ``algo`` from keyword parameters (unknown keys are an error)."""
    known = {**CONFIGS, **MAB_CONFIGS, **BCO_CONFIGS}
    if algo not in known:
        raise ValueError(f"unknown policy {algo!r}; known: {', '.join(known)}")
    return known[algo](**params)  # type: ignore[return-value]


__all__ = [
    "BCO_SERVICE_POLICIES",
    "MAB_POLICIES",
    "POLICIES",
    "Model",
    "Policy",
    "PolicyConfig",
    "build_policy",
    "make_config",
    "randomizer_for",
]
