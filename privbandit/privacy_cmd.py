"""``privbandit privacy``: the privacy ledger for given parameters, without running anything (§6).

Forward question: ``--threat-model shuffle --eps0 E0 --batch-size L --delta D [--T T --d D --m M]
[--aggregation reports|secure-sum]`` prints and writes the ledger, with the tight per-batch bound in
``central_epsilon`` and Garcelon Thm 5 in ``central_epsilon_paper``. ``--threat-model ldp`` takes
``--eps0`` (0/1 randomizer, pure LDP) or ``--epsilon`` (Gaussian randomizer, with ``--delta``);
``--threat-model central`` takes ``--epsilon`` (RDP ε) and ``--alpha``.

Inverse questions (shuffle only): ``--target-epsilon E --solve eps0 --batch-size L`` gives the
largest ε0 whose central ε at (L, δ) is at most E; ``--target-epsilon E --solve batch-size --eps0
E0`` gives the smallest batch size reaching E. The JSON then has a ``solution`` object and the
ledger is evaluated at the solution.

A guarantee per person (issue 24): ``--contributions K [--period P]`` adds the ``per_person``
object — the guarantee of a person who sends at most K reports per period, composed
(``shared.core.accounting.persons``). With it, ``--target-epsilon E`` is the per-person central ε
and the inverse questions are ``--solve k`` (the largest K reaching E; ``--contributions`` not
needed) and ``--solve eps0`` / ``--solve epsilon`` (the largest per-report ε0 — 0/1 randomizer,
ldp or shuffle — or ε — the Gaussian randomizer's, or central's RDP ε — for E at K).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from privbandit.shared.core.accounting.ledger import PrivacyLedger
from privbandit.summary import local_note

LEDGER_FIELDS = (
    "threat_model",
    "ldp_epsilon",
    "ldp_delta",
    "central_epsilon",
    "central_delta",
    "rdp_alpha",
    "rdp_epsilon",
    "central_epsilon_paper",
    "accounting",
)

T = TypeVar("T", int, float)


def _checked(
    convert: Callable[[str], T], noun: str, ok: Callable[[T], bool], requirement: str
) -> Callable[[str], T]:
    """An argparse ``type``: ``convert`` the text (else "not {noun}"), then require ``ok``."""

    def parse(text: str) -> T:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {noun}: {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {requirement}, got {text}")
        return value

    return parse


_positive_float = _checked(
    float, "a number", lambda v: v > 0 and math.isfinite(v), "a positive finite number"
)
_probability = _checked(float, "a number", lambda v: 0.0 < v < 1.0, "in (0, 1)")
_positive_int = _checked(int, "an integer", lambda v: v >= 1, "an integer >= 1")


def _rdp_order(text: str) -> float:
    value = _positive_float(text)
    if value <= 1.0:
        raise argparse.ArgumentTypeError(f"the Rényi order must be > 1, got {text}")
    return value


def add_privacy_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``privacy`` subcommand to ``subparsers`` and return its parser."""
    p = subparsers.add_parser(
        "privacy",
        help="compute the privacy ledger for given parameters",
        description=(
            "Compute the privacy ledger for given parameters without running "
            "anything, or answer an inverse question (largest ε0 / smallest batch size for a "
            "target central ε)."
        ),
    )
    p.add_argument("--threat-model", required=True, choices=["ldp", "shuffle", "central"],
                   help="who is trusted: no one (ldp: each report is private), the shuffler "
                        "(shuffle: the analyzer sees shuffled batches) or the analyzer (central: "
                        "the published models are private)")
    p.add_argument("--eps0", type=_positive_float, help="LDP ε0 of one report (0/1 randomizer)")
    p.add_argument("--batch-size", type=_positive_int, help="shuffler batch size l")
    p.add_argument("--delta", type=_probability, default=1e-6, help="δ (default 1e-6)")
    p.add_argument("--T", type=_positive_int, help="horizon, for Garcelon Thm 5")
    p.add_argument("--d", type=_positive_int, default=5, help="feature dimension (default 5)")
    p.add_argument("--m", type=_positive_int, default=1, help="bits per coordinate (default 1)")
    p.add_argument(
        "--epsilon", "--rdp-epsilon",
        type=_positive_float, dest="epsilon",
        help="ldp: target ε of the Gaussian randomizer; central: a Rényi-DP ε, at order "
             "--alpha (--rdp-epsilon says so; the (ε, δ) the ledger states is derived from it)",
    )
    p.add_argument("--alpha", type=_rdp_order, default=2.0, help="RDP order (default 2)")
    p.add_argument(
        "--aggregation",
        choices=["reports", "secure-sum"],
        default="secure-sum",
        help="shuffle transport: batch sums only (secure summation, default) or whole reports",
    )
    p.add_argument(
        "--target-epsilon", type=_positive_float, help="inverse question: target central ε"
    )
    p.add_argument(
        "--solve",
        choices=["eps0", "batch-size", "k", "epsilon"],
        help="inverse question: largest eps0 (given --batch-size) or smallest batch size "
        "(given --eps0) reaching --target-epsilon; per person (with --contributions): largest "
        "eps0 or epsilon per report, or the largest k (--solve k)",
    )
    p.add_argument(
        "--contributions", type=_positive_int, metavar="K",
        help="at most K reports per person and period: adds the per-person guarantee "
        "(per_person); with --target-epsilon, the target is the per-person central ε")
    p.add_argument("--period", default="forever",
                   help="the bound's period, in words (default forever); reported as given")
    p.add_argument("--json", dest="json_out", type=Path, help="write the ledger JSON here")
    p.set_defaults(func=run_privacy)
    return p


