"""``privbandit audit``: empirical lower bounds on ε beside the claimed ε (issue 43).

``--mechanism NAME|all`` runs the shipped mechanism on its worst-case neighbouring pair
``--samples N`` times per input, picks the test on half of them and measures it on the other half,
and prints ε_lo at ``--confidence`` (Clopper–Pearson) beside the claimed ε at the same δ
(``shared.core.audit``; docs/audit.md). ``--json F`` writes the rows as a JSON list;
``--plant`` runs each mechanism with its planted calibration bug instead (the claim stays the
honest one: every row should then have ε_lo above it). ``--task T --device URL --analyzer URL
[--canaries M]`` audits a running deployment in one run instead (``privbandit.canary_audit``);
``--task T`` alone audits that task's report as its config states it (``--config F``, default
$PRIVBANDIT_CONFIG or the packaged one): the mechanism the config names — an ldp-linucb task's
Gaussian report or PrivUnit2 — at the task's own d, ε and encoding (``run.audit_task``).
Exit status 0, or 1 when a row of an honest audit has ε_lo above its claim (a claim the samples
refute at the confidence); 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from privbandit.privacy_cmd import _checked

_samples = _checked(int, "an integer", lambda v: v >= 8, "an integer >= 8")
_confidence = _checked(float, "a number", lambda v: 0 < v < 1, "a number in (0, 1)")
_seed = _checked(int, "an integer", lambda v: v >= 0, "an integer >= 0")


def add_audit_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``audit`` subcommand to ``subparsers`` and return its parser."""
    from privbandit.shared.core.audit.run import DEFAULT_CONFIDENCE, DEFAULT_SAMPLES

    p = subparsers.add_parser(
        "audit", help="empirical lower bounds on ε of the shipped mechanisms",
        description="Run each mechanism on its worst-case neighbouring pair and report a "
                    "lower bound on its ε (a test of the claim, never a proof of privacy).")
    p.add_argument("--mechanism", default="all",
                   help="a mechanism's name or 'all' (default); --list names them")
    p.add_argument("--list", action="store_true", help="list the mechanisms and exit")
    p.add_argument("--samples", type=_samples, default=DEFAULT_SAMPLES,
                   help=f"outputs per input (default {DEFAULT_SAMPLES})")
    p.add_argument("--confidence", type=_confidence, default=DEFAULT_CONFIDENCE,
                   help=f"confidence of the bound (default {DEFAULT_CONFIDENCE})")
    p.add_argument("--seed", type=_seed, default=0, help="seed of the samples (default 0)")
    p.add_argument("--plant", action="store_true",
                   help="run the planted-bug variants (each row should exceed its claim)")
    p.add_argument("--json", dest="json_out", type=Path, help="write the rows as JSON here")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--task", help="instead: this task's report as its config states it (an "
                   "ldp-linucb task: the mechanism its config names); with --device and "
                   "--analyzer, the one-run canary audit of the task in a running deployment "
                   "(update_every = 1; docs/audit.md)")
    p.add_argument("--config", type=Path, help="with --task alone: the config file the task is "
                   "read from (default: $PRIVBANDIT_CONFIG or the packaged defaults)")
    p.add_argument("--canaries", type=_samples, default=200,
                   help="canaries of the one-run audit (default 200)")
    p.add_argument("--device", help="the deployment's device URL (with --task)")
    p.add_argument("--analyzer", help="the deployment's analyzer URL (with --task)")
    p.set_defaults(func=run_audit)
    return p


