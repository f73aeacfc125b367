"""``privbandit evaluate``: off-policy estimates of a policy on a logged ``bandit_feedback``
(``simulate --log``), printed and as JSON (``shared.core.ope``, docs/api.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from privbandit.simulate_cmd import ALL_CONFIGS, RANDOM, _checked_config, add_policy_flags

METHODS = ("replay", "ips", "snips", "dr")


def add_evaluate_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="off-policy evaluation of a policy on a logged stream",
                       description=(
        "Estimate a policy's average reward from logged decisions (an .npz written by "
        "'simulate --log'): replay (Li et al. 2011; uniform logs; the policy learns from the "
        "events it matches, its reports drawn with its own device noise) and IPS, SNIPS and "
        "DR of the policy trained on the first --train-fraction of the log and frozen, "
        "each with a normal confidence interval."))
    p.add_argument("--log", type=Path, required=True, help="the logged bandit_feedback (.npz)")
    p.add_argument("--algo", required=True, choices=sorted([*ALL_CONFIGS, RANDOM]))
    p.add_argument("--methods", default="replay,ips,snips,dr",
                   help="comma-separated: replay, ips, snips, dr (default all)")
    p.add_argument("--repeats", type=int, default=5,
                   help="replays, each with its own policy and device noise (default 5)")
    p.add_argument("--train-fraction", type=float, default=0.5,
                   help="ips/snips/dr: the share of the log the frozen policy learns from")
    p.add_argument("--level", type=float, default=0.95, help="confidence level")
    p.add_argument("--seed", type=int, default=0)
    add_policy_flags(p)
    p.add_argument("--json", dest="json_out", type=Path, help="write the result here")
    p.set_defaults(func=run_evaluate)


def run_evaluate(args: argparse.Namespace) -> int:
    import numpy as np

    from privbandit.shared.core import ope
    from privbandit.shared.core.logged import load_feedback
    from privbandit.shared.core.simulator import make_policy

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        print(f"error: unknown method(s) {unknown}; known: {', '.join(METHODS)}",
              file=sys.stderr)
        return 2
    if not 0 < args.train_fraction < 1 or args.repeats < 1:
        print("error: --train-fraction must lie in (0, 1) and --repeats be >= 1",
              file=sys.stderr)
        return 2
    try:
        feedback = load_feedback(args.log)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: cannot read {args.log}: {exc}", file=sys.stderr)
        return 2
    from privbandit.shared.core.logged import arm_features

    d = int(arm_features(feedback, 1).shape[2])
    config = _checked_config(args, d, extra={"K": feedback["n_actions"]}
                             if args.algo == "lplr" else None)
    if config is None:
        return 2
    out: dict[str, Any] = {"algo": args.algo, "log": str(args.log),
                           "n_rounds": feedback["n_rounds"], "n_actions": feedback["n_actions"],
                           "level": args.level, "seed": args.seed, "params": config.model_dump(),
                           "estimates": {}}
    try:
        if "replay" in methods:
            res = ope.replay(feedback, lambda rng: make_policy(config, rng), args.repeats,
                             args.seed, args.level)
            out["estimates"]["replay"] = {**res.estimate.to_dict(), "replays": res.values}
        frozen = [m for m in methods if m != "replay"]
        if frozen:
            n = feedback["n_rounds"]
            cut = int(round(args.train_fraction * n))
            train, rest = slice(0, cut), slice(cut, n)
            streams = np.random.SeedSequence([args.seed, 1]).spawn(2)
            policy_rng, device_rng = (np.random.default_rng(s) for s in streams)
            policy = ope.train_on_log(feedback, make_policy(config, policy_rng), train,
                                      device_rng)
            q = ope.RidgeRewardModel.fit(feedback, train)
            ests = ope.evaluate_frozen(feedback, policy, rest, q, tuple(frozen), args.level)
            out["estimates"].update({k: v.to_dict() for k, v in ests.items()})
            out["frozen"] = {"train_rounds": cut, "eval_rounds": n - cut,
                             "model_version": int(policy.model.version)}
    except (ValueError, TypeError, NotImplementedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    lines = [f"{args.algo} on {args.log} ({out['n_rounds']} rounds, K={out['n_actions']})"]
    for name, e in out["estimates"].items():
        lines.append(f"  {name:<7} {e['value']:.4f}  [{e['low']:.4f}, {e['high']:.4f}]  "
                     f"({e['level']:.0%}, n={e['n']})")
    print("\n".join(lines))
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(out, indent=2, allow_nan=False) + "\n")
        print(f"wrote {args.json_out}")
    return 0
