"""Policies of spec §5 behind one interface (``shared.core.policies.base.Policy``), listed once in
``shared.core.policies.registry`` (config, class, family, threat models, transports)."""

from __future__ import annotations

from privbandit.shared.core.policies.base import Policy
from privbandit.shared.core.policies.config import PolicyConfig
from privbandit.shared.core.policies.model import Model
from privbandit.shared.core.policies.registry import (
    REGISTRY,
    build_policy,
    entry,
    family_of,
    make_config,
    randomizer_for,
)

# Every policy class by id (the services' variants are chosen by ``build_policy``).
POLICIES: dict[str, type[Policy]] = {algo: e.policy for algo, e in REGISTRY.items()}

__all__ = [
    "POLICIES",
    "REGISTRY",
    "Model",
    "Policy",
    "PolicyConfig",
    "build_policy",
    "entry",
    "family_of",
    "make_config",
    "randomizer_for",
]
