"""The one list of policies: for each policy id (spec §5) its config, its class, its family, and
the threat models and transports a task of it may declare.

Everything that depends on which policy a task runs looks it up here: ``make_config`` and
``build_policy``, the task validation of ``shared.settings``, the device (decide and report rows
through the family's handler), the analyzer's model feed (``Family.publish``), the demo and the
simulate command. An id that is not registered is an error everywhere, never a default.

Adding a policy of an existing family is a config class, a policy class and one ``PolicyEntry``
here; the contract tests (``tests/shared/core/policies/test_contract.py``) then run over it
(``docs/adding-a-policy.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel

from privbandit.shared.core.policies.adar_gope import AdaRGOPE
from privbandit.shared.core.policies.adar_ucb import AdaRUCB
from privbandit.shared.core.policies.base import Policy, SumIngesting
from privbandit.shared.core.policies.bco_config import (
    BCOOnePointConfig,
    BCOTwoPointConfig,
    LDPBCO2Config,
    LDPBCOConfig,
)
from privbandit.shared.core.policies.bco_service import BCO, BCO2, LDPBCO, LDPBCO2
from privbandit.shared.core.policies.config import (
    AdaRGOPEConfig,
    AdaROFULConfig,
    DDPGLBConfig,
    DDPLinUCBConfig,
    LDPGLBConfig,
    LDPLinUCBConfig,
    LinUCBConfig,
    SBLBConfig,
    SBLBFixedConfig,
)
from privbandit.shared.core.policies.ddp_glb import DDPGLB
from privbandit.shared.core.policies.ddp_linucb import DDPLinUCB
from privbandit.shared.core.policies.exact import AdaROFUL, LinUCB
from privbandit.shared.core.policies.families import ARMS, BCO_FAMILY, GLB, LINEAR, PHASE, Family
from privbandit.shared.core.policies.gope_service import AdaRGOPEService
from privbandit.shared.core.policies.ldp_glb import LDPGLB
from privbandit.shared.core.policies.ldp_linucb import LDPLinUCB
from privbandit.shared.core.policies.ldp_mab import LDPMAB
from privbandit.shared.core.policies.lplr import LPLR
from privbandit.shared.core.policies.lplr_config import LPLRConfig
from privbandit.shared.core.policies.mab_config import (
    AdaRUCBConfig,
    HeLDPUCBBConfig,
    HeLDPUCBLConfig,
    LDPMABConfig,
    UCBConfig,
)
from privbandit.shared.core.policies.sblb import SBLB, SBLBFixed
from privbandit.shared.core.policies.ucb import UCB, HeLDPUCBB, HeLDPUCBL
from privbandit.shared.core.randomizers.base import Randomizer

ThreatModel = Literal["none", "ldp", "shuffle", "central"]
Transport = Literal["reports", "secure-sum"]
TRANSPORTS: tuple[Transport, ...] = ("reports", "secure-sum")


@dataclass(frozen=True)
class PolicyEntry:
    """What the system knows of one policy id."""

    algo: str
    config: type[BaseModel]
    policy: type[Policy[Any, Any]]
    family: Family[Any, Any]
    # The threat models a task of this policy may declare (spec §3), the first its own.
    threat_models: tuple[ThreatModel, ...]
    # How its reports may reach the analyzer (``reports``: each sealed with HPKE and shuffled;
    # ``secure-sum``: the shuffler adds Paillier ciphertexts, the policy sees batch sums only,
    # through ``Policy.ingest_statistic``).
    transports: tuple[Transport, ...] = ("reports",)
    # Why a transport is required, when only one is allowed (said in the refusal).
    transport_reason: str = ""
    # Whether a task of the services may run it (else the simulator only).
    services: bool = True
    # The services' variant, used for a config that ``wants_service_policy``.
    service_policy: type[Policy[Any, Any]] | None = None
    wants_service_policy: Callable[[Any], bool] | None = None

    def policy_class(self, config: Any) -> type[Policy[Any, Any]]:
        """The class that serves ``config``."""
        if self.service_policy is not None and self.wants_service_policy is not None and \
                self.wants_service_policy(config):
            return self.service_policy
        return self.policy

    def check_task(self, threat_model: str, transport: str) -> None:
        """``ValueError`` unless a task may run this policy under ``threat_model`` with
        ``transport``."""
        if not self.services:
            raise ValueError(f"policy {self.algo} runs in the simulator only")
        if threat_model not in self.threat_models:
            raise ValueError(f"policy {self.algo} serves threat model(s) {self.threat_models}, "
                             f"not {threat_model!r}")
        if transport in self.transports:
            return
        if len(self.transports) == 1 and self.transports[0] != "reports":
            raise ValueError(f"{self.algo} needs {self.transports[0]} aggregation "
                             f"({self.transport_reason})")
        serving = "/".join(e.algo for e in REGISTRY.values() if transport in e.transports)
        raise ValueError(f"{transport} aggregation applies to {serving} only")


def _has_arm_seed(config: Any) -> bool:
    """A task's own fixed arms (``arm_seed``): the devices sample them from the design."""
    return getattr(config, "arm_seed", None) is not None