class _UsageError(Exception):
    pass


def _ledger(args: argparse.Namespace) -> tuple[PrivacyLedger, dict[str, Any] | None]:
    """The ledger for ``args`` and, for an inverse question, the ``solution`` object."""
    from privbandit.shared.core.accounting import ledgers

    tm = args.threat_model
    target, solve = getattr(args, "target_epsilon", None), getattr(args, "solve", None)
    if (target is None) != (solve is None):
        raise _UsageError("--target-epsilon and --solve go together")
    if solve is not None and tm != "shuffle":
        raise _UsageError("inverse questions (--solve) apply to --threat-model shuffle only")

    if tm == "ldp":
        if args.eps0 is not None and args.epsilon is not None:
            raise _UsageError(
                "ldp: give --eps0 (0/1 randomizer) or --epsilon (Gaussian randomizer), not both"
            )
        if args.eps0 is not None:
            return ledgers.ldp_binary_ledger(args.eps0), None
        if args.epsilon is not None:
            return ledgers.ldp_gaussian_ledger(args.epsilon, args.delta), None
        raise _UsageError("ldp needs --eps0 (0/1 randomizer) or --epsilon (Gaussian randomizer)")

    if tm == "central":
        if args.epsilon is None:
            raise _UsageError("central needs --epsilon (the RDP ε) and --alpha (default 2)")
        return ledgers.central_ledger(args.alpha, args.epsilon, args.delta), None

    # shuffle
    return _shuffle_ledger(args, target, solve)


def _shuffle_ledger(
    args: argparse.Namespace, target: float | None, solve: str | None
) -> tuple[PrivacyLedger, dict[str, Any] | None]:
    from privbandit.shared.core.accounting import ledgers, shuffle, sum_only

    # (ε0, l, δ, ...) → ledger; (target ε, l, δ) → the largest ε0; (ε0, target ε, δ) → the
    # smallest l (None: none up to the cap)
    build: Callable[..., PrivacyLedger]
    max_eps0: Callable[[float, int, float], float]
    min_batch: Callable[[float, float, float], int | None]
    if args.aggregation == "secure-sum":
        build = functools.partial(ledgers.shuffle_ledger, aggregation="secure-sum")
        cap = sum_only.MAX_BATCH_SIZE
        max_eps0 = functools.partial(sum_only.sum_only_max_eps0, d=args.d, m=args.m)
        min_batch = functools.partial(sum_only.sum_only_min_batch, d=args.d, m=args.m)
    else:
        build, cap = ledgers.shuffle_ledger, shuffle.MAX_BATCH_SIZE
        max_eps0, min_batch = shuffle.shuffle_max_eps0, shuffle.shuffle_min_batch
    eps0, batch = args.eps0, args.batch_size
    solution: dict[str, Any] | None = None
    if solve is not None:
        given, flag = (batch, "--batch-size") if solve == "eps0" else (eps0, "--eps0")
        if given is None:
            raise _UsageError(f"--solve {solve} needs {flag}")
        assert target is not None
        if solve == "eps0":
            eps0 = max_eps0(target, batch, args.delta)
        else:
            batch = min_batch(eps0, target, args.delta)
        solution = {"solve": solve, "target_epsilon": target, "eps0": eps0, "batch_size": batch}
        if batch is None:
            solution["reason"] = f"no batch size up to {cap} reaches the target"
            ledger = PrivacyLedger(
                threat_model="shuffle",
                ldp_epsilon=eps0,
                ldp_delta=0.0,
                central_delta=args.delta,
                accounting=(
                    f"no batch size up to {cap} brings the central ε of ε0={eps0:g} reports "
                    f"({args.aggregation}) to {target:g} at δ={args.delta:g}"
                ),
                central_epsilon_paper=None,
                aggregation=args.aggregation,
            )
            return ledger, solution
    else:
        missing = [f for f, v in (("--eps0", eps0), ("--batch-size", batch)) if v is None]
        if missing:
            raise _UsageError(f"shuffle needs {' and '.join(missing)}")
    assert eps0 is not None and batch is not None
    return build(eps0, batch, args.delta, T=args.T, d=args.d, m=args.m), solution


