"""``privbandit simulate`` (spec §6): the in-process simulator, its JSON, summary and plot."""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from privbandit.bco_cmd import add_bco_arguments, run_simulate_bco
from privbandit.shared.core.environments import BCO_ENVIRONMENTS, ENVIRONMENTS
from privbandit.shared.core.environments.mab import REWARD_DISTS
from privbandit.shared.core.logged import UniformConfig
from privbandit.shared.core.policies.families import ARMS, BCO_FAMILY, LINEAR, PHASE
from privbandit.shared.core.policies.registry import REGISTRY
from privbandit.summary import fmt, ledger_lines

if TYPE_CHECKING:  # imported where used (the CLI starts without loading them)
    from rich.progress import Progress

    from privbandit.shared.core.logged import DecisionLog
    from privbandit.shared.core.simulator import RunResult

ALL_CONFIGS = {algo: e.config for algo, e in REGISTRY.items()}
# ``--algo random``: the uniform-random logging policy (not a registered policy: it learns
# nothing; the logging policy of a uniform log for replay, ``--log``).
RANDOM = "random"
BCO_ALGOS = [algo for algo, e in REGISTRY.items() if e.family is BCO_FAMILY]

# Command-line flag → config field. A flag the chosen policy does not use is reported, not silently
# dropped, so a user never believes a parameter was applied when it was not.
FLAG_FIELDS = {
    "eps0": "eps0",
    "epsilon": "epsilon",
    "delta": "delta",
    "alpha": "alpha",
    "batch_size": "batch_size",
    "m": "m",
    "confidence_scale": "confidence_scale",
    "regularizer": "regularizer",
    "update_every": "update_every",
    "switching": "switching",
    "eta": "eta",
    "failure_prob": "failure_prob",
    "lam": "lam",
    "epsilon_dist": "epsilon_dist",
    "eps_min": "eps_min",
    "sigmoid": "sigmoid",
    "black_box": "black_box",
    "beta": "beta",
    "calibration": "calibration",
    "step_scale": "step_scale",
    "honest_fraction": "honest_fraction",
    "noise": "noise",
    "scale": "scale",
    "batch_schedule": "batch_schedule",
    "noise_ridge": "noise_ridge",
    "encoding": "encoding",
    "u_weight": "u_weight",
    "intercept": "intercept",
    "batch_weight_power": "batch_weight_power",
    "first_episode": "first_episode",
    "perturb": "perturb",
}


