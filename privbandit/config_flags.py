"""Command-line flags of the policies' config fields (issue 46: every field a user may set is
reachable from ``privbandit simulate``).

A field with a hand-written flag (``simulate_cmd``: its help says more than the field's
description, or its type parses more, e.g. ``--first-episode auto``) keeps it; every other field
of every registered config gets a flag generated here from the field itself — ``--name`` (``_`` →
``-``), its type (``Literal`` → choices, ``bool`` → a switch), and its description per policy as
help — so a new config field is on the command line without a line here. ``NOT_FLAGS`` names the
fields that are not, and why; ``tests/privbandit/test_config_flags.py`` checks the whole registry.
"""

from __future__ import annotations

import argparse
import types
import typing
from typing import Any, Literal, Union

from privbandit.shared.core.policies.registry import REGISTRY

# Config fields that are no flag of their own, and what sets them.
NOT_FLAGS = {
    "algo": "--algo",
    "d": "--d (and the environment)",
    "K": "--K (and the environment: the number of --means, a data set's classes)",
    "accountant": "--aggregation (sblb's ε0 is sized for what the shuffler releases)",
    "radius": "the BCO environment's --radius",
    "loss_bound": "the BCO environment's --loss-bound",
    "lipschitz": "the BCO environment (its losses' Lipschitz constant)",
    "smoothness": "the BCO environment (its losses' smoothness)",
    "strong_convexity": "the BCO environment (its losses' strong convexity)",
    "arm_seed": "a services task (its fixed arms; the simulator's are the environment's)",
}


def flag_of(name: str) -> str:
    """The command-line flag of config field ``name``."""
    return "--" + name.replace("_", "-")


def config_fields() -> dict[str, list[tuple[str, Any]]]:
    """Every config field of the registry → [(policy id, pydantic FieldInfo)], in the
    registry's order."""
    out: dict[str, list[tuple[str, Any]]] = {}
    for algo, entry in REGISTRY.items():
        for name, info in entry.config.model_fields.items():
            out.setdefault(name, []).append((algo, info))
    return out


def _kind(annotation: Any) -> tuple[Any, list[Any] | None]:
    """(argparse type, choices) of a field's annotation; ``bool`` for a switch."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (Union, types.UnionType):
        annotation = args[0] if len(args) == 1 else str
        args = list(typing.get_args(annotation))
    if typing.get_origin(annotation) is Literal:
        return type(args[0]), args
    if annotation in (int, float, bool, str):
        return annotation, None
    if typing.get_origin(annotation) is tuple and typing.get_args(annotation) == (int, ...):
        return int_tuple, None
    return str, None


def int_tuple(text: str) -> tuple[int, ...]:
    """A tuple-of-integers field from its flag, comma-separated: '0,4,8' → (0, 4, 8)."""
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}"
                                         ) from exc


def _help(uses: list[tuple[str, Any]]) -> str:
    """The field's descriptions, each with the policies it is theirs for."""
    by_text: dict[str, list[str]] = {}
    for algo, info in uses:
        by_text.setdefault(info.description or "(undocumented)", []).append(algo)
    parts = [f"{', '.join(algos)}: {text}" for text, algos in by_text.items()]
    return "; ".join(parts).replace("%", "%%")


def generated_fields(skip: set[str] | tuple[str, ...]) -> list[str]:
    """The config fields that get a generated flag: all but ``NOT_FLAGS`` and ``skip``."""
    return [name for name in config_fields() if name not in NOT_FLAGS and name not in skip]


def add_config_flags(p: argparse.ArgumentParser, skip: set[str] | tuple[str, ...]) -> list[str]:
    """Add a flag for every config field not in ``NOT_FLAGS`` nor ``skip`` (fields with a
    hand-written flag); returns the fields added."""
    g = p.add_argument_group("further policy parameters (generated from the config fields)")
    fields = config_fields()
    added = generated_fields(skip)
    for name in added:
        uses = fields[name]
        kind, choices = _kind(uses[0][1].annotation)
        text = _help(uses)
        if name == "horizon":
            text += " (default: --T, the horizon run)"
        if kind is bool:
            g.add_argument(flag_of(name), dest=name, action="store_true", default=None,
                           help=text)
        else:
            g.add_argument(flag_of(name), dest=name, type=kind, choices=choices, help=text)
    return added


def given_params(args: argparse.Namespace, fields: list[str]) -> dict[str, Any]:
    """The values of ``fields`` given on the command line (None: not given), in that order."""
    return {name: getattr(args, name, None) for name in fields
            if getattr(args, name, None) is not None}