def _central_at(args: argparse.Namespace) -> Callable[[int], tuple[float, float]] | None:
    """A shuffle task's central (ε, δ) of one report in a batch of length n (None otherwise)."""
    from privbandit.shared.core.accounting import ledgers

    if args.threat_model != "shuffle" or args.eps0 is None:
        return None

    def at(n: int) -> tuple[float, float]:
        lg = ledgers.shuffle_ledger(args.eps0, n, args.delta, d=args.d, m=args.m,
                                    aggregation=args.aggregation)
        assert lg.central_epsilon is not None  # a shuffle ledger states its central ε
        return lg.central_epsilon, args.delta

    return at


def _person(args: argparse.Namespace, ledger: PrivacyLedger, k: int) -> dict[str, Any]:
    """The ``per_person`` object of ``ledger`` for at most k reports per person."""
    from privbandit.shared.core.accounting import persons

    return persons.person_figures(ledger, k, args.delta, args.period, _central_at(args),
                                  args.batch_size)


def _person_solution(args: argparse.Namespace) -> tuple[argparse.Namespace, dict[str, Any]]:
    """An inverse question per person: the arguments at the solution and the ``solution``."""
    from privbandit.shared.core.accounting import persons

    target, solve = args.target_epsilon, args.solve
    base = argparse.Namespace(**{**vars(args), "target_epsilon": None, "solve": None})

    def central(ns: argparse.Namespace, k: int) -> float | None:
        eps: float | None = _person(ns, _ledger(ns)[0], k)["central_epsilon"]
        return eps

    if solve == "k":
        k = persons.largest_k(lambda k: central(base, k), target)
        solution: dict[str, Any] = {"solve": "k", "target_epsilon": target, "k": k}
        if k == 0:
            solution["reason"] = "even one report exceeds the target"
        return argparse.Namespace(**{**vars(base), "contributions": max(k, 1)}), solution
    k = args.contributions
    if solve == "eps0" and args.threat_model == "central":
        raise _UsageError("central: solve for the RDP ε with --solve epsilon")
    if solve == "epsilon" and args.threat_model == "shuffle":
        raise _UsageError("shuffle: solve for the 0/1 randomizer's ε0 with --solve eps0")
    if args.threat_model == "shuffle" and args.batch_size is None:
        raise _UsageError("--solve eps0 per person needs --batch-size")
    other = "epsilon" if solve == "eps0" else "eps0"

    def at(value: float) -> float | None:
        return central(argparse.Namespace(**{**vars(base), solve: value, other: None}), k)

    value = persons.largest_report_epsilon(at, target)
    solution = {"solve": solve, "target_epsilon": target, "k": k, solve: value}
    if value is None:
        solution["reason"] = "no per-report ε reaches the target"
        return base, solution
    return argparse.Namespace(**{**vars(base), solve: value, other: None}), solution


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _summary(out: dict[str, Any]) -> str:
    rows = [
        ("threat model", out["threat_model"]),
        ("aggregation", out.get("aggregation")),
        ("LDP (ε, δ)", f"({_fmt(out['ldp_epsilon'])}, {_fmt(out['ldp_delta'])})"),
        ("", local_note(out["ldp_epsilon"], out["central_epsilon"]) or "—"),
        ("central (ε, δ)", f"({_fmt(out['central_epsilon'])}, {_fmt(out['central_delta'])})"),
        ("central ε, Garcelon Thm 5", _fmt(out.get("central_epsilon_paper"))),
        ("RDP (α, ε)", f"({_fmt(out['rdp_alpha'])}, {_fmt(out['rdp_epsilon'])})"),
    ]
    # A row whose figures do not apply (null in the JSON) is left out: no "null" for people.
    rows = [row for row in rows if row[1] not in (None, "—", "(—, —)")]
    person = out.get("per_person")
    if person is not None:
        rows.append((f"per person, k={person['k']}: LDP (ε, δ)",
                     f"({_fmt(person['ldp_epsilon'])}, {_fmt(person['ldp_delta'])})"))
        rows.append((f"per person, k={person['k']}: central (ε, δ)",
                     f"({_fmt(person['central_epsilon'])}, {_fmt(person['central_delta'])})"))
        if note := local_note(person["ldp_epsilon"], person["central_epsilon"], person["k"]):
            rows.insert(-1, ("", note))
    solution = out.get("solution")
    if solution is not None:
        key = {"eps0": "eps0", "batch-size": "batch_size"}.get(solution["solve"],
                                                              solution["solve"])
        rows.append((f"solution ({solution['solve']})", _fmt(solution[key])))
        if "reason" in solution:
            rows.append(("", solution["reason"]))
    width = max(len(name) for name, _ in rows)
    lines = ["privacy ledger"]
    lines += [f"  {name:<{width}}  {value}" for name, value in rows]
    lines.append(f"  {'accounting':<{width}}  {out['accounting']}")
    if person is not None:
        lines.append(f"  {'per person':<{width}}  {person['accounting']}")
    return "\n".join(lines)


