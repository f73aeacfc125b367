"""The ``privbandit`` command line (spec §6): builds the parser of ``simulate``, ``evaluate``,
``privacy``, ``up`` and ``demo`` and runs the chosen command (each subcommand sets ``func``)."""

from __future__ import annotations

import argparse
import sys

from privbandit.evaluate_cmd import add_evaluate_parser
from privbandit.privacy_cmd import add_privacy_parser
from privbandit.services_cmd import add_demo_parser, add_up_parser
from privbandit.simulate_cmd import add_simulate_parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="privbandit", description=(
        "Private contextual-bandit learning: simulator, privacy accountant and services."))
    sub = parser.add_subparsers(dest="command", required=True)
    add_simulate_parser(sub)
    add_evaluate_parser(sub)
    add_privacy_parser(sub)
    add_up_parser(sub)
    add_demo_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
