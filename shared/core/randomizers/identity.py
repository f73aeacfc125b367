"""The identity "randomizer" of ``central`` mode: the report is the raw (x, r).

Privacy in central mode comes from the trusted analyzer (AdaR-OFUL's episode noise), not from the
device; the report still travels encrypted to the analyzer (HPKE) and through the shuffler.
"""

from __future__ import annotations

import numpy as np

from privbandit.shared.core.randomizers.base import Estimate, check_inputs


class IdentityRandomizer:
    exact = True

    def __init__(self, d: int, L: float = 1.0) -> None:
        self.d, self.L = d, float(L)

    @property
    def width(self) -> int:
        return self.d + 1

    def randomize(self, x: np.ndarray, r: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x, r = check_inputs(x, r, self.d, self.L)
        return np.concatenate([x, r[:, None]], axis=1)

    def sufficient(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=float)
        x, r = rows[:, : self.d], rows[:, self.d]
        return np.concatenate([(x.T @ x).ravel(), x.T @ r])

    def estimate(self, stat: np.ndarray, n: int) -> Estimate:
        stat = np.asarray(stat, dtype=float)
        dd = self.d * self.d
        return Estimate(n=n, G=stat[:dd].reshape(self.d, self.d), u=stat[dd:])

    def matrix_proxy(self) -> float:
        return 0.0

    def vector_proxy(self) -> float:
        return 0.0

    def to_bytes(self, row: np.ndarray) -> bytes:
        row = np.asarray(row, dtype="<f8")
        if row.shape != (self.width,) or not np.isfinite(row).all():
            raise ValueError(f"a report is {self.width} finite floats")
        check_inputs(row[None, : self.d], row[None, self.d], self.d, self.L)
        return row.tobytes()

    def from_bytes(self, data: bytes) -> np.ndarray:
        if len(data) != 8 * self.width:
            raise ValueError(f"a report is {8 * self.width} bytes, got {len(data)}")
        row = np.frombuffer(data, dtype="<f8").astype(float)
        check_inputs(row[None, : self.d], row[None, self.d], self.d, self.L)
        return row
