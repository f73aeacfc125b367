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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel

from privbandit.shared.core.accounting.ledger import Aggregation
from privbandit.shared.core.policies import practical
from privbandit.shared.core.policies.adar_gope import AdaRGOPE
from privbandit.shared.core.policies.adar_ucb import AdaRUCB
from privbandit.shared.core.policies.base import Policy, Scheduled, SumIngesting
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
from privbandit.shared.core.randomizers.base import Randomizer, Summable

ThreatModel = Literal["none", "ldp", "shuffle", "central"]
Transport = Aggregation
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
    # The simulator loop that runs it, if not its family's (``Family.simulator``).
    own_simulator: str | None = None
    # The measured practical settings (``practical.py``, issue 22): what ``simulate`` and the
    # demo tasks use unless ``--paper`` (the config's own defaults are the paper's); and where
    # an aggregation changes what is best, its settings on top.
    practical: Mapping[str, object] = field(default_factory=dict)
    practical_by_aggregation: Mapping[str, Mapping[str, object]] = field(default_factory=dict)

    def practical_for(self, aggregation: Aggregation | None = None) -> dict[str, object]:
        """The practical settings, with those of ``aggregation`` on top."""
        return {**self.practical, **self.practical_by_aggregation.get(aggregation or "", {})}

    @property
    def scheduled(self) -> bool:
        """Whether a task of the services may run it under a growing batch schedule: its class
        sizes its noise per batch length (the ``Scheduled`` capability, ``randomizer_for``),
        which the device and the analyzer need for such a schedule (each model announces the
        next batch's length and each report's noise is sized from it: ``docs/protocol.md``)."""
        return all(issubclass(c, Scheduled) for c in self.classes)

    @property
    def simulator(self) -> str:
        """The simulator loop that runs it (``privbandit.simulation``)."""
        return self.own_simulator or self.family.simulator

    @property
    def classes(self) -> tuple[type[Policy[Any, Any]], ...]:
        """The class, and the services' variant if there is one."""
        return (self.policy,) if self.service_policy is None else (
            self.policy, self.service_policy)

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
    PolicyEntry("linucb", LinUCBConfig, LinUCB, LINEAR, ("none",), practical=practical.LINUCB),
    PolicyEntry("ldp-linucb", LDPLinUCBConfig, LDPLinUCB, LINEAR, ("ldp",),
                practical=practical.LDP_LINUCB),
    PolicyEntry("sblb", SBLBConfig, SBLB, LINEAR, ("shuffle", "ldp"), TRANSPORTS,
                practical=practical.SBLB, practical_by_aggregation=practical.SBLB_BY_AGGREGATION),
    PolicyEntry("sblb-fixed", SBLBFixedConfig, SBLBFixed, LINEAR, ("shuffle", "ldp"), TRANSPORTS,
                practical=practical.SBLB, practical_by_aggregation=practical.SBLB_BY_AGGREGATION),
    PolicyEntry("ddp-linucb", DDPLinUCBConfig, DDPLinUCB, LINEAR, ("shuffle",), ("secure-sum",),
                transport_reason="a report alone is not private: it carries only a share of "
                                 "the noise", practical=practical.DDP_LINUCB),
    # Azize–Basu Alg. 4 (AdaR-OFUL): Gaussian noise per adaptive episode, trusted analyzer.
    PolicyEntry("adar-oful", AdaROFULConfig, AdaROFUL, LINEAR, ("central",),
                practical=practical.ADAR_OFUL),
    # Zheng et al. Alg. 3 on logistic rewards: (ε, δ)-LDP reports anchored at the broadcast θ̂.
    PolicyEntry("ldp-glb", LDPGLBConfig, LDPGLB, GLB, ("ldp",), practical=practical.LDP_GLB),
    # GLM (logistic) rewards over ddp-linucb's secure sum: each user's Newton-step statistics at
    # the served anchor θ̂ (Sarmasarkar 2026's H and MLE, adapted to one report per user).
    PolicyEntry("ddp-glb", DDPGLBConfig, DDPGLB, GLB, ("shuffle",), ("secure-sum",),
                transport_reason="a report alone is not private: the aggregators add the noise "
                                 "to batch sums", practical=practical.DDP_GLB),
    # Azize–Basu Alg. 3 on the task's fixed arms: raw (arm, phase, reward) to a trusted analyzer.
    PolicyEntry("adar-gope", AdaRGOPEConfig, AdaRGOPE, PHASE, ("central",),
                service_policy=AdaRGOPEService, wants_service_policy=_has_arm_seed,
                practical=practical.ADAR_GOPE),
    # Zheng et al. Alg. 6 (LPLR): per-layer block sums, simulator only (``docs/lplr.md``).
    PolicyEntry("lplr", LPLRConfig, LPLR, LINEAR, ("ldp",), services=False,
                own_simulator="lplr"),
    # Multi-armed (context-free) tasks: K arms, no features; LDP ones are pass-through (l = 1).
    PolicyEntry("ucb", UCBConfig, UCB, ARMS, ("none",), practical=practical.UCB),
    PolicyEntry("heldp-ucb-l", HeLDPUCBLConfig, HeLDPUCBL, ARMS, ("ldp",)),
    PolicyEntry("heldp-ucb-b", HeLDPUCBBConfig, HeLDPUCBB, ARMS, ("ldp",)),
    PolicyEntry("ldp-mab", LDPMABConfig, LDPMAB, ARMS, ("ldp",)),
    PolicyEntry("adar-ucb", AdaRUCBConfig, AdaRUCB, ARMS, ("central",)),
    # Bandit convex optimisation: the device plays the point(s) of the model; the reports are
    # sequential (each moves the point), so only pass-through threat models. (The simulator's
    # vectorised learners are ``bco.BCO_POLICIES``.)
    PolicyEntry("bco", BCOOnePointConfig, BCO, BCO_FAMILY, ("none",), practical=practical.BCO),
    PolicyEntry("ldp-bco", LDPBCOConfig, LDPBCO, BCO_FAMILY, ("ldp",)),
    PolicyEntry("bco2", BCOTwoPointConfig, BCO2, BCO_FAMILY, ("none",),
                practical=practical.BCO),
    PolicyEntry("ldp-bco2", LDPBCO2Config, LDPBCO2, BCO_FAMILY, ("ldp",)),
)}


def _check_capabilities(e: PolicyEntry) -> None:
    """A declared capability, not a runtime surprise: a secure-sum policy learns from batch sums
    (``SumIngesting``) of reports its randomizer can describe as integers to add (``Summable``,
    checked on the default config's randomizer). ``TypeError`` at import otherwise."""
    if "secure-sum" not in e.transports:
        return
    for cls in e.classes:
        if not issubclass(cls, SumIngesting):
            raise TypeError(f"{e.algo} declares the secure-sum transport but {cls.__name__} "
                            "has no ingest_statistic")
        config = e.config()
        randomizer = cls.randomizer_of(config)
        if not isinstance(randomizer, Summable):
            raise TypeError(f"{e.algo} declares the secure-sum transport but its randomizer "
                            f"{type(randomizer).__name__} is not Summable (sum_encoding, summand)")


for _e in REGISTRY.values():
    _check_capabilities(_e)


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