def add_simulate_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="run the in-process simulator", description=(
        "Simulate T users of one policy on one environment, with the whole device → shuffler → "
        "analyzer pipeline in memory. Writes the JSON described in docs/simulator.md "
        "('Options and output')."))
    p.add_argument("--algo", required=True, choices=sorted([*ALL_CONFIGS, RANDOM]),
                   help="the policy; random: the uniform-random logging policy (for --log)")
    p.add_argument("--env", default="linear", type=env_arg,
                   help=f"one of {', '.join([*ENVIRONMENTS, 'mab', *BCO_ENVIRONMENTS])}, or "
                        "package.module:Class, an Environment subclass taking (d, K, rng) "
                        "(docs/api.md)")
    p.add_argument("--d", type=int, default=None,
                   help="feature dimension (default 5; digits 40 = 10 classes × 4 PCs; letter 52 = "
                        "26 classes × 2 PCs)")
    p.add_argument("--K", type=int, default=None,
                   help="arms per round (default 20; fixed-linear: the arm set, up to 10⁴; "
                        "digits: 10; letter: 26; mab: the number of --means)")
    p.add_argument("--T", type=int, default=100_000, help="users (rounds)")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eps0", type=float,
                   help="sblb: fixed LDP ε0 of every report (instead of the central --epsilon)")
    p.add_argument("--epsilon", type=float,
                   help="ldp-linucb/ldp-mab: LDP ε; adar-oful/adar-ucb: RDP ε; heldp-ucb-*: every "
                        "user's level; ddp-linucb: central ε of the batch sums; sblb: central ε "
                        "after shuffling at --delta (default 1; each batch length gets the "
                        "largest ε0 meeting it under --aggregation's accountant)")
    p.add_argument("--delta", type=float, help="privacy δ (LDP δ, or of the central figure)")
    p.add_argument("--alpha", type=float, help="adar-oful: Rényi order")
    p.add_argument("--central-epsilon", type=float,
                   help="adar-oful/adar-gope/adar-ucb: the (ε, δ)-DP target instead of the RDP "
                        "--epsilon: sets the RDP ε at --alpha whose ledger states this central ε "
                        "at --delta (1 at δ = 1e-6 and α = 2 is RDP ε 0.04871)")
    p.add_argument("--batch-size", type=int,
                   help="sblb, ddp-linucb: shuffler batch l (fixed batches)")
    p.add_argument("--batch-schedule",
                   help="ddp-linucb, sblb: fixed:L (= --batch-size L) or geometric:L0,GROWTH,CAP, "
                        "batch k of length min(CAP, L0·GROWTH^k), each with its own noise "
                        "(default geometric:auto,2,100000: L0 auto = 50 × one batch's noise "
                        "sd, 497 at ε = 1, 139 at ε = 4 with the default frobenius encoding; "
                        "--paper: fixed:1000)")
    p.add_argument("--noise", choices=["aggregators", "devices"],
                   help="ddp-linucb: who adds the Skellam noise (default aggregators: the "
                        "shuffler and the analyzer each add it, no device can lower it; devices: "
                        "each device adds a share, the guarantee holds while ⌈γ l⌉ do)")
    p.add_argument("--honest-fraction", type=float,
                   help="ddp-linucb --noise devices: γ, the guarantee holds if ⌈γ l⌉ devices "
                        "per batch add noise")
    p.add_argument("--scale", type=float, help="ddp-linucb: quantization scale s (default 128)")
    p.add_argument("--m", type=int, help="sblb: bits per coordinate")
    p.add_argument("--confidence-scale", type=float, help="multiplies β (1 = paper)")
    p.add_argument("--regularizer", choices=["paper", "clip", "noise"],
                   help="paper (Eq. 8 / Alg. 5), clip (eigenvalue clipping, practical) or, "
                        "ddp-linucb, sblb and ldp-linucb, noise (ridge and width from the noise "
                        "added so far)")
    p.add_argument("--noise-ridge", type=float,
                   help="ddp-linucb, sblb, ldp-linucb --regularizer noise: κ in "
                        "c_t = λ + κ·2σ_t√d")
    p.add_argument("--encoding",
                   choices=["upper", "frobenius", "centered", "auto", "plain", "centered-upper"],
                   help="ddp-linucb: released statistics, upper (upper(x xᵀ), r x), frobenius "
                        "(off-diagonals × √2, r x × --u-weight, exact joint sensitivity), "
                        "centered (frobenius with (r − ½) x; needs an intercept) or auto "
                        "(default: centered where the contexts have an intercept, else "
                        "frobenius; --paper: upper). ldp-linucb: the report, plain (Alg. 5), "
                        "frobenius, centered, centered-upper (off-diagonals once, (r − ½) x) or "
                        "auto (centered where the contexts have an intercept, else plain)")
    # The linear noisy-statistics policies' real-valued knobs (their configs' fields).
    for flag, text in (
        ("--intercept", "ddp-linucb, ldp-linucb: c, every context has x[0] = c (default: the "
                        "environment's, 1/√2 on linear, fixed-linear and logistic)"),
        ("--u-weight", "ddp-linucb, ldp-linucb: weight of the reward part r x (or (r − ½) x) in "
                       "the released vector (default 1; auto → centered: the tuned one)"),
        ("--batch-weight-power", "ddp-linucb: weight batch j's sums by (l_j/l_ref)^p in the "
                                 "estimate (p this; default 0, every batch alike)"),
        ("--perturb", "ldp-linucb/ldp-glb: publish θ̃ plus ρ × a draw of its own LDP-noise "
                      "distribution (ρ this; 0: θ̃ itself)"),
    ):
        p.add_argument(flag, type=float, help=text)
    p.add_argument("--paper", action="store_true",
                   help="the papers' exact settings: without it, each policy uses its measured "
                        "practical defaults (its config's PRACTICAL, listed per policy in "
                        "docs/simulator.md); with it, the papers' settings "
                        "(e.g. ddp-linucb: fixed batches of 1000, confidence scale 1, the "
                        "paper's regularizer and encoding; sblb: ε0 = 1, m = 1; adar-oful: Alg. "
                        "4's episodes; ldp-linucb: no perturbation). Flags "
                        "given explicitly win either way; privacy is the same (the noise is "
                        "sized for the stated guarantee)")
    p.add_argument("--update-every", type=int, help="ldp-linucb: publish every N reports")
    p.add_argument("--switching", type=float,
                   help="linucb/adar-oful: det growth C (adar-oful default 8; --paper: 0.5)")
    p.add_argument("--first-episode", type=first_episode_arg,
                   help="adar-oful: reports before the first noisy release, or auto = 50 σ_Y/L "
                        "(default auto: 227 at central ε = 1, i.e. RDP (2, 0.04871); --paper: 1, "
                        "switch from the first report)")
    p.add_argument("--eta", type=float, help="sblb: det growth η")
    p.add_argument("--failure-prob", type=float, help="δ of the confidence set")
    p.add_argument("--lam", type=float, help="base ridge regularizer λ")
    mab = p.add_argument_group("multi-armed tasks (--env mab)")
    mab.add_argument("--means", help="arm means m1,m2,... (default: 0.9, then 0.8 … 0.1)")
    mab.add_argument("--reward-dist", choices=list(REWARD_DISTS), default="bernoulli",
                     help="reward laws; gaussian (unbounded) only with --sigmoid or ucb")
    mab.add_argument("--epsilon-dist", help="heldp-ucb-*: users' levels, fixed:E | "
                     "choice:e1,e2,... (0 = declines) | normal:MEAN,SD (truncated to [0, 100])")
    mab.add_argument("--eps-min", type=float, help="heldp-ucb-*: discard responses with ε_t < X "
                     "(default: ε when homogeneous, else the V_L/V_B heuristic's choice)")
    mab.add_argument("--sigmoid", action="store_true", default=None,
                     help="heldp-ucb-*: the -LS/-BS variants (rewards through s(r) first)")
    mab.add_argument("--black-box", choices=["tsallis-inf", "ucb"],
                     help="ldp-mab: the non-private algorithm (default tsallis-inf, the paper's)")
    mab.add_argument("--beta", type=float, help="adar-ucb: optimism β > 3 (default 4)")
    add_bco_arguments(p)
    p.add_argument("--aggregation", choices=["reports", "secure-sum"], default="secure-sum",
                   help="sblb: what the shuffler releases — only batch sums (secure summation, "
                        "default) or whole shuffled reports; changes the central ledger, not the "
                        "learning")
    p.add_argument("--users", type=int, default=None, metavar="N",
                   help="returning users (linear and mab, issue 24): the T rounds are visits "
                        "of N persons, each with her own context offset (mab: mean shift)")
    p.add_argument("--contributions", type=int, default=None, metavar="K",
                   help="with --users: each person's first K reports only (the device's "
                        "bound); the ledger adds the per-person guarantee")
    p.add_argument("--user-offset", type=float, default=0.5,
                   help="with --users: strength of a person's context offset (default 0.5; "
                        "mab: her mean shift is uniform in ±offset, use e.g. 0.05)")
    p.add_argument("--json", dest="json_out", type=Path, help="write the result here")
    p.add_argument("--plot", type=Path, help="write a regret plot (PNG) here")
    p.add_argument("--log", type=Path,
                   help="write every decision (context, action, reward, pscore = the deciding "
                        "model's propensity, position, expected_reward) as Open Bandit "
                        "Pipeline's bandit_feedback, an .npz (contextual environments, --runs 1; "
                        "docs/api.md)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_simulate)


def add_policy_flags(p: argparse.ArgumentParser) -> None:
    """The policy parameters of a command that builds a policy without simulating it
    (``evaluate``): the common ones of ``simulate`` (see its help), same names and meanings."""
    g = p.add_argument_group("policy parameters (as for simulate)")
    for flag, kind in (("epsilon", float), ("delta", float), ("eps0", float), ("alpha", float),
                       ("batch-size", int), ("batch-schedule", str), ("honest-fraction", float),
                       ("scale", float), ("m", int), ("confidence-scale", float),
                       ("noise-ridge", float), ("update-every", int), ("switching", float),
                       ("eta", float), ("failure-prob", float), ("lam", float)):
        g.add_argument(f"--{flag}", type=kind)
    g.add_argument("--regularizer", choices=["paper", "clip", "noise"])
    g.add_argument("--paper", action="store_true", help="the papers' settings, not PRACTICAL")
    g.add_argument("--aggregation", choices=["reports", "secure-sum"], default="secure-sum")


def env_arg(text: str) -> str:
    """``--env``: a built-in name or a ``package.module:Class`` path (loaded when used)."""
    if text in (*ENVIRONMENTS, "mab", *BCO_ENVIRONMENTS) or ":" in text:
        return text
    raise argparse.ArgumentTypeError(
        f"invalid choice {text!r}: one of {', '.join([*ENVIRONMENTS, 'mab', *BCO_ENVIRONMENTS])}"
        " or package.module:Class")


def first_episode_arg(text: str) -> int | str:
    """``--first-episode``: a number of reports, or ``auto`` (resolved by the config)."""
    return text if text == "auto" else int(text)


def build_config(args: argparse.Namespace, d: int | None, K: int | None = None,
                 extra: dict[str, Any] | None = None) -> tuple[Any, list[str]]:
    """The policy config from the flags (``d`` for linear policies, ``K`` for multi-armed ones),
    and the flags the policy does not use."""
    cls = ALL_CONFIGS[args.algo] if args.algo in ALL_CONFIGS else UniformConfig
    params: dict[str, Any] = {"d": d} if d is not None else {"K": K}
    if "intercept" in cls.model_fields and isinstance(getattr(args, "env", None), str):
        from privbandit.shared.core.environments import environment_intercept

        params["intercept"] = environment_intercept(args.env)
    params.update(extra or {})
    params.update(practical_defaults(cls, args))
    ignored = []
    for flag, field in FLAG_FIELDS.items():
        value = getattr(args, flag, None)
        if value is None:
            continue
        if field in cls.model_fields:
            params[field] = value
        else:
            ignored.append("--" + flag.replace("_", "-"))
    central = getattr(args, "central_epsilon", None)
    if central is not None:
        if "alpha" not in cls.model_fields:
            ignored.append("--central-epsilon")
        elif getattr(args, "epsilon", None) is not None:
            raise ValueError("give --epsilon (RDP) or --central-epsilon, not both")
        else:
            from privbandit.shared.core.accounting.ledgers import rdp_epsilon_for_central

            alpha = float(params.get("alpha", cls.model_fields["alpha"].default))
            delta = float(params.get("delta", cls.model_fields["delta"].default))
            params["epsilon"] = rdp_epsilon_for_central(alpha, central, delta)
    if "horizon" in cls.model_fields:
        params["horizon"] = getattr(args, "T", None) or 1
    if "accountant" in cls.model_fields:  # sblb: ε0 sized for what the shuffler releases
        params["accountant"] = getattr(args, "aggregation", "reports")
    return cls(**params), ignored


def practical_defaults(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The measured practical settings of ``cls`` (its ``PRACTICAL``), unless ``--paper``; a
    fixed ``--batch-size`` replaces the default schedule (it is a schedule itself)."""
    fixed = getattr(args, "batch_size", None) is not None
    if fixed and getattr(args, "batch_schedule", None) is not None:
        raise ValueError("give --batch-size L (fixed batches) or --batch-schedule, not both")
    if getattr(args, "paper", False):
        return {}
    practical = dict(getattr(cls, "PRACTICAL", {}))
    if fixed:
        practical.pop("batch_schedule", None)
    if getattr(args, "eps0", None) is not None:  # sblb's fixed ε0 replaces its central target
        practical.pop("epsilon", None)
    by_aggregation = dict(getattr(cls, "PRACTICAL_BY_AGGREGATION", {}).get(
        getattr(args, "aggregation", None), {}))
    if fixed:
        by_aggregation.pop("batch_schedule", None)
    practical.update(by_aggregation)
    return practical


def run_simulate(args: argparse.Namespace) -> int:

    from privbandit.shared.core.environments import environment_dimensions
    from privbandit.shared.core.simulator import simulate

    family = REGISTRY[args.algo].family if args.algo != RANDOM else LINEAR
    if args.log is not None and (family in (ARMS, BCO_FAMILY) or args.algo == "lplr"
                                 or args.runs != 1 or args.users is not None):
        print("error: --log records the contextual simulator's decisions (not mab, BCO or "
              "lplr, nor returning users) of one run (--runs 1)", file=sys.stderr)
        return 2
    if (family is BCO_FAMILY) != (args.env in BCO_ENVIRONMENTS):
        print(f"error: use the BCO policies ({', '.join(BCO_ALGOS)}) with the BCO "
              f"environments ({', '.join(BCO_ENVIRONMENTS)}) and only there", file=sys.stderr)
        return 2
    if args.env in BCO_ENVIRONMENTS:
        return run_simulate_bco(args, _checked_config, _progress, _finish)
    if (family is ARMS) != (args.env == "mab"):
        kind = "multi-armed" if family is ARMS else "linear"
        print(f"error: {args.algo} is a {kind} policy; use --env "
              f"{'mab' if kind == 'multi-armed' else 'linear or digits'}", file=sys.stderr)
        return 2
    if family is PHASE and args.env != "fixed-linear":
        print(f"error: {args.algo} eliminates arms of a fixed arm set; use --env fixed-linear",
              file=sys.stderr)
        return 2
    if args.users is None and args.contributions is not None:
        print("error: --contributions bounds returning users: give --users N", file=sys.stderr)
        return 2
    if args.users is not None and args.env not in ("linear", "mab"):
        print("error: returning users (--users) run on --env linear or mab", file=sys.stderr)
        return 2
    bad_k = args.contributions is not None and args.contributions < 1
    if args.users is not None and (args.users < 1 or bad_k or not args.user_offset >= 0):
        print("error: --users and --contributions must be >= 1, --user-offset >= 0",
              file=sys.stderr)
        return 2
    if args.env == "mab":
        return run_simulate_mab(args)
    if ":" in args.env:
        from privbandit.shared.core.environments import load_environment_class

        try:
            load_environment_class(args.env)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.means is not None or args.reward_dist != "bernoulli":
        print("note: --means and --reward-dist apply to --env mab only; ignored", file=sys.stderr)
    if args.K is None:
        args.K = 20
    if args.d is None:
        args.d = {"digits": 40, "letter": 52}.get(args.env, 5)
    d, K = environment_dimensions(args.env, args.d, args.K)
    if (d, K) != (args.d, args.K):
        print(f"note: env {args.env} uses d={d}, K={K} (requested d={args.d}, K={args.K})",
              file=sys.stderr)
    config = _checked_config(args, d, extra={"K": K} if args.algo == "lplr" else None)
    if config is None:
        return 2
    if args.algo == "ddp-linucb" and args.aggregation != "secure-sum":
        print("error: ddp-linucb is private only over the secure sum (--aggregation secure-sum)",
              file=sys.stderr)
        return 2
    # simulate's contract; lplr has its own simulator loop (per-layer block sums, docs/lplr.md)
    run: Callable[..., tuple[list[RunResult], dict[str, Any]]] = simulate
    if args.users is not None:
        if args.algo == "lplr":
            print("error: lplr has its own simulator loop; no returning users", file=sys.stderr)
            return 2
        run = functools.partial(_returning, population=_population(args))
    elif args.algo == "lplr":
        from privbandit.shared.core.lplr_simulator import simulate_lplr

        run = simulate_lplr

    started = time.perf_counter()
    total = args.T * args.runs
    logs: list[DecisionLog] = []
    kw: dict[str, Any] = {"logs": logs} if args.log is not None else {}
    with _progress(total, f"{args.algo} on {args.env}", disable=args.no_progress) as advance:
        results, env_params = run(config, args.env, K, args.T, args.runs, args.seed,
                                  on_progress=advance, **kw)
    wall = time.perf_counter() - started

    from privbandit.shared.core.simulator import make_policy

    policy = make_policy(config)
    ledger = policy.ledger(args.T, aggregation=args.aggregation)
    if args.users is not None:
        ledger = _person(policy, ledger, args)
    extra = {}
    if args.log is not None:
        from privbandit.shared.core.logged import save_feedback

        feedback = logs[0].bandit_feedback()
        save_feedback(args.log, feedback)
        extra["log"] = {"path": str(args.log), "n_rounds": feedback["n_rounds"],
                        "n_actions": feedback["n_actions"],
                        "feature_map": feedback["feature_map"]}
    return _finish(args, {**config.model_dump(), **env_params}, results, wall,
                   ledger.model_dump(), extra)


def _population(args: argparse.Namespace) -> Any:
    from privbandit.shared.core.returning import Population

    return Population(args.users, args.contributions, args.user_offset)


def _returning(config: Any, env: str, K: int, T: int, runs: int, seed: int, *,
               population: Any, on_progress: Callable[[int], None] | None = None,
               mab_env: Any = None) -> tuple[list[RunResult], dict[str, Any]]:
    from privbandit.shared.core.returning import simulate_returning

    return simulate_returning(config, env, K, T, runs, seed, population, on_progress,
                              mab_env=mab_env)


def _person(policy: Any, ledger: Any, args: argparse.Namespace) -> Any:
    """The ledger with the per-person guarantee of ``--contributions`` (none without)."""
    from privbandit.shared.core.policies.person import person_ledger

    return person_ledger(policy, ledger, args.contributions, "forever",
                         getattr(args, "aggregation", "reports") or "reports")


def run_simulate_mab(args: argparse.Namespace) -> int:
    """``--env mab``: a multi-armed policy on fixed arms (issue 8), the same JSON contract."""

    from privbandit.shared.core.environments.mab import MABEnvironment, default_means
    from privbandit.shared.core.mab_simulator import per_user_fractions, simulate_mab
    from privbandit.shared.core.policies import build_policy

    try:
        means = ([float(x) for x in args.means.split(",")] if args.means
                 else default_means(args.K or 20))
        if args.means and args.K is not None and args.K != len(means):
            raise ValueError(f"--K {args.K} but {len(means)} --means")
        env = MABEnvironment(means, args.reward_dist)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.d is not None:
        print("note: --d applies to linear environments; ignored", file=sys.stderr)
    extra = {}
    if args.algo == "ucb":
        extra["reward_sigma"] = env.subgaussian  # UCB's width for the environment's noise
    config = _checked_config(args, None, K=env.K, extra=extra)
    if config is None:
        return 2

    started = time.perf_counter()
    with _progress(args.T * args.runs, f"{args.algo} on mab",
                   disable=args.no_progress) as advance:
        try:
            if args.users is not None:
                results, _ = _returning(config, "mab", env.K, args.T, args.runs, args.seed,
                                        population=_population(args), on_progress=advance,
                                        mab_env=env)
            else:
                results = simulate_mab(config, env, args.T, args.runs, args.seed,
                                       on_progress=advance)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    wall = time.perf_counter() - started
    policy = build_policy(config)
    ledger = policy.ledger(args.T)
    if args.users is not None:
        ledger = _person(policy, ledger, args)
    privacy = ledger.model_dump()
    if privacy.get("per_user_epsilon") is not None:
        used, declined, reports = per_user_fractions(results)
        privacy["per_user_epsilon"].update(fraction_used=used / reports,
                                           fraction_declined=declined / reports)
    params = {**config.model_dump(), **env.params()}
    if args.users is not None:
        params.update(users=args.users, contributions=args.contributions,
                      user_offset=args.user_offset)
    return _finish(args, params, results, wall, privacy)


def _finish(args: argparse.Namespace, params: dict[str, Any], results: list[Any], wall: float,
            privacy: dict[str, Any], extra: dict[str, Any] | None = None) -> int:
    """Spec §6's JSON of a simulation (``summarize`` of the runs), printed, written, plotted;
    ``extra``: further keys (``log``: where ``--log`` wrote the decisions)."""
    from privbandit.shared.core.simulator import summarize

    out: dict[str, Any] = {"algo": args.algo, "env": args.env, "T": args.T, "runs": args.runs,
                           "seed": args.seed, "params": params}
    out.update(summarize(results))
    if getattr(args, "users", None) is not None:  # returning users: reports withheld per run
        import numpy as np

        out["withheld_mean"] = float(np.mean([r.extra["withheld"] for r in results]))
        out["max_reports_per_person"] = max(r.extra["max_reports_per_person"] for r in results)
    out["wall_seconds"] = wall
    out["privacy"] = privacy
    out.update(extra or {})
    return _emit(out, args)


def _checked_config(args: argparse.Namespace, d: int | None, **kw: Any) -> Any:
    """The config, with notes on unused flags; None (an error printed) if anything is invalid."""
    from pydantic import ValidationError

    try:
        config, ignored = build_config(args, d, **kw)
    except (ValidationError, ValueError) as exc:
        print(f"error: invalid parameters for {args.algo}:\n{exc}", file=sys.stderr)
        return None
    if ignored:
        print(f"note: {args.algo} does not use {', '.join(ignored)}; ignored", file=sys.stderr)
    if not _intercept_matches(args, config):
        return None
    if getattr(args, "T", 1) < 1 or getattr(args, "runs", 1) < 1:
        print("error: --T and --runs must be >= 1", file=sys.stderr)
        return None
    return config


def _intercept_matches(args: argparse.Namespace, config: Any) -> bool:
    """False (an error printed) if the config's encoding relies on an intercept c that the
    environment's contexts do not have (x[0] = c for every context: the encoding's noise is
    sized for it, and the randomizer refuses any other context)."""
    c = getattr(config, "encoding_intercept", None)
    env = getattr(args, "env", None)
    if c is None or not isinstance(env, str):
        return True
    from privbandit.shared.core.environments import environment_intercept
    from privbandit.shared.core.randomizers.base import off_intercept

    declared = environment_intercept(env)
    if declared is not None and not off_intercept(declared, c):
        return True
    has = ("declare no intercept (an Environment subclass states it as its `intercept`)"
           if declared is None else f"have x[0] = {declared:g}")
    print(f"error: {args.algo}'s {config.encoding} encoding needs every context to have "
          f"x[0] = --intercept {c:g}, but the {env} environment's contexts {has}; give the "
          "environment's intercept or another --encoding", file=sys.stderr)
    return False


def _emit(out: dict[str, Any], args: argparse.Namespace) -> int:
    """Print the summary, write the JSON and the plot."""
    _print_summary(out)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(out, indent=2, allow_nan=False) + "\n")
        print(f"wrote {args.json_out}")
    if args.plot:
        from privbandit.plots import regret_plot

        regret_plot(out, args.plot)
        print(f"wrote {args.plot}")
    return 0


class _progress:
    """A rich progress bar on stderr (a no-op when disabled or not installed)."""

    def __init__(self, total: int, label: str, disable: bool = False) -> None:
        self.total, self.label, self.disable = total, label, disable
        self._bar: Progress | None = None

    def __enter__(self) -> Callable[[int], None]:
        if self.disable:
            return lambda n: None
        try:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )
        except ImportError:  # pragma: no cover
            return lambda n: None
        bar = Progress(TextColumn("{task.description}"), BarColumn(),
                       MofNCompleteColumn(), TimeRemainingColumn(),
                       console=Console(stderr=True), transient=True)
        self._bar = bar
        bar.start()
        task = bar.add_task(self.label, total=self.total)
        return lambda n: bar.advance(task, n)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


def _print_summary(out: dict[str, Any]) -> None:
    p = out["privacy"]
    lines = [
        f"{out['algo']} on {out['env']}: T={out['T']}, runs={out['runs']}, seed={out['seed']}",
        f"  final regret      {out['final_regret_mean']:.1f} ± {out['final_regret_stderr']:.1f}"
        f"   (uniformly random policy: {out['random_regret_mean']:.1f})",
        f"  model updates     {out['model_updates_mean']:.1f}",
        f"  coverage          {fmt(out.get('coverage'))}   (published models whose confidence "
        f"set holds θ*)",
        f"  wall time         {out['wall_seconds']:.1f} s",
    ]
    lines += ledger_lines(p)  # with the per-user ε line of a task whose users choose ε_t
    person = p.get("per_person")
    if person is not None:
        def pair(eps: Any, delta: Any) -> str:
            return "null" if eps is None else f"ε={fmt(eps)}, δ={fmt(delta)}"

        lines.append(f"    per person        k={person['k']}: local "
                     f"{pair(person['ldp_epsilon'], person['ldp_delta'])}; central "
                     f"{pair(person['central_epsilon'], person['central_delta'])}")
    if out.get("withheld_mean") is not None:
        lines.append(f"  returning users   {out['params'].get('users')} persons; reports "
                     f"withheld {out['withheld_mean']:.0f} per run; at most "
                     f"{out['max_reports_per_person']} per person")
    print("\n".join(lines))
