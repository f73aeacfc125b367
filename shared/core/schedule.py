"""Batch schedules of the batched policies (issue 22): which batch each report enters, and how big.

A schedule fixes the length l_k of batch k = 0, 1, 2, …; batch k holds reports
l_0 + … + l_{k−1} + 1 … l_0 + … + l_k, so every report enters exactly one batch (parallel
composition: a user's guarantee is that of the one batch it is in).

- ``fixed:L``: l_k = L (Garcelon Alg. 1 / 4, today's ``batch_size``).
- ``geometric:L0,G,CAP``: l_k = min(CAP, ⌊L0 · G^k⌋), G ≥ 1 — a small first batch (few users play
  before the first model) growing to a cap (few noise draws in all: after the first useful
  release the private cost is additive; Chowdhury & Zhou, ICLR 2023, use batches of 4^b).

Sizes never decrease (l_{k+1} ≥ l_k): with distributed noise sized for the batch a device was
told about, a report that ends in a later batch therefore carries at least the share that batch
needs (``randomizers.skellam``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Relative slack in ⌊L0 · G^k⌋ so that, e.g., 100 · 1.1² counts as 121, not 120.999….
_FLOOR_SLACK = 1e-9


@dataclass(frozen=True)
class BatchSchedule:
    """l_k = min(cap, ⌊first · growth^k⌋); ``growth == 1`` (and ``cap == first``) is fixed."""

    first: int
    growth: float = 1.0
    cap: int | None = None

    def __post_init__(self) -> None:
        cap = self.first if self.cap is None else self.cap
        object.__setattr__(self, "cap", cap)
        if self.first < 1 or not (self.growth >= 1.0 and math.isfinite(self.growth)):
            raise ValueError("a batch schedule needs a first batch >= 1 and growth >= 1")
        if cap < self.first:
            raise ValueError(f"the cap ({cap}) is below the first batch ({self.first})")

    @property
    def is_fixed(self) -> bool:
        return self.first == self.cap

    @property
    def max_size(self) -> int:
        assert self.cap is not None  # set from ``first`` in __post_init__ when not given
        return self.cap

    def size(self, k: int) -> int:
        """l_k, the length of batch k (0-based)."""
        if k < 0:
            raise ValueError("batch index must be >= 0")
        if self.is_fixed:
            return self.first
        # Past k* = ⌈log_G(cap/first)⌉ + 1 the cap binds; stop there so G^k never overflows.
        k_cap = math.ceil(math.log(self.max_size / self.first) / math.log(self.growth)) + 1
        value = self.first * self.growth ** min(k, k_cap)
        return min(self.max_size, math.floor(value * (1 + _FLOOR_SLACK)))

    def sizes(self, total: int) -> list[int]:
        """The full batches that ``total`` reports fill, in order (a partial last batch is never
        released, so it is not listed)."""
        out: list[int] = []
        used = 0
        while used + (l_k := self.size(len(out))) <= total:
            out.append(l_k)
            used += l_k
        return out

    def distinct_sizes(self) -> list[int]:
        """Every batch length the schedule ever uses, increasing."""
        out = [self.size(0)]
        while out[-1] < self.max_size:
            out.append(self.size(len(out)))
        return sorted(set(out))

    def spec(self) -> str:
        """The textual form ``parse`` reads back."""
        if self.is_fixed:
            return f"fixed:{self.first}"
        return f"geometric:{self.first},{self.growth:g},{self.max_size}"

    @classmethod
    def parse(cls, text: str) -> BatchSchedule:
        """``fixed:L`` or ``geometric:L0,GROWTH,CAP``."""
        kind, _, args = text.strip().partition(":")
        try:
            values = [v.strip() for v in args.split(",")] if args else []
            if kind == "fixed" and len(values) == 1:
                return cls(int(values[0]))
            if kind == "geometric" and len(values) == 3:
                growth = float(values[1])
                if growth <= 1.0:
                    raise ValueError("geometric growth must exceed 1 (use fixed:L)")
                return cls(int(values[0]), growth, int(values[2]))
        except ValueError as exc:
            raise ValueError(f"invalid batch schedule {text!r}: {exc}") from exc
        raise ValueError(
            f"invalid batch schedule {text!r}: use fixed:L or geometric:L0,GROWTH,CAP"
        )
