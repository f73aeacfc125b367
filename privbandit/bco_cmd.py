"""``privbandit simulate --env bco-quadratic|bco-convex`` (issue 12): BCO policies, spec §6's JSON.

The policy's loss class (B, G, β, μ) is taken from the environment, so the step sizes and the
noise are the paper's for the losses the users actually have."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

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
    g.add_argument("--calibration", choices=["analytic", "paper"],
                   help="ldp-bco*: σ exact (Balle–Wang, default) or the paper's classic σ")
    g.add_argument("--step-scale", type=float, help="multiplies the paper's step size")


def run_simulate_bco(args: argparse.Namespace, checked_config: Any, progress: Any,
                     finish: Any) -> int:
    """Build the environment, fill the policy's loss class from it, simulate, emit."""
    import numpy as np

    from privbandit.shared.core.bco_simulator import simulate_bco
    from privbandit.shared.core.environments.bco import BCOEnvironment
    from privbandit.shared.core.policies.bco import build_bco_policy

    d = 5 if args.d is None else args.d
    try:
        env = BCOEnvironment(args.env, d, np.random.default_rng(np.random.SeedSequence(
            [args.seed, 0xBC0])), radius=args.radius, loss_bound=args.loss_bound,
            noise=args.loss_noise, drift_period=args.drift_period)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.K is not None:
        print("note: --K does not apply to BCO environments; ignored", file=sys.stderr)
    extra = {"radius": env.R, "loss_bound": env.B, "lipschitz": env.lipschitz,
             "smoothness": env.smoothness, "strong_convexity": env.strong_convexity}
    config = checked_config(args, d, extra=extra)
    if config is None:
        return 2
    started = time.perf_counter()
    with progress(args.T * args.runs, f"{args.algo} on {args.env}",
                  disable=args.no_progress) as advance:
        results, policy_params = simulate_bco(config, env, args.T, args.runs, args.seed,
                                              on_progress=advance)
    wall = time.perf_counter() - started
    params = {**config.model_dump(), **env.params(), **policy_params}
    privacy = build_bco_policy(config).ledger().model_dump()
    return int(finish(args, params, results, wall, privacy))
