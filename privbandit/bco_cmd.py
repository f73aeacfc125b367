"""``privbandit simulate --env bco-quadratic|bco-convex`` (issue 12): the BCO environments' flags.
The run is ``simulation.run``'s (the policy's loss class (B, G, β, μ) taken from the
environment)."""

from __future__ import annotations

import argparse

from privbandit.shared.core.environments.bco import BCO_ENVIRONMENTS
from privbandit.shared.core.policies.bco_config import BCO_CONFIGS


def add_bco_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(f"bandit convex optimisation (--env {'|'.join(BCO_ENVIRONMENTS)}; "
                             f"--algo {'|'.join(BCO_CONFIGS)})")
    g.add_argument("--radius", type=float, default=1.0, help="R: the decision set is R·ball")
    g.add_argument("--loss-bound", type=float, default=1.0, help="B: losses lie in [0, B]")
    g.add_argument("--loss-noise", type=float, default=0.2,
                   help="ν: share of each user's loss that is her own U[0, 1] offset")
    g.add_argument("--drift-period", type=int, default=0,
                   help="move the optimum every N users (0: fixed optimum)")
