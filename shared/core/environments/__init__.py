"""Environments of spec §6: ``linear`` (synthetic) and ``digits`` (scikit-learn data)."""

from __future__ import annotations

import numpy as np

from shared.core.environments.base import Environment
from shared.core.environments.digits import DigitsEnvironment, digits_dimension
from shared.core.environments.linear import LinearEnvironment

ENVIRONMENTS = ("linear", "digits")


def make_environment(name: str, d: int, K: int, rng: np.random.Generator) -> Environment:
    if name == "linear":
        return LinearEnvironment(d, K, rng)
    if name == "digits":
        return DigitsEnvironment(d, rng)
    raise ValueError(f"unknown environment {name!r}; known: {', '.join(ENVIRONMENTS)}")


def environment_dimensions(name: str, d: int, K: int) -> tuple[int, int]:
    """(d, K) the environment will actually use for the requested ones."""
    if name == "digits":
        return digits_dimension(d), DigitsEnvironment.K
    return d, K


__all__ = ["ENVIRONMENTS", "Environment", "environment_dimensions", "make_environment"]