REGISTRY: dict[str, PolicyEntry] = {e.algo: e for e in (
    # Linear contextual bandits: decide carries the K feature vectors.
    PolicyEntry("linucb", LinUCBConfig, LinUCB, LINEAR, ("none",)),
    PolicyEntry("ldp-linucb", LDPLinUCBConfig, LDPLinUCB, LINEAR, ("ldp",)),
    PolicyEntry("sblb", SBLBConfig, SBLB, LINEAR, ("shuffle", "ldp"), TRANSPORTS),
    PolicyEntry("sblb-fixed", SBLBFixedConfig, SBLBFixed, LINEAR, ("shuffle", "ldp"), TRANSPORTS),
    PolicyEntry("ddp-linucb", DDPLinUCBConfig, DDPLinUCB, LINEAR, ("shuffle",), ("secure-sum",),
                transport_reason="a report alone is not private: it carries only a share of "
                                 "the noise"),
    # Azize–Basu Alg. 4 (AdaR-OFUL): Gaussian noise per adaptive episode, trusted analyzer.
    PolicyEntry("adar-oful", AdaROFULConfig, AdaROFUL, LINEAR, ("central",)),
    # Zheng et al. Alg. 3 on logistic rewards: (ε, δ)-LDP reports anchored at the broadcast θ̂.
    PolicyEntry("ldp-glb", LDPGLBConfig, LDPGLB, GLB, ("ldp",)),
    # GLM (logistic) rewards over ddp-linucb's secure sum: each user's Newton-step statistics at
    # the served anchor θ̂ (Sarmasarkar 2026's H and MLE, adapted to one report per user).
    PolicyEntry("ddp-glb", DDPGLBConfig, DDPGLB, GLB, ("shuffle",), ("secure-sum",),
                transport_reason="a report alone is not private: the aggregators add the noise "
                                 "to batch sums"),
    # Azize–Basu Alg. 3 on the task's fixed arms: raw (arm, phase, reward) to a trusted analyzer.
    PolicyEntry("adar-gope", AdaRGOPEConfig, AdaRGOPE, PHASE, ("central",),
                service_policy=AdaRGOPEService, wants_service_policy=_has_arm_seed),
    # Zheng et al. Alg. 6 (LPLR): per-layer block sums, simulator only (``docs/lplr.md``).
    PolicyEntry("lplr", LPLRConfig, LPLR, LINEAR, ("ldp",), services=False),
    # Multi-armed (context-free) tasks: K arms, no features; LDP ones are pass-through (l = 1).
    PolicyEntry("ucb", UCBConfig, UCB, ARMS, ("none",)),
    PolicyEntry("heldp-ucb-l", HeLDPUCBLConfig, HeLDPUCBL, ARMS, ("ldp",)),
    PolicyEntry("heldp-ucb-b", HeLDPUCBBConfig, HeLDPUCBB, ARMS, ("ldp",)),
    PolicyEntry("ldp-mab", LDPMABConfig, LDPMAB, ARMS, ("ldp",)),
    PolicyEntry("adar-ucb", AdaRUCBConfig, AdaRUCB, ARMS, ("central",)),
    # Bandit convex optimisation: the device plays the point(s) of the model; the reports are
    # sequential (each moves the point), so only pass-through threat models. (The simulator's
    # vectorised learners are ``bco.BCO_POLICIES``.)
    PolicyEntry("bco", BCOOnePointConfig, BCO, BCO_FAMILY, ("none",)),
    PolicyEntry("ldp-bco", LDPBCOConfig, LDPBCO, BCO_FAMILY, ("ldp",)),
    PolicyEntry("bco2", BCOTwoPointConfig, BCO2, BCO_FAMILY, ("none",)),
    PolicyEntry("ldp-bco2", LDPBCO2Config, LDPBCO2, BCO_FAMILY, ("ldp",)),
)}


for _e in REGISTRY.values():
    # A declared capability, not a runtime surprise: a secure-sum policy learns from batch sums.
    for _cls in (_e.policy, _e.service_policy):
        if "secure-sum" in _e.transports and _cls is not None and \
                not issubclass(_cls, SumIngesting):
            raise TypeError(f"{_e.algo} declares the secure-sum transport but "
                            f"{_cls.__name__} has no ingest_statistic")


def entry(algo: object) -> PolicyEntry:
    """The registry entry of ``algo``; ``ValueError`` naming the known ids if there is none."""
    if not isinstance(algo, str) or algo not in REGISTRY:
        raise ValueError(f"unknown policy {algo!r}; known: {', '.join(REGISTRY)}")
    return REGISTRY[algo]


def family_of(algo: str) -> Family[Any, Any]:
    return entry(algo).family


def make_config(algo: str, **params: object) -> Any:
    """Validated config for ``algo`` from keyword parameters (unknown keys are an error)."""
    return entry(algo).config(**params)


def build_policy(config: Any, rng: np.random.Generator | None = None) -> Policy[Any, Any]:
    """The policy a config describes (its ``algo`` field selects the entry)."""
    return entry(getattr(config, "algo", None)).policy_class(config)(config, rng)


def randomizer_for(config: Any) -> Randomizer:
    """The device-side local randomizer a task's policy uses (``Policy.randomizer_of``: the
    shuffler and the device need no analyzer state)."""
    return entry(getattr(config, "algo", None)).policy_class(config).randomizer_of(config)
