"""Garcelon, Chaudhuri, Perchet, Pirotta (ALT 2022), Theorem 5: the paper's own central guarantee.

Reported beside the tight bounds as ``central_epsilon_paper`` (spec §3, §6). File
``004_*.txt`` of the reference papers, Theorem 5, Eq. (3), proof in App. B.3 (Prop. 13, Eq. 24-26).

Statement. Let p = 2 / (exp(2ε0 / (m d (d+3))) + 1) (the per-bit randomization probability of
R_p^{0/1}, Alg. 2-3). If the shuffler batch length l satisfies

    (i)  l p ≥ 14 log(8mT/δ0)      and
    (ii) √((2 + X²)² - 4) ≥ c + X²,   X = ε l / (32 d(d+3) log(8mT/δ0) √(2T ln(2T/δ0))),

with c = 2 - 2p + 2 √(2 log(2mT/δ0) / l), the sequence of batch statistics (Z, U) is central
(ε, δ0 + δ)-DP for ε ∈ (0, 1). ``l*`` and ``l`` in Eq. (3) both denote the batch length; ``log``
and ``ln`` are both natural logarithms.

Typo resolved (Eq. 3): as extracted, Eq. (3) reads c = **1** - 2p + 2√(2 log(2mT/δ0)/l). Deriving
Eq. (3) from Prop. 13 (Eq. 24, Cheu et al. 2019 Thm 5.4) gives **2** - 2p: with
a = p - √(2p log(·)/l), the per-batch requirement (1 - a) √(1/a) ≤ X is (1 - a)² ≤ X² a, i.e.
a² - (2 + X²) a + 1 ≤ 0, whose smaller root gives 2a ≥ 2 + X² - √((2 + X²)² - 4), i.e.
√((2+X²)² - 4) ≥ 2 - 2p + 2√(2p log(·)/l) + X²; Eq. (3) then bounds √(2p·) ≤ √(2·) (p ≤ 1).
The printed "1 - 2p" would make (ii) easier to satisfy than its own proof allows (and vacuous for
p ≥ 1/2 + √(2 log(2mT/δ0)/l), where every ε > 0 would qualify), so the derived constant 2 is the
default; ``variant="printed"`` evaluates the equation exactly as extracted, for comparison.

δ split: the theorem gives (ε, δ0 + δ); for a total budget δ_total we use δ0 = δ = δ_total / 2.
Only δ0 enters the conditions (δ is the failure probability of the concentration event E_δ of the
proof, which does not appear in Eq. 3).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

Variant = Literal["derived", "printed"]


def randomizer_probability(eps0: float, d: int, m: int) -> float:
    """p = 2 / (exp(2ε0 / (m d (d+3))) + 1) (Garcelon Alg. 2; Thm 5; Lemma 9)."""
    if not (eps0 > 0 and math.isfinite(eps0)):
        raise ValueError(f"eps0 must be a positive finite number, got {eps0}")
    if d < 1 or m < 1:
        raise ValueError(f"d and m must be at least 1, got d={d}, m={m}")
    x = 2.0 * eps0 / (m * d * (d + 3))
    # 2/(e^x + 1) = 2 e^{-x}/(1 + e^{-x}), stable for large x.
    return 2.0 * math.exp(-x) / (1.0 + math.exp(-x))


def _eq3_terms(
    eps0: float, l: int, delta: float, T: int, d: int, m: int, variant: Variant
) -> tuple[float, float, float, float]:
    """(p, 14 log(8mT/δ0), c, K) with X = ε l / K and c the constant side of Eq. (3)."""
    delta0 = delta / 2.0
    p = randomizer_probability(eps0, d, m)
    log8 = math.log(8.0 * m * T / delta0)
    log2 = math.log(2.0 * m * T / delta0)
    ln2t = math.log(2.0 * T / delta0)
    lead = 2.0 if variant == "derived" else 1.0
    c = lead - 2.0 * p + 2.0 * math.sqrt(2.0 * log2 / l)
    k = 32.0 * d * (d + 3) * log8 * math.sqrt(2.0 * T * ln2t)
    return p, 14.0 * log8, c, k


def condition_i(eps0: float, l: int, delta: float, T: int, d: int, m: int) -> bool:
    """Thm 5 condition (i): l p ≥ 14 log(8mT/δ0), δ0 = δ/2."""
    p, need, _, _ = _eq3_terms(eps0, l, delta, T, d, m, "derived")
    return l * p >= need


def eq3_slack(
    eps: float | np.ndarray,
    eps0: float,
    l: int,
    delta: float,
    T: int,
    d: int,
    m: int,
    variant: Variant = "derived",
) -> float | np.ndarray:
    """LHS - RHS of Eq. (3): √((2+X²)² - 4) - X² - c; Eq. (3) holds iff this is ≥ 0.

    √((2+X²)² - 4) - X² = X √(4+X²) - X² = 4X / (√(4+X²) + X), evaluated in the last form to
    avoid cancellation; it increases from 0 to 2 with X, hence with ε.
    """
    _, _, c, k = _eq3_terms(eps0, l, delta, T, d, m, variant)
    x = np.asarray(eps, dtype=float) * l / k
    out = 4.0 * x / (np.sqrt(4.0 + x * x) + x) - c
    return float(out) if np.ndim(out) == 0 else out


def theorem5_epsilon(
    eps0: float, l: int, delta: float, T: int, d: int, m: int, *, variant: Variant = "derived"
) -> float | None:
    """Smallest ε ∈ (0, 1) for which Garcelon et al. Thm 5 certifies central (ε, δ)-DP.

    ``delta`` is the total δ0 + δ, split evenly. Returns None when condition (i)
    l p ≥ 14 log(8mT/δ0) fails, when no ε < 1 satisfies Eq. (3), or when Eq. (3) holds for every
    ε > 0 (only possible with ``variant="printed"``; the theorem then gives no finite figure).
    The slack of Eq. (3) is checked to be non-decreasing in ε on a grid before bisecting
    (bisection to 1e-12, returning the upper end so Eq. (3) holds at the returned ε).
    """
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if l < 1 or T < 1:
        raise ValueError(f"l and T must be at least 1, got l={l}, T={T}")
    if not condition_i(eps0, l, delta, T, d, m):
        return None

    def slack(e: float | np.ndarray) -> float | np.ndarray:
        return eq3_slack(e, eps0, l, delta, T, d, m, variant)

    grid = np.linspace(0.0, 1.0, 1001)
    values = np.asarray(slack(grid))
    if np.any(np.diff(values) < -1e-12):
        raise ArithmeticError("Eq. (3) slack is not monotone in ε; bisection would be invalid")
    if values[-1] < 0.0:
        return None  # not even ε = 1 satisfies Eq. (3)
    if values[0] >= 0.0:
        return None  # holds at ε → 0: degenerate, no meaningful smallest ε
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-12:
        mid = 0.5 * (lo + hi)
        if slack(mid) >= 0.0:
            hi = mid
        else:
            lo = mid
    return hi if hi < 1.0 else None