def run_privacy(args: argparse.Namespace) -> int:
    """Run ``privbandit privacy``; 0 on success, 1 if an inverse question has no solution, 2 on
    invalid or missing parameters."""
    ledger: PrivacyLedger | None
    solution: dict[str, Any] | None
    try:
        if (args.target_epsilon is None) != (args.solve is None):
            raise _UsageError("--target-epsilon and --solve go together")
        person_solve = args.solve in ("k", "epsilon") or (
            args.solve == "eps0" and args.contributions is not None)
        if args.solve == "epsilon" and args.contributions is None:
            raise _UsageError("--solve epsilon (per report, for a per-person target) needs "
                              "--contributions")
        if person_solve:
            args, solution = _person_solution(args)
            ledger = None if "reason" in solution else _ledger(args)[0]
        else:
            ledger, solution = _ledger(args)
        if ledger is not None and args.contributions is not None:
            from privbandit.shared.core.accounting.persons import with_person

            ledger = with_person(ledger, _person(args, ledger, args.contributions))
    except (_UsageError, ValueError) as exc:
        print(f"privbandit privacy: error: {exc}", file=sys.stderr)
        return 2
    if ledger is None:  # a per-person question without a solution: nothing to evaluate
        assert solution is not None
        print(f"privbandit privacy: no solution: {solution['reason']}")
        out: dict[str, Any] = {"solution": solution}
    else:
        out = ledger.model_dump()
        out.setdefault("central_epsilon_paper", None)
        for field in LEDGER_FIELDS:  # spec §6: fields that do not apply are null, never omitted
            out.setdefault(field, None)
        if solution is not None:
            out["solution"] = solution
        print(_summary(out))
    sol = solution or {}
    out["parameters"] = {
        "threat_model": args.threat_model,
        "eps0": sol.get("eps0", args.eps0),
        "batch_size": sol.get("batch_size", args.batch_size),
        "delta": args.delta,
        "T": args.T,
        "d": args.d,
        "m": args.m,
        "epsilon": sol.get("epsilon", args.epsilon),
        "alpha": args.alpha if args.threat_model == "central" else None,
        "aggregation": args.aggregation if args.threat_model == "shuffle" else None,
        "contributions": args.contributions,
        "period": args.period if args.contributions is not None else None,
    }
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(out, indent=2, allow_nan=False) + "\n")
        print(f"wrote {args.json_out}")
    if "reason" in sol:
        return 1
    return 0
