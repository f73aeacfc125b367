"""The command-line options the experiments share: one declaration (flag, type) of each, with the
experiment's own defaults (and, where it has one, its own help text).

    ap = experiment_parser(__doc__.splitlines()[0], T=20_000, runs=12, seed=100, d=5, K=20)
    ap.add_argument("--tag", default="")  # what only this experiment takes
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# The shared options by name (the flag is ``--name``) and the type argparse converts them with.
SHARED: dict[str, type] = {
    "T": int,  # users (rounds) per run
    "runs": int,  # repetitions
    "seed": int,  # seed of the first run
    "d": int,  # feature dimension
    "K": int,  # arms
    "epsilon": float,  # privacy ε
    "delta": float,  # privacy δ
    "out": Path,  # where results are written
}


def experiment_parser(description: str | None, *, helps: Mapping[str, str] | None = None,
                      **defaults: Any) -> argparse.ArgumentParser:
    """A parser with ``description`` that declares ``--name`` (type ``SHARED[name]``, default
    ``value``, help ``helps[name]`` if given) for each ``name=value`` of ``defaults``, in that
    order; the experiment adds the options that are its own."""
    helps = helps or {}
    unknown = sorted(set(defaults) - set(SHARED)) + sorted(set(helps) - set(defaults))
    if unknown:
        raise TypeError(f"not a shared option given a default here: {', '.join(unknown)}")
    ap = argparse.ArgumentParser(description=description)
    for name, default in defaults.items():
        ap.add_argument(f"--{name}", type=SHARED[name], default=default, help=helps.get(name))
    return ap
