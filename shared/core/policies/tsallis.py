"""Tsallis-INF (Zimmert & Seldin, JMLR 2021, Alg. 1 with α = 1/2 and importance-weighted losses):
the non-private black box of Zheng et al.'s MAB reduction (Thm 11).

Round t plays a ~ w_t, where w_t minimises ⟨w, L̂_{t−1}⟩ − Σ_i 4√w_i / η_t over the simplex:
    w_{t,i} = 4 (η_t (L̂_{t−1,i} − x))⁻²,   x < min_i L̂_{t−1,i} the unique normaliser with Σ w = 1,
η_t = 2/√t (their Thm 1 for IW estimates), and L̂_{t,a} = L̂_{t−1,a} + ℓ_t / w_{t,a} for the pulled a.
The losses must lie in [0, 1] for their guarantees (4√(KT) + 1 adversarially, O(Σ log T/Δ)
stochastically); ``scale`` (the policy's confidence_scale) multiplies 1/η_t.

x is found by Halley's method on f(x) = (4/η²) P₂(x) − 1, P_k(x) = Σ_i (L̂_i − x)^{−k}, which is
increasing and convex on (−∞, min L̂) with f' = (8/η²) P₃ and f'' = (24/η²) P₄; steps are capped
at min L̂ − 2/η, where the smallest loss alone has weight 1, so f ≥ 0 there (from the right of the
root the iteration decreases monotonically to it). Warm start: between two rounds only L̂_a and η
change, so P₂, P₃, P₄ at the previous x are corrected in O(1) and the first step costs nothing;
one O(K) pass at the new x then nearly always meets |Σw − 1| < 10⁻⁹. The remainder is normalised
away (p = w / Σw), so the distribution sampled from — and the one the importance weights divide
by — is exactly p. The simulator's loop and the services' path run the same update.

Stale models (services). A device samples from the last model it received, which may be older
than the learner's current p; the importance weight must divide by the probability the device
actually used, p_{s,a} of that model, so ``observe`` takes it from the report (the estimate stays
unbiased: E[ℓ 1{a} / p_{s,a}] = ℓ_a under the device's distribution). ``floor[a]`` = the smallest
probability any distribution so far gave arm a: a reported p below it is one no honest device
could hold, and the analyzer refuses it (``LDPMAB.admit_row``), which bounds what one forged
report can add to L̂_a by what an honest one could.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from itertools import accumulate
from operator import mul
from typing import Any

import numpy as np

TOL = 1e-9
MAX_STEPS = 60


def _powers(L: list[float], x: float) -> tuple[list[float], float, float, float]:
    """(1/(L_i − x)², P₂, P₃, P₄) at x."""
    inv = [1.0 / (li - x) for li in L]
    sq = list(map(mul, inv, inv))
    return sq, sum(sq), sum(map(mul, sq, inv)), sum(map(mul, sq, sq))


def tsallis_weights(L: list[float], eta: float, x: float | None = None,
                    moments: tuple[float, float, float] | None = None
                    ) -> tuple[list[float], list[float], float, tuple[float, float, float]]:
    """(p, cumulative p, x, (P₂, P₃, P₄) at x) for losses L at rate η.

    Warm start: the first step from x uses the given moments at x (no pass over the arms);
    without them (or if x is not left of min L − 2/η) it starts at that cap.
    """
    c = 4.0 / (eta * eta)
    cap = min(L) - 2.0 / eta
    sq: list[float] = []
    if x is None or moments is None or x >= cap:
        x = cap
        sq, p2, p3, p4 = _powers(L, x)
    else:
        p2, p3, p4 = moments
    for _ in range(MAX_STEPS):
        f = c * p2 - 1.0
        if sq and -TOL < f < TOL:
            break
        d1, d2 = 2.0 * c * p3, 6.0 * c * p4
        den = 2.0 * d1 * d1 - f * d2
        step = 2.0 * f * d1 / den if den > 0 else f / d1  # Halley, or Newton far right of root
        x = min(x - step, cap)
        sq, p2, p3, p4 = _powers(L, x)
    p = [v / p2 for v in sq]
    return p, list(accumulate(p)), x, (p2, p3, p4)


class TsallisState:
    """Cumulative IW loss estimates and the current sampling distribution."""

    def __init__(self, K: int, scale: float) -> None:
        if not scale > 0:
            raise ValueError("Tsallis-INF needs confidence_scale > 0 (it divides the rate η)")
        self.K, self.scale = K, float(scale)
        self.t = 0
        self.L = [0.0] * K
        self.floor = [1.0] * K
        self._solve(None, None)

    def eta(self, t: int) -> float:
        """η_t = 2 / (c √t)."""
        return 2.0 / (self.scale * math.sqrt(t))

    def _solve(self, x: float | None, moments: tuple[float, float, float] | None) -> None:
        self.p, self.cum, self.x, self.moments = tsallis_weights(
            self.L, self.eta(self.t + 1), x, moments)
        self.floor = list(map(min, self.floor, self.p))

    def observe(self, arm: int, loss: float, prob: float | None = None) -> None:
        """L̂_a += ℓ / p_a (p_a of the device's model: ``prob``, default the current one), then
        the distribution of the next round (moments corrected in O(1))."""
        L, x = self.L, self.x
        old = L[arm]
        L[arm] = new = old + loss / (self.p[arm] if prob is None else prob)
        self.t += 1
        if new > x:
            a, b = 1.0 / (old - x), 1.0 / (new - x)
            a2, b2 = a * a, b * b
            p2, p3, p4 = self.moments
            self._solve(x, (p2 - a2 + b2, p3 - a2 * a + b2 * b, p4 - a2 * a2 + b2 * b2))
        else:
            self._solve(None, None)

    def probabilities(self) -> np.ndarray:
        return np.array(self.p)

    def play(self, losses: np.ndarray, u: np.ndarray) -> list[int]:
        """Rounds t+1, …: sample a with u[i] (inverse CDF), observe losses[i, a], update."""
        K, observe = self.K, self.observe
        item, uu = losses.item, u.tolist()
        arms = [0] * len(uu)
        for i, ui in enumerate(uu):
            cum = self.cum
            a = min(bisect_right(cum, ui * cum[-1]), K - 1)  # first a with u·Σp < Σ_{b≤a} p_b
            arms[i] = a
            observe(a, item(i, a))
        return arms

    def state(self) -> dict[str, Any]:
        # The solver's point (p, its cumulative sums, x, the moments) as well: it was reached by
        # O(1) corrections, and solving afresh on load would differ in the last bits, so the
        # restored learner would not publish exactly the model the saved one would.
        return {"t": self.t, "L": list(self.L), "floor": list(self.floor),
                "solver": {"p": list(self.p), "cum": list(self.cum), "x": self.x,
                           "moments": list(self.moments)}}

    def load(self, state: dict[str, Any]) -> None:
        self.t = int(state["t"])
        self.L = [float(v) for v in state["L"]]
        self.floor = [float(v) for v in state.get("floor", [1.0] * self.K)]
        solver = state.get("solver")
        if solver is None:  # a state saved before the solver's point was kept
            self._solve(None, None)
        else:
            self.p = [float(v) for v in solver["p"]]
            self.cum = [float(v) for v in solver["cum"]]
            self.x = float(solver["x"])
            m = solver["moments"]
            self.moments = (float(m[0]), float(m[1]), float(m[2]))
