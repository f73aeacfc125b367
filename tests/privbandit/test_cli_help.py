"""Every option of every ``privbandit`` command says what it does (issue 45 item 8): the test
walks the argparse tree and fails on an option without help text."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from privbandit.cli import build_parser
from privbandit.summary import local_note


def options(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:  # noqa: SLF001
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for name, sub in action.choices.items():
                yield from options(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):  # noqa: SLF001
            yield path, action


def test_every_option_of_every_command_has_help_text() -> None:
    walked = list(options(build_parser(), "privbandit"))
    commands = {path for path, _ in walked}
    assert {"privbandit simulate", "privbandit privacy", "privbandit demo",
            "privbandit evaluate", "privbandit audit", "privbandit up"} <= commands
    missing = [f"{path} {'/'.join(a.option_strings) or a.dest}" for path, a in walked
               if not (a.help and a.help.strip()) and a.help != argparse.SUPPRESS]
    assert missing == []


def test_a_renyi_epsilon_flag_says_so() -> None:
    """``privacy --threat-model central`` takes a Rényi-DP ε: its flag is also spelled
    ``--rdp-epsilon``, and its help says Rényi."""
    parser = build_parser("privacy")
    args = parser.parse_args(["privacy", "--threat-model", "central", "--rdp-epsilon", "2"])
    assert args.epsilon == 2.0
    helps = {f for _, a in options(parser, "p") for f in a.option_strings
             if a.help and "Rényi" in a.help}
    assert {"--epsilon", "--rdp-epsilon"} <= helps


def test_privacy_prints_no_null_and_explains_a_large_local_epsilon(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The person-readable summary leaves out figures that do not apply (the JSON keeps its
    nulls), and a local ε far above the central one is explained on the next line, per report
    and per person (issue 45 item 8)."""
    from privbandit.cli import main

    assert main(["privacy", "--threat-model", "shuffle", "--eps0", "12", "--batch-size", "1000",
                 "--contributions", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert not any("null" in line for line in lines)
    ldp = next(i for i, line in enumerate(lines) if line.strip().startswith("LDP (ε, δ)"))
    assert "(12, 0)" in lines[ldp] and "large by design" in lines[ldp + 1]
    person = next(i for i, line in enumerate(lines) if "per person, k=2: LDP" in line)
    assert "(24, 0)" in lines[person] and "the 2 reports' local ε composed" in lines[person + 1]
    # At a local ε no larger than the central one's order, no note.
    assert local_note(1.0, 0.9) is None and local_note(None, 1.0) is None
    assert local_note(122.0, 1.0) is not None
    assert main(["privacy", "--threat-model", "central", "--rdp-epsilon", "1"]) == 0
    out = capsys.readouterr().out
    assert "null" not in out and "None" not in out and "RDP (α, ε)      (2, 1)" in out
