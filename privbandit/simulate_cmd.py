"""``privbandit simulate`` (spec §6): the in-process simulator, its JSON, summary and plot."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from privbandit.bco_cmd import add_bco_arguments
from privbandit.config_flags import add_config_flags, flag_of, generated_fields, given_params
from privbandit.shared.core.environments import BCO_ENVIRONMENTS, ENVIRONMENTS
from privbandit.shared.core.environments.mab import REWARD_DISTS
from privbandit.shared.core.policies.registry import REGISTRY
from privbandit.simulation import RANDOM as RANDOM  # evaluate_cmd's import
from privbandit.simulation import (
    Request,
    SimulationError,
    check_intercept,
    resolve_config,
    run,
)
from privbandit.summary import fmt, ledger_lines, person_lines

if TYPE_CHECKING:  # imported where used (the CLI starts without loading them)
    from rich.progress import Progress

ALL_CONFIGS = {algo: e.config for algo, e in REGISTRY.items()}

# The config fields with a hand-written flag below (its help says which policies use it and
# how; ``--first-episode`` also parses ``auto``); every other config field gets a generated one
# (``config_flags``). A flag the chosen policy does not use is reported, not silently dropped, so
# a user never believes a parameter was applied when it was not.
HAND_FIELDS = (
    "eps0", "epsilon", "batch_size", "regularizer", "switching", "epsilon_dist", "eps_min",
    "sigmoid", "noise", "honest_fraction", "batch_schedule", "encoding", "u_weight", "intercept",
    "batch_weight_power", "first_episode", "perturb",
)
FLAG_FIELDS = [*HAND_FIELDS, *generated_fields(HAND_FIELDS)]


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
    p.add_argument("--runs", type=int, default=1,
                   help="independent runs (seeds --seed, --seed+1, ...): the JSON reports their "
                        "mean and spread (default 1)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the first run's environment and policy randomness (default 0)")
    p.add_argument("--eps0", type=float,
                   help="sblb: fixed LDP ε0 of every report (instead of the central --epsilon)")
    p.add_argument("--epsilon", type=float,
                   help="ldp-linucb/ldp-mab: LDP ε; adar-oful/adar-ucb: RDP ε; heldp-ucb-*: every "
                        "user's level; ddp-linucb: central ε of the batch sums; sblb: central ε "
                        "after shuffling at --delta (default 1; each batch length gets the "
                        "largest ε0 meeting it under --aggregation's accountant)")
    p.add_argument("--central-epsilon", type=float,
                   help="adar-oful/adar-gope/adar-ucb: the (ε, δ)-DP target instead of the RDP "
                        "--epsilon: sets the RDP ε at --alpha whose ledger states this central ε "
                        "at --delta (1 at δ = 1e-6 and α = 2 is RDP ε 0.04871)")
    p.add_argument("--batch-size", type=int,
                   help="sblb, ddp-linucb: shuffler batch l (fixed batches)")
    p.add_argument("--batch-schedule",
                   help="ddp-linucb, sblb: fixed:L (= --batch-size L) or geometric:L0,GROWTH,CAP, "
                        "batch k of length min(CAP, L0·GROWTH^k), each with its own noise "
                        "(default geometric:auto,2,100000: L0 auto = 37.5 × one batch's noise "
                        "sd (50 × with --noise devices), 453 at ε = 1 and 127 at ε = 4 on "
                        "linear (centered encoding), 527 and 148 with frobenius; "
                        "--paper: fixed:1000)")
    p.add_argument("--noise", choices=["aggregators", "devices"],
                   help="ddp-linucb: who adds the Skellam noise (default aggregators: the "
                        "shuffler and the analyzer each add it, no device can lower it; devices: "
                        "each device adds a share, the guarantee holds while ⌈γ l⌉ do)")
    p.add_argument("--honest-fraction", type=float,
                   help="ddp-linucb --noise devices: γ, the guarantee holds if ⌈γ l⌉ devices "
                        "per batch add noise")
    p.add_argument("--regularizer", choices=["paper", "clip", "noise"],
                   help="paper (Eq. 8 / Alg. 5), clip (eigenvalue clipping, practical) or, "
                        "ddp-linucb, sblb and ldp-linucb, noise (ridge and width from the noise "
                        "added so far)")
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
        ("--intercept", "ddp-linucb, ldp-linucb: c, every context has x[0] = c (ddp-linucb: "
                        "or the sum over --intercept-coords) (default: the environment's, 1/√2 "
                        "on linear, fixed-linear and logistic; with its coordinates where it "
                        "declares them, e.g. every block's start of per-arm features)"),
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
                        "practical defaults (its registry entry's, listed per policy in "
                        "docs/simulator.md); with it, the papers' settings "
                        "(e.g. ddp-linucb: fixed batches of 1000, confidence scale 1, the "
                        "paper's regularizer and encoding; sblb: ε0 = 1, m = 1; adar-oful: Alg. "
                        "4's episodes; ldp-linucb: no perturbation; linucb, ucb: width 1; bco, "
                        "bco2: the paper's step size). Flags "
                        "given explicitly win either way; privacy is the same (the noise is "
                        "sized for the stated guarantee)")
    p.add_argument("--switching", type=float,
                   help="linucb/adar-oful: det growth C (adar-oful default 8; --paper: 0.5)")
    p.add_argument("--first-episode", type=first_episode_arg,
                   help="adar-oful: reports before the first noisy release, or auto = 50 σ_Y/L "
                        "(default auto: 227 at central ε = 1, i.e. RDP (2, 0.04871); --paper: 1, "
                        "switch from the first report)")
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
    add_bco_arguments(p)
    add_config_flags(p, skip=HAND_FIELDS)
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
    p.add_argument("--explore", metavar="KIND:VALUE",
                   help="decide with exploration, each choice with its exact propensity (an "
                        "exploring logging policy for --log): epsilon-greedy:EPS (1-EPS the "
                        "policy's arm, EPS uniform) or softmax:TAU (exp(index/TAU)); a "
                        "service task's setting: exploration = \"KIND:VALUE\"")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_simulate)


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
    and the flags the policy does not use (``simulation.resolve_config``, the library's)."""
    env = getattr(args, "env", None)
    config, ignored = resolve_config(
        args.algo, d=d, K=K, env=env if isinstance(env, str) else None,
        T=getattr(args, "T", None), paper=bool(getattr(args, "paper", False)),
        aggregation=getattr(args, "aggregation", None) or "secure-sum",
        params=given_params(args, FLAG_FIELDS), env_K=getattr(args, "K", None),
        central_epsilon=getattr(args, "central_epsilon", None), extra=extra)
    return config, [flag_of(name) for name in ignored]


