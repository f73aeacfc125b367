"""The published model of a multi-armed task and the device's local choice from it.

A device picks its arm from the last broadcast model without contacting any server:
- ``indices`` (UCB-type policies): argmax_a u_a, ties to the lowest index; +∞ (``None`` in the
  dict form) marks an arm that must be pulled now (unpulled arms; HeLDP-UCB-L's warm-up, Agent 2
  line 4);
- ``probabilities`` (Tsallis-INF): sample a ~ w with the device's own uniform u, by inverse CDF:
  the first a with u·Σw < Σ_{b≤a} w_b;
- ``arm`` (AdaR-UCB): the current episode's arm.

``to_dict`` is plain JSON-able data (finite floats, ``None`` for +∞) that a pydantic message can
carry as is; ``from_dict`` restores it exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ArmModel:
    version: int
    reports: int
    indices: np.ndarray | None = None
    probabilities: np.ndarray | None = None
    arm: int | None = None

    def __post_init__(self) -> None:
        given = [self.indices is not None, self.probabilities is not None, self.arm is not None]
        if sum(given) != 1:
            raise ValueError("an arm model has exactly one of indices, probabilities, arm")

    @property
    def K(self) -> int | None:
        vec = self.indices if self.indices is not None else self.probabilities
        return None if vec is None else int(vec.shape[0])

    def decide(self, u: np.ndarray | float) -> np.ndarray:
        """The arm of each user whose device drew the uniform(s) u (shape (n,) or scalar)."""
        u = np.atleast_1d(np.asarray(u, dtype=float))
        if self.arm is not None:
            return np.full(u.shape[0], self.arm, dtype=np.int64)
        if self.indices is not None:
            return np.full(u.shape[0], int(np.argmax(self.indices)), dtype=np.int64)
        assert self.probabilities is not None  # exactly one of the three is set
        cum = np.cumsum(self.probabilities)
        pick = np.searchsorted(cum, u * cum[-1], side="right")
        return np.minimum(pick, cum.shape[0] - 1).astype(np.int64)

    def propensity(self, a: np.ndarray | int) -> np.ndarray:
        """P(a) under this model for chosen arm(s) ``a``: w_a / Σ_b w_b for a ``probabilities``
        model (the inverse-CDF draw of ``decide`` picks a with exactly that probability for
        u ~ U[0, 1) — before the first report Tsallis-INF's w is uniform, 1/K); 1 for an
        ``indices`` model (argmax, ties to the lowest index: a rule, not a coin) and for an
        episode's ``arm``."""
        a = np.atleast_1d(np.asarray(a, dtype=np.int64))
        if self.probabilities is None:
            return np.ones(a.shape[0])
        return self.probabilities[a] / float(self.probabilities.sum())

    def to_dict(self) -> dict[str, Any]:
        def vec(v: np.ndarray | None) -> list[float | None] | None:
            if v is None:
                return None
            return [None if math.isinf(x) else float(x) for x in v.tolist()]

        return {
            "version": int(self.version),
            "reports": int(self.reports),
            "indices": vec(self.indices),
            "probabilities": vec(self.probabilities),
            "arm": None if self.arm is None else int(self.arm),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ArmModel:
        def vec(v: list[float | None] | None) -> np.ndarray | None:
            if v is None:
                return None
            return np.array([math.inf if x is None else float(x) for x in v], dtype=float)

        return cls(
            version=int(data["version"]),
            reports=int(data["reports"]),
            indices=vec(data.get("indices")),
            probabilities=vec(data.get("probabilities")),
            arm=None if data.get("arm") is None else int(data["arm"]),
        )
