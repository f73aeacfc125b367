"""Exploring logging policies: a learning policy whose published model decides with ε-greedy
or softmax exploration, each choice logged with its exact propensity (``simulate --log``).

With the wrapped model's choice a*(x) (its argmax; or its own distribution π(· | x) where it
randomises) and its optimistic indices s_a(x) (``Model.scores``):

    epsilon-greedy:ε   π_0(a | x) = (1 − ε) π(a | x) + ε / K        (Sutton & Barto 2018, §2.2)
    softmax:τ          π_0(a | x) = exp(s_a(x)/τ) / Σ_b exp(s_b(x)/τ)  (Boltzmann exploration;
                                                                     ibid. §2.8, Eq. 2.11)

Every action then has π_0(a | x) > 0 (ε > 0, τ finite), so IPS, SNIPS and DR on the log are
unbiased for any evaluated policy (``overlap``: nothing unsupported), with weights at most
K/ε (ε-greedy). The arm is drawn from π_0 with the wrapped policy's own generator's spawned
child; the model, the reports and the ledger are the wrapped policy's: which arm a user takes
is post-processing of the published model and the user's own context, and the report is the
randomised (x_a, r) of that arm either way, so the privacy guarantee is unchanged.

In the simulator (``simulate --explore``, ``ExploringPolicy``) and on the device (a task's
``exploration`` setting: the device draws the arm with its generator and answers the exact
propensity in ``DecideResponse.propensity``; ``services/device/families.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from privbandit.shared.core.policies.base import Distributional, Scoring

KINDS = ("epsilon-greedy", "softmax")


@dataclass(frozen=True)
class Exploration:
    """``epsilon-greedy`` with ε ∈ (0, 1], or ``softmax`` with temperature τ > 0."""

    kind: str
    value: float

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"exploration must be one of {', '.join(KINDS)}; got {self.kind!r}")
        if self.kind == "epsilon-greedy" and not 0 < self.value <= 1:
            raise ValueError("epsilon-greedy needs 0 < epsilon <= 1")
        if self.kind == "softmax" and not (self.value > 0 and np.isfinite(self.value)):
            raise ValueError("softmax needs a finite temperature > 0")

    @classmethod
    def parse(cls, text: str) -> Exploration:
        """``epsilon-greedy:0.1`` or ``softmax:0.05``."""
        kind, sep, value = text.partition(":")
        try:
            number = float(value) if sep else float("nan")
        except ValueError:
            number = float("nan")
        if not np.isfinite(number):
            raise ValueError(f"exploration {text!r}: write epsilon-greedy:EPS or softmax:TAU")
        return cls(kind, number)

    def __str__(self) -> str:
        return f"{self.kind}:{self.value:g}"


class ExploringModel:
    """A published model decided from with exploration (module docstring)."""

    def __init__(self, inner: Any, exploration: Exploration, rng: np.random.Generator) -> None:
        self.inner, self.exploration, self.rng = inner, exploration, rng

    @property
    def version(self) -> int:
        return int(self.inner.version)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.inner.to_dict())

    def distribution(self, X: np.ndarray) -> np.ndarray:
        """π_0(· | x_i) for features X (n, K, d): (n, K), rows summing to 1."""
        n, K = X.shape[:2]
        if self.exploration.kind == "softmax":
            if not isinstance(self.inner, Scoring):
                raise TypeError(f"softmax exploration needs a model with scores; "
                                f"{type(self.inner).__name__} has none")
            z = np.asarray(self.inner.scores(X), dtype=float) / self.exploration.value
            z -= z.max(axis=1, keepdims=True)
            e = np.exp(z)
            return e / e.sum(axis=1, keepdims=True)
        if isinstance(self.inner, Distributional):
            base = np.asarray(self.inner.distribution(X), dtype=float)
        else:
            base = np.zeros((n, K))
            base[np.arange(n), self.inner.decide(X)] = 1.0
        eps = self.exploration.value
        return (1 - eps) * base + eps / K

    def decide(self, X: np.ndarray) -> np.ndarray:
        """One arm per user drawn from π_0 (inverse CDF of one uniform each)."""
        dist = self.distribution(X)
        u = self.rng.random((dist.shape[0], 1))
        a = (np.cumsum(dist, axis=1) < u).sum(axis=1)
        return np.minimum(a, dist.shape[1] - 1)

    def propensity(self, X: np.ndarray, a: np.ndarray) -> np.ndarray:
        """π_0(a_i | x_i), exact."""
        return self.distribution(X)[np.arange(X.shape[0]), np.asarray(a, dtype=np.int64)]


class ExploringPolicy:
    """A policy whose ``model`` decides with exploration; everything else (window, randomizer,
    ingest, ledger) is the wrapped policy's."""

    def __init__(self, inner: Any, exploration: Exploration, rng: np.random.Generator) -> None:
        self._inner, self._exploration, self._rng = inner, exploration, rng
        self._wrapped: ExploringModel | None = None

    @property
    def model(self) -> ExploringModel:
        inner = self._inner.model
        if self._wrapped is None or self._wrapped.inner is not inner:
            self._wrapped = ExploringModel(inner, self._exploration, self._rng)
        return self._wrapped

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
