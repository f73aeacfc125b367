"""The ``privbandit`` command line: builds the parser of ``simulate``, ``evaluate``, ``privacy``,
``audit``, ``up`` and ``demo`` and runs the chosen command (each subcommand sets ``func``).

A command named first on the line gets a parser with that subcommand alone, so only its module is
imported (``privacy`` needs no policy, environment or service code: a second of start-up less)."""

from __future__ import annotations

import argparse
import importlib
import sys

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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    args = build_parser(command).parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
