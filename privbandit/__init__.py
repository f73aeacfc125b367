"""The privbandit command line: ``simulate``, ``evaluate``, ``privacy``, ``up`` and ``demo``, the
local launcher, plots and the demo driver; and the Python API (``privbandit.api``, re-exported
here: ``privbandit.Bandit``, ``privbandit.simulate``, …; docs/api.md). Nothing under ``shared/``
or ``services/`` imports this package."""

from __future__ import annotations

from typing import Any

# The API's names, loaded on first use: the command line starts without importing the policies.
API = ("Bandit", "Choice", "DecisionClosed", "Environment", "Estimate", "SimulationError",
       "config", "evaluate", "log_uniform", "policy_ledger", "rdp_epsilon_for_central",
       "register_environment", "replay",
       "shuffle_epsilon", "shuffle_max_eps0", "shuffle_min_batch", "simulate")


# Logged data in and evaluation of any action distribution (privbandit.offpolicy, issue 42).
OFFPOLICY = ("LogFormatError", "evaluate_distribution", "feature_dimension",
             "frozen_distribution", "log_exploring", "read_log", "read_obd")


def __getattr__(name: str) -> Any:
    if name in API:
        from privbandit import api

        return getattr(api, name)
    if name in OFFPOLICY:
        from privbandit import offpolicy

        return getattr(offpolicy, name)
    raise AttributeError(f"module 'privbandit' has no attribute {name!r}")
