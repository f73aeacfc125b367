"""Per-arm statistics and UCB indices of the form u_a = m_a + s_t · g_a, updated per report.

All index policies here (UCB1, HeLDP-UCB-L, HeLDP-UCB-B and Zheng's reduction with a UCB black
box) estimate μ_a by the mean m_a = S_a / N_a of the (debiased) responses of arm a and add a width
that is √(ln t⁴) = s_t times a per-arm factor, t the number of reports so far (failure
probability t⁻⁴ per arm and round, as in HeLDP Agents 2 and 4):

    g_a = c · (k1 / √N_a + k2 · √W_a / N_a),   W_a = Σ_{used reports of a} w_t,

with c the ``confidence_scale`` and, per policy,
    UCB1 (σ-sub-Gaussian rewards):     k1 = √(2σ²),  k2 = 0          (σ = 1/2: √(2 ln t / N))
    HeLDP-UCB-L (Agent 2 line 15):     k1 = √(1/2),  k2 = √8,  w_t = ε_t⁻²
    HeLDP-UCB-B (Agent 4 line 11):     k1 = 0,       k2 = √(1/2), w_t = ((e^ε+1)/(e^ε−1))²
    Zheng + UCB (App. E, Thm 11):      k1 = √(2(1/4 + σ²)), k2 = 0

An arm with N_a = 0 has u_a = +∞. HeLDP-UCB-L adds Agent 2's warm-up (line 4): at round t an arm
with W_a ≤ ε_min⁻² ln t⁴ is pulled first (the lowest such index) — the condition under which the
Laplace tail bound (Lemma 6) holds; we publish it as u_a = +∞.

``play`` is the simulator's fast path (a scalar loop; K is small and numpy's per-call overhead
would dominate); ``observe`` and ``indices`` are the services' path. Both evaluate the same
floating-point expressions in the same order, so their decisions are identical.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def width_level(t: int) -> float:
    """s_t = √(ln t⁴) = √(4 ln t) (0 before the second report)."""
    return math.sqrt(4.0 * math.log(t)) if t > 1 else 0.0


class IndexState:
    """N_a, S_a, W_a for each arm and the cached m_a, g_a."""

    def __init__(self, K: int, k1: float, k2: float, scale: float, forced: float = 0.0) -> None:
        self.K = K
        self.k1, self.k2, self.scale = float(k1), float(k2), float(scale)
        self.forced = float(forced)  # ε_min⁻² for HeLDP-UCB-L's warm-up, 0 = none
        self.t = 0
        self.N = [0] * K
        self.S = [0.0] * K
        self.W = [0.0] * K
        self.m = [math.inf] * K
        self.g = [0.0] * K

    def _factor(self, n: int, w: float) -> float:
        return self.scale * (self.k1 / math.sqrt(n) + self.k2 * math.sqrt(w) / n)

    def observe(self, arm: int, x: float, w: float | None) -> None:
        """One report: t advances; a used response (w not None) updates arm ``arm``."""
        self.t += 1
        if w is None:
            return
        n = self.N[arm] + 1
        self.N[arm] = n
        self.S[arm] += x
        self.W[arm] += w
        self.m[arm] = self.S[arm] / n
        self.g[arm] = self._factor(n, self.W[arm])

    def indices(self) -> np.ndarray:
        """u_a after t reports, for round t + 1 (+∞: pull now)."""
        s = width_level(self.t)
        thr = self.forced * 4.0 * math.log(self.t + 1)
        return np.array([
            math.inf if (self.forced and self.W[j] <= thr) else self.m[j] + s * self.g[j]
            for j in range(self.K)
        ])

    def play(self, x: np.ndarray, w: list[float | None]) -> list[int]:
        """Rounds t+1, …, t+n: decide, then observe x[i, arm] with weight w[i] (None: dropped)."""
        K, N, S, W, m, g = self.K, self.N, self.S, self.W, self.m, self.g
        forced, factor = self.forced, self._factor
        log, item = math.log, x.item
        t = self.t
        s = width_level(t)
        low_w = min(W)
        arms = [0] * len(w)
        for i in range(len(w)):
            if forced and low_w <= forced * 4.0 * log(t + 1):
                thr = forced * 4.0 * log(t + 1)
                a = 0
                while W[a] > thr:
                    a += 1
            else:
                best, a = -math.inf, 0
                for j in range(K):
                    v = m[j] + s * g[j]
                    if v > best:
                        best, a = v, j
            arms[i] = a
            t += 1
            s = width_level(t)
            wi = w[i]
            if wi is None:
                continue
            n = N[a] + 1
            N[a] = n
            S[a] += item(i, a)
            before = W[a]
            W[a] = before + wi
            m[a] = S[a] / n
            g[a] = factor(n, W[a])
            if forced and before == low_w:
                low_w = min(W)
        self.t = t
        return arms

    def state(self) -> dict[str, Any]:
        return {"t": self.t, "N": list(self.N), "S": list(self.S), "W": list(self.W)}

    def load(self, state: dict[str, Any]) -> None:
        self.t = int(state["t"])
        self.N = [int(v) for v in state["N"]]
        self.S = [float(v) for v in state["S"]]
        self.W = [float(v) for v in state["W"]]
        self.m = [self.S[a] / n if n else math.inf for a, n in enumerate(self.N)]
        self.g = [self._factor(n, self.W[a]) if n else 0.0 for a, n in enumerate(self.N)]
