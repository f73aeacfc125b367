"""``privbandit evaluate``: off-policy estimates of a policy on a logged stream — an ``.npz``
``bandit_feedback`` (``simulate --log``, or obp's dict saved with numpy), the Open Bandit
Dataset's CSV files, or the plain CSV / Parquet layout of ``shared.core.logfiles`` — printed
with what each estimates and the overlap diagnostic, and as JSON (``shared.core.ope``,
docs/api.md).

Exit status: 0; 2 for a bad flag or an unreadable log (one line naming the file, row or
column); 3 when an estimate was refused (its reason printed: a log that does not support the
evaluated policy, or replay on a non-uniform log)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from privbandit.simulate_cmd import ALL_CONFIGS, RANDOM, _checked_config, add_simulate_parser

METHODS = ("replay", "ips", "snips", "dr", "gain", "ips-exact")
REFUSED = 3


def add_evaluate_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="off-policy evaluation of a policy on a logged stream",
                       description=(
        "Estimate a policy's average reward from logged decisions: replay (Li et al. 2011; "
        "uniform logs; the policy learns from the events it matches, its reports drawn with "
        "its own device noise: its ONLINE value) and IPS, SNIPS and DR of the policy trained "
        "on the first --train-fraction of the log and frozen (its FROZEN value), each with a "
        "normal confidence interval and the overlap diagnostic (effective sample size, max "
        "weight, share of the policy's choices the log never takes). IPS and SNIPS are "
        "refused (exit 3) where that share exceeds --max-unsupported."))
    p.add_argument("--log", type=Path, required=True,
                   help="the log: an .npz bandit_feedback, an Open Bandit Dataset CSV (or its "
                        "directory, with item_context.csv), or a plain CSV / Parquet "
                        "(action, reward, pscore[, position][, timestamp], user features)")
    p.add_argument("--format", default="auto",
                   choices=("auto", "npz", "obd", "csv", "parquet"),
                   help="the log's format (default: from its name and header)")
    p.add_argument("--action-context", "--item-context", type=Path, dest="action_context",
                   help="the actions' features: OBD's item_context.csv (default: beside the "
                        "log), or a CSV of action and numeric columns for a plain log")
    p.add_argument("--encoding", choices=("shared", "disjoint"),
                   help="per-arm features of a log read from files: shared (one model over "
                        "user x item features; OBD's default) or disjoint (one block per "
                        "action, d = K x user features; a plain log's default without "
                        "--action-context)")
    p.add_argument("--positions", default="feature",
                   help="OBD / plain logs with a position column: feature (the one-hot of "
                        "the position joins the user features; default), pool (ignored), or "
                        "a position number (only its rounds)")
    p.add_argument("--user-columns", help="OBD: comma-separated user feature columns "
                                          "(default every user_feature_*)")
    p.add_argument("--item-columns", help="OBD: comma-separated item feature columns "
                                          "(default every item_feature_*)")
    p.add_argument("--no-affinity", action="store_true",
                   help="OBD: leave out the user-item affinity features")
    p.add_argument("--n-actions", type=int, help="plain logs: K (default: the largest action "
                                                 "+ 1, or the action-context rows)")
    p.add_argument("--algo", required=True, choices=sorted([*ALL_CONFIGS, RANDOM]),
                   help="the policy to evaluate; random: the uniform-random policy")
    p.add_argument("--methods", default="replay,ips,snips,dr",
                   help="comma-separated: replay, ips, snips, dr (default: these four); "
                        "gain (IPS of the value over the logging policy's), ips-exact (IPS "
                        "with the exact interval of 0/1 rewards under one weight)")
    p.add_argument("--repeats", type=int, default=5,
                   help="replays, each with its own policy and device noise (default 5)")
    p.add_argument("--train-fraction", type=float, default=0.5,
                   help="ips/snips/dr: the share of the log the frozen policy learns from")
    p.add_argument("--max-unsupported", type=float, default=None,
                   help="refuse IPS and SNIPS above this share of the policy's choices that "
                        "the log never takes (default 0.05)")
    p.add_argument("--level", type=float, default=0.95, help="confidence level")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the train/test splits and the policy's randomness (default 0)")
    add_policy_flags(p)
    p.add_argument("--json", dest="json_out", type=Path, help="write the result here")
    p.set_defaults(func=run_evaluate)


def add_policy_flags(p: argparse.ArgumentParser) -> None:
    """The policy parameters of a command that builds a policy without simulating it
    (``evaluate``): the common ones of ``simulate`` (see its help), same names and meanings."""
    g = p.add_argument_group("policy parameters (as for simulate)")
    # Each flag's help is simulate's own (one text to keep).
    simulate = argparse.ArgumentParser(add_help=False)
    add_simulate_parser(simulate.add_subparsers())
    helps = {flag: action.help
             for action in next(a for a in simulate._actions  # noqa: SLF001
                                if isinstance(a, argparse._SubParsersAction)  # noqa: SLF001
                                ).choices["simulate"]._actions  # noqa: SLF001
             for flag in action.option_strings}
    for flag, kind in (("epsilon", float), ("delta", float), ("eps0", float), ("alpha", float),
                       ("batch-size", int), ("batch-schedule", str), ("honest-fraction", float),
                       ("scale", float), ("m", int), ("confidence-scale", float),
                       ("noise-ridge", float), ("update-every", int), ("switching", float),
                       ("eta", float), ("failure-prob", float), ("lam", float)):
        g.add_argument(f"--{flag}", type=kind, help=helps[f"--{flag}"])
    g.add_argument("--regularizer", choices=["paper", "clip", "noise"],
                   help=helps["--regularizer"])
    g.add_argument("--paper", action="store_true", help="the papers' settings, not the defaults")
    g.add_argument("--aggregation", choices=["reports", "secure-sum"], default="secure-sum",
                   help=helps["--aggregation"])


def _columns(text: str | None) -> list[str] | None:
    return None if text is None else [c.strip() for c in text.split(",") if c.strip()]


def read_feedback(args: argparse.Namespace) -> dict[str, Any]:
    """The log of ``--log`` and its reading flags (``LogFormatError``: one line)."""
    from privbandit.shared.core.logfiles import read_any

    positions: str | int = args.positions
    return read_any(args.log, fmt=args.format, action_context=args.action_context,
                    positions=positions, encoding=args.encoding,
                    user_columns=_columns(args.user_columns),
                    item_columns=_columns(args.item_columns), affinity=not args.no_affinity,
                    n_actions=args.n_actions)


def run_evaluate(args: argparse.Namespace) -> int:
    import numpy as np

    from privbandit.shared.core import ope
    from privbandit.shared.core.logfiles import LogFormatError
    from privbandit.shared.core.logged import feature_dimension
    from privbandit.shared.core.overlap import MAX_UNSUPPORTED
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
    max_unsupported = MAX_UNSUPPORTED if args.max_unsupported is None else args.max_unsupported
    if not 0 <= max_unsupported <= 1:
        print("error: --max-unsupported must lie in [0, 1]", file=sys.stderr)
        return 2
    try:
        feedback = read_feedback(args)
        d = feature_dimension(feedback)
    except (LogFormatError, ValueError) as exc:
        print(f"error: cannot read {args.log}: {exc}", file=sys.stderr)
        return 2
    config = _checked_config(args, d, extra={"K": feedback["n_actions"]}
                             if args.algo == "lplr" else None)
    if config is None:
        return 2
    out: dict[str, Any] = {"algo": args.algo, "log": str(args.log),
                           "n_rounds": feedback["n_rounds"], "n_actions": feedback["n_actions"],
                           "d": d, "feature_map": feedback.get("feature_map", "flat"),
                           "positions": feedback.get("positions"),
                           "level": args.level, "seed": args.seed, "params": config.model_dump(),
                           "estimates": {}, "refused": {}}
    try:
        if "replay" in methods:
            try:
                res = ope.replay(feedback, lambda rng: make_policy(config, rng), args.repeats,
                                 args.seed, args.level)
                out["estimates"]["replay"] = {**res.estimate.to_dict(), "replays": res.values,
                                              "kept_of": feedback["n_rounds"]}
            except ValueError as exc:
                if "uniform" not in str(exc) and "never took" not in str(exc):
                    raise
                out["refused"]["replay"] = str(exc)
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
            ev = ope.evaluate_frozen(feedback, policy, rest, q, tuple(frozen), args.level,
                                     train=train, max_unsupported=max_unsupported)
            out["estimates"].update({k: v.to_dict() for k, v in ev.items()})
            out["refused"].update(ev.refused)
            out["overlap"] = ev.overlap.to_dict()
            out["warnings"] = {k: list(v) for k, v in ev.warnings.items()}
            out["frozen"] = {"train_rounds": cut, "eval_rounds": n - cut,
                             "model_version": int(policy.model.version),
                             "estimand": ev.estimand}
    except (ValueError, TypeError, NotImplementedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report_lines(args, out, feedback)))
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(out, indent=2, allow_nan=False) + "\n")
        print(f"wrote {args.json_out}")
    return REFUSED if out["refused"] else 0


def report_lines(args: argparse.Namespace, out: dict[str, Any], feedback: dict[str, Any]
                 ) -> list[str]:
    """The printed report: the log, then each estimate under what it estimates, the overlap
    diagnostic and its warnings, and the refusals."""
    how = {"feature": "the position's one-hot joins the user features",
           "pool": "positions pooled (ignored)"}
    pos = out["positions"]
    lines = [f"{args.algo} on {args.log} ({out['n_rounds']} rounds, K={out['n_actions']}, "
             f"d={out['d']}, {out['feature_map']} features"
             + ("" if pos is None else
                f"; positions: {how.get(pos, f'position {pos} only')}") + ")"]

    def row(name: str, e: dict[str, Any]) -> str:
        return (f"  {name:<9} {e['value']:.4f}  [{e['low']:.4f}, {e['high']:.4f}]  "
                f"({e['level']:.0%}, n={e['n']})")

    est = out["estimates"]
    if "replay" in est:
        lines.append(f"ONLINE value (replay: the policy learning as it goes, over the "
                     f"{est['replay']['n']} of {out['n_rounds']} rounds it kept)")
        lines.append(row("replay", est["replay"]))
        if est["replay"]["stderr"] == 0:
            m = est["replay"]["n"]
            lines.append(f"  warning: every kept reward is {est['replay']['value']:g}: the "
                         f"normal interval is degenerate (for 0/1 rewards, a rate up to "
                         f"{min(1.0, 3 / m):.3g} is not ruled out at 95%: the rule of three)")
    if "frozen" in out:
        f = out["frozen"]
        lines.append(f"FROZEN value (the policy trained on rounds [0, {f['train_rounds']}) "
                     f"with its device noise, then fixed; valued on the other "
                     f"{f['eval_rounds']})")
        lines.extend(row(k, e) for k, e in est.items() if k != "replay")
        o = out["overlap"]
        bound = "" if o["unsupported_exact"] else " (at least)"
        lines.append(f"  overlap: ESS {o['ess']:.1f} of {o['n']} rounds, max weight "
                     f"{o['max_weight']:.3g}, unsupported share {o['unsupported']:.3f}{bound}")
        for w in o["warnings"]:
            lines.append(f"  warning: {w}")
        for k, ws in out["warnings"].items():
            lines.extend(f"  warning{'' if k == 'all' else f' ({k})'}: {w}" for w in ws)
    for k, why in out["refused"].items():
        lines.append(f"  refused {k}: {why}")
    return lines