def request_of(args: argparse.Namespace) -> Request:
    """The simulation the flags describe (``simulation.run`` serves the library too)."""
    return Request(
        algo=args.algo, env=args.env, T=args.T, runs=args.runs, seed=args.seed, d=args.d,
        K=args.K, params=given_params(args, FLAG_FIELDS), paper=args.paper,
        aggregation=args.aggregation, central_epsilon=args.central_epsilon,
        means=None if args.means is None else _means(args.means),
        reward_dist=args.reward_dist, users=args.users, contributions=args.contributions,
        user_offset=args.user_offset, radius=args.radius, loss_bound=args.loss_bound,
        loss_noise=args.loss_noise, drift_period=args.drift_period,
        log=args.log is not None, explore=args.explore, note=_note)


def _means(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",")]
    except ValueError as exc:
        raise SimulationError(f"--means: {exc}") from exc


def _note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr)


def run_simulate(args: argparse.Namespace) -> int:
    """``privbandit simulate``: ``simulation.run`` of the flags' request, printed and written."""
    try:
        outcome = run(request_of(args), functools.partial(_progress, disable=args.no_progress))
    except SimulationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = outcome.summary
    if args.log is not None and outcome.feedback is not None:
        from privbandit.shared.core.logged import save_feedback

        feedback = outcome.feedback
        save_feedback(args.log, feedback)
        out["log"] = {"path": str(args.log), "n_rounds": feedback["n_rounds"],
                      "n_actions": feedback["n_actions"], "feature_map": feedback["feature_map"]}
    return _emit(out, args)


def _checked_config(args: argparse.Namespace, d: int | None, **kw: Any) -> Any:
    """The config, with notes on unused flags; None (an error printed) if anything is invalid
    (``evaluate``'s policy from its flags)."""
    try:
        config, ignored = build_config(args, d, **kw)
        if ignored:
            _note(f"{args.algo} does not use {', '.join(ignored)}; ignored")
        env = getattr(args, "env", None)
        check_intercept(args.algo, config, env if isinstance(env, str) else None,
                        getattr(args, "K", None))
    except SimulationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    if getattr(args, "T", 1) < 1 or getattr(args, "runs", 1) < 1:
        print("error: --T and --runs must be >= 1", file=sys.stderr)
        return None
    return config


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
    lines += person_lines(p.get("per_person"))
    if out.get("withheld_mean") is not None:
        lines.append(f"  returning users   {out['params'].get('users')} persons; reports "
                     f"withheld {out['withheld_mean']:.0f} per run; at most "
                     f"{out['max_reports_per_person']} per person")
    print("\n".join(lines))
