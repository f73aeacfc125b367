"""The published model of a bandit-convex-optimisation task and the device's play from it.

A device holds the last model it received and plays without contacting any server:
- one point (``bco``, ``ldp-bco``; Saha–Tewari / Hazan–Levy Algorithm 1): x = y + δ A u, with
  A = (∇²ℛ(y) + λI)^{-1/2} the Dikin-ellipsoid matrix of the barrier ℛ(x) = −ln(R² − ‖x‖²) at y
  (``shared.core.policies.bco_kernels``), so x stays in the ball R·𝔹;
- two points (``bco2``, ``ldp-bco2``; Agarwal–Dekel–Xiao, Zheng et al. Algorithm 4): x = y ± ρu.
u is uniform on the unit sphere, drawn by the device from its own generator; it is independent of
the loss, so sending it with the report costs no privacy (``shared.core.randomizers.bco``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class BCOModel:
    version: int
    reports: int
    y: np.ndarray
    radius: float
    A: np.ndarray | None = None  # one point: the exploration matrix (d, d)
    delta: float | None = None  # one point: δ
    rho: float | None = None  # two points: ρ

    def __post_init__(self) -> None:
        one = self.A is not None and self.delta is not None
        if one == (self.rho is not None):
            raise ValueError("a BCO model has either (A, delta) or rho")

    @property
    def d(self) -> int:
        return int(self.y.shape[0])

    @property
    def points_per_user(self) -> int:
        return 1 if self.rho is None else 2

    def points(self, u: np.ndarray) -> np.ndarray:
        """The point(s) a user with direction u plays, shape (1, d) or (2, d)."""
        u = np.asarray(u, dtype=float)
        if self.rho is None:
            assert self.A is not None and self.delta is not None  # one point: (A, δ) are set
            return (self.y + float(self.delta) * (self.A @ u))[None]
        return np.stack([self.y + self.rho * u, self.y - self.rho * u])

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": int(self.version),
            "reports": int(self.reports),
            "y": self.y.tolist(),
            "radius": float(self.radius),
            "A": None if self.A is None else self.A.tolist(),
            "delta": None if self.delta is None else float(self.delta),
            "rho": None if self.rho is None else float(self.rho),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BCOModel:
        A = data.get("A")
        return cls(
            version=int(data["version"]),
            reports=int(data["reports"]),
            y=np.asarray(data["y"], dtype=float),
            radius=float(data["radius"]),
            A=None if A is None else np.asarray(A, dtype=float),
            delta=None if data.get("delta") is None else float(data["delta"]),
            rho=None if data.get("rho") is None else float(data["rho"]),
        )
