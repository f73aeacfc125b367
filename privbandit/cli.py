"""The ``privbandit`` command line: builds the parser of ``simulate``, ``evaluate``, ``privacy``,
``audit``, ``up`` and ``demo`` and runs the chosen command (each subcommand sets ``func``).

A command named first on the line gets a parser with that subcommand alone, so only its module is
imported (``privacy`` needs no policy, environment or service code: a second of start-up less)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Mapping
from typing import Any

# subcommand → (module, the function adding its parser)
SUBCOMMANDS = {
    "simulate": ("privbandit.simulate_cmd", "add_simulate_parser"),
    "evaluate": ("privbandit.evaluate_cmd", "add_evaluate_parser"),
    "privacy": ("privbandit.privacy_cmd", "add_privacy_parser"),
    "audit": ("privbandit.audit_cmd", "add_audit_parser"),
    "up": ("privbandit.services_cmd", "add_up_parser"),
    "demo": ("privbandit.services_cmd", "add_demo_parser"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of ``command`` alone."""
    parser = argparse.ArgumentParser(prog="privbandit", description=(
        "Private contextual-bandit learning: simulator, privacy accountant and services."))
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, adder) in SUBCOMMANDS.items():
        if command in (None, name):
            getattr(importlib.import_module(module), adder)(sub)
    return parser


# Set by the user, these choose the BLAS's threads themselves: the command then leaves them be.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")


def blas_threads(environ: Mapping[str, str] = os.environ) -> contextlib.AbstractContextManager[Any]:
    """The BLAS on one thread while a command runs, unless the user chose its threads.

    The commands' linear algebra is on d×d matrices (d ≤ a few dozen), as the services' is
    (``services.common.cli.single_threaded_blas``): a second BLAS thread does not pay off there.
    Measured on the 2-core machine, quiet, ``simulate --env linear --T 200000 --runs 3``:
    the same wall time (ddp-linucb 2.89 / 2.83 s, linucb 3.19 / 3.25 s, adar-oful 2.79 /
    2.82 s, default threads / one) at about half the CPU (4.06 / 2.37, 5.67 / 2.91, 4.99 /
    2.56 s of user time); on a busy machine the spare thread only waits to be scheduled."""
    if any(environ.get(name) for name in BLAS_THREAD_VARIABLES):
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    args = build_parser(command).parse_args(argv)
    with blas_threads():
        return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