def _table(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="privacy audit (ε_lo: a lower bound; ≤ claimed is consistent, "
                        "never a proof)")
    table.add_column("mechanism", no_wrap=True)
    for col in ("claimed ε", "δ", "ε_lo", "samples", "CPU s", "tight"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        over = r["audited_epsilon_lower"] > r["claimed_epsilon"]
        lo = f"{r['audited_epsilon_lower']:.3f}"
        table.add_row(r["mechanism"], f"{r['claimed_epsilon']:.3f}", f"{r['delta']:.0e}",
                      f"[bold red]{lo}[/]" if over else lo, str(r["samples"]),
                      f"{r['cpu_seconds']:.2f}", "yes" if r["tight"] else "no")
    console = Console()
    if not console.is_terminal:  # a pipe or a file: 80 columns would cut the names
        console = Console(width=120)
    console.print(table)


def run_canaries(args: argparse.Namespace) -> int:
    """``--task``: the one-run audit of a deployment (``privbandit.canary_audit``)."""
    import httpx
    import numpy as np

    from privbandit.canary_audit import canary_audit

    if not args.device or not args.analyzer:
        print("error: --task needs --device URL and --analyzer URL", file=sys.stderr)
        return 2
    try:
        result = canary_audit(args.device, args.analyzer, args.task, args.canaries,
                              np.random.default_rng(args.seed), confidence=args.confidence)
    except httpx.HTTPStatusError as exc:
        print(f"error: {exc.request.url} answered {exc.response.status_code}", file=sys.stderr)
        return 2
    except (ValueError, TimeoutError, httpx.HTTPError) as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    row = result.to_dict()
    print(f"{args.task}: {result.correct} of {result.guesses} guesses right on "
          f"{result.canaries} canaries: ε_lo = {result.audited_epsilon_lower:.3f} at "
          f"confidence {args.confidence:g} (one run), ledger central ε = "
          f"{result.central_epsilon:g} at δ = {result.central_delta:g}")
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps([row], indent=2, allow_nan=False) + "\n")
        print(f"wrote {args.json_out}")
    return 1 if result.audited_epsilon_lower > result.central_epsilon else 0


def run_task(args: argparse.Namespace) -> int:
    """``--task`` without a deployment: the task's own report, as its config file states it."""
    from privbandit.demo.config import DemoError, config_path, load_settings
    from privbandit.shared.core.audit.run import audit_task

    path = config_path(args.config)
    try:
        task = load_settings(path).task(args.task)
    except (DemoError, ValueError) as exc:
        print(f"error: {path}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    if task is None:
        print(f"error: {path} has no task {args.task!r}", file=sys.stderr)
        return 2
    try:
        result = audit_task(task.policy, args.samples, args.confidence, args.seed, args.plant)
    except ValueError as exc:
        print(f"error: task {args.task}: {exc}", file=sys.stderr)
        return 2
    print(f"task {args.task} ({path}): its report is {result.mechanism}")
    return _report([result], args)


def run_audit(args: argparse.Namespace) -> int:
    from privbandit.shared.core.audit.run import audit, names
    from privbandit.simulate_cmd import _progress

    if args.list:
        print("\n".join(names()))
        return 0
    if args.config is not None and (args.task is None or args.device or args.analyzer):
        # Said rather than ignored: the mechanisms' own rows and the canary audit read no file.
        print("error: --config names the file of --task's config; it goes with --task alone "
              "(without --device/--analyzer)", file=sys.stderr)
        return 2
    if args.task is not None:
        if args.device is None and args.analyzer is None:
            return run_task(args)
        return run_canaries(args)
    if args.mechanism != "all" and args.mechanism not in names():
        print(f"error: unknown mechanism {args.mechanism!r}; known: all, {', '.join(names())}",
              file=sys.stderr)
        return 2
    total = len(names()) if args.mechanism == "all" else 1
    with _progress(total, "audit", disable=args.no_progress) as advance:
        started: list[str] = []

        def progress(name: str) -> None:
            if started:
                advance(1)
            started.append(name)

        results = audit(args.mechanism, args.samples, args.confidence, args.seed, args.plant,
                        progress)
        advance(1)
    return _report(results, args)


def _report(results: list[Any], args: argparse.Namespace) -> int:
    """Print the rows (table, notes), write ``--json``; exit status 1 if an honest row's ε_lo
    exceeds its claim."""
    rows = [r.to_dict() for r in results]
    _table(rows)
    refuted = [r.mechanism for r in results if r.audited_epsilon_lower > r.claimed_epsilon]
    for r in rows:
        print(f"  {r['mechanism']}: {r['planted'] or r['note']}")
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(rows, indent=2, allow_nan=False) + "\n")
        print(f"wrote {args.json_out}")
    if refuted and not args.plant:
        print(f"claims refuted at confidence {args.confidence:g}: {', '.join(refuted)}",
              file=sys.stderr)
        return 1
    return 0
