"""Bandit convex optimisation environments (issue 12): ``bco-quadratic`` and ``bco-convex``.

Decision set: the ball K = R·𝔹 of radius R in d dimensions (so rB ⊂ K ⊂ RB with r = R, as
Zheng et al. §3.2 / Agarwal–Dekel–Xiao assume). User t carries a loss in [0, B]

    f_t(x) = B · ((1 − ν) g(x − x*_t) + ν ζ_t),     ζ_t ~ U[0, 1] i.i.d. (the user's own offset),

with g ∈ [0, 1] on K and ν ∈ [0, 1) the share of the loss that is noise. Two points queried for one
user (two-point feedback) see the same ζ_t. The expected loss is F_t(x) = B((1 − ν) g(x − x*_t)
+ ν/2), and the regret is the paper's (Zheng et al. §3.1, and Eq. 2 for two points):

    Reg(t) = Σ_{s ≤ t} F_s(played_s) − min_{x ∈ K} Σ_{s ≤ t} F_s(x)

(played_s the point, or the mean of the two points' losses). The comparator is exact: the optimum
x*_t takes m values p_1 … p_m, so Σ_s F_s(x) = Σ_k n_k(t) F(x; p_k) with counts n_k(t).

Shapes g (D = R + ‖x*‖ bounds ‖x − x*‖ on K):
- ``bco-quadratic``: g(v) = ‖v‖² / D² — μ-strongly convex and β-smooth with
  μ = β = 2B(1−ν)/D², G-Lipschitz with G = 2B(1−ν)/D (Corollary 4's strongly convex + smooth case).
- ``bco-convex``: pseudo-Huber g(v) = (√(κ² + ‖v‖²) − κ)/(√(κ² + D²) − κ), κ = R/10 — convex,
  β-smooth with β = B(1−ν)/(κ H), H = √(κ² + D²) − κ, G-Lipschitz with G = B(1−ν)/H, and linear
  far from x*: its strong-convexity modulus on K, B(1−ν)κ²/((κ² + D²)^{3/2} H), is 1/3400 of β
  (R = 1), so it is the merely convex + smooth case of Corollary 4 (the policies use μ = 0).

Drift (``drift_period`` P > 0): an oblivious adversary moves the optimum every P users along the
cycle r*·a, r*·b, −r*·a, −r*·b (a ⟂ b random unit vectors), so the best fixed point is near the
centre; P = 0 keeps x* = r*·a fixed. r* = R/2 by default.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

BCO_ENVIRONMENTS = ("bco-quadratic", "bco-convex")
KIND = {"bco-quadratic": 0, "bco-convex": 1}
HUBER_KAPPA = 0.1  # κ / R of the pseudo-Huber shape
UNIFORM_SAMPLES = 20_000  # Monte Carlo points for the uniformly random policy's regret


def uniform_in_ball(n: int, d: int, radius: float, rng: np.random.Generator) -> np.ndarray:
    """n points uniform in the ball of the given radius (direction × radius · U^{1/d})."""
    v = rng.standard_normal((n, d))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v * (radius * rng.random(n) ** (1.0 / d))[:, None]


# (kind, B(1−ν), Bν, κ, denominator, optima, period): what the compiled loops read.
KernelParams = tuple[int, float, float, float, float, np.ndarray, int]

class BCOEnvironment:
    """Losses f_t(x) = B((1 − ν) g(x − x*_t) + ν ζ_t) on the ball of radius R (module doc)."""

    def __init__(self, name: str, d: int, rng: np.random.Generator, radius: float = 1.0,
                 loss_bound: float = 1.0, noise: float = 0.2, drift_period: int = 0,
                 optimum_norm: float = 0.5) -> None:
        if name not in KIND:
            raise ValueError(f"unknown BCO environment {name!r}; known: "
                             f"{', '.join(BCO_ENVIRONMENTS)}")
        if d < 1 or not radius > 0 or not loss_bound > 0:
            raise ValueError("need d >= 1, radius > 0 and loss_bound > 0")
        if not 0.0 <= noise < 1.0 or not 0.0 <= optimum_norm <= 1.0 or drift_period < 0:
            raise ValueError("need noise in [0, 1), optimum_norm in [0, 1], drift_period >= 0")
        if drift_period > 0 and d < 2:
            raise ValueError("a drifting optimum needs d >= 2")
        self.name, self.kind, self.d = name, KIND[name], int(d)
        self.R, self.B, self.noise = float(radius), float(loss_bound), float(noise)
        self.period = int(drift_period)
        q, _ = np.linalg.qr(rng.standard_normal((d, min(d, 2))))
        r_star = optimum_norm * self.R
        a = q[:, 0] * r_star
        self.points = np.stack([a]) if self.period == 0 else np.stack([a, q[:, 1] * r_star, -a,
                                                                       -q[:, 1] * r_star])
        D = self.R + r_star
        self.kappa = HUBER_KAPPA * self.R
        self.scale = self.B * (1.0 - self.noise)  # B(1 − ν)
        if self.kind == 0:
            self.denom = D**2
            self.strong_convexity = self.smoothness = 2 * self.scale / D**2
            self.lipschitz = 2 * self.scale / D
        else:
            H = math.sqrt(self.kappa**2 + D**2) - self.kappa
            self.denom = H
            self.strong_convexity = 0.0
            self.smoothness = self.scale / (self.kappa * H)
            self.lipschitz = self.scale / H
            self.curvature_floor = self.scale * self.kappa**2 / ((self.kappa**2 + D**2) ** 1.5 * H)
        self._uniform = uniform_in_ball(UNIFORM_SAMPLES, d, self.R, rng)

    # -- the losses -----------------------------------------------------------------------------
    def shape(self, V: np.ndarray) -> np.ndarray:
        """g(v) ∈ [0, 1] for rows v = x − x* (module doc)."""
        s2 = np.sum(np.square(V), axis=-1)
        if self.kind == 0:
            return s2 / self.denom
        return (np.sqrt(self.kappa**2 + s2) - self.kappa) / self.denom

    def optimum_index(self, t: np.ndarray) -> np.ndarray:
        """Index of x*_t among ``points`` for 0-based rounds t."""
        t = np.asarray(t, dtype=np.int64)
        return np.zeros_like(t) if self.period == 0 else (t // self.period) % len(self.points)

    def mean_loss(self, X: np.ndarray, t: np.ndarray) -> np.ndarray:
        """F_t(x) = B((1 − ν) g(x − x*_t) + ν/2) for points X (..., d) at rounds t (...)."""
        P = self.points[self.optimum_index(t)]
        return self.scale * self.shape(X - P) + 0.5 * self.B * self.noise

    def loss(self, X: np.ndarray, t: np.ndarray, zeta: np.ndarray) -> np.ndarray:
        """f_t(x) = B((1 − ν) g(x − x*_t) + ν ζ_t): what user t suffers."""
        P = self.points[self.optimum_index(t)]
        return self.scale * self.shape(X - P) + self.B * self.noise * zeta

    def user_offsets(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """ζ_t ~ U[0, 1] of n users."""
        return rng.random(n)

    # -- regret ---------------------------------------------------------------------------------
    def counts(self, t: int) -> np.ndarray:
        """n_k(t): how many of the first t rounds had optimum p_k."""
        m = len(self.points)
        if self.period == 0:
            return np.array([float(t)])
        full, rest = divmod(t, self.period * m)
        n = np.full(m, float(full * self.period))
        for k in range(m):
            n[k] += min(max(rest - k * self.period, 0), self.period)
        return n

    def best_fixed_loss(self, t: int) -> float:
        """min_{x ∈ K} Σ_{s < t} F_s(x), exactly (quadratic) or by a convex minimisation (the
        minimiser lies in the convex hull of the optima, inside K)."""
        n = self.counts(t)
        const = 0.5 * self.B * self.noise * t
        if self.period == 0 or t == 0:
            return const
        w = n / n.sum()
        if self.kind == 0:
            mean = w @ self.points
            val = float(w @ np.sum(self.points**2, axis=1) - mean @ mean) / self.denom
            return const + self.scale * t * val

        def obj(x: np.ndarray) -> tuple[float, np.ndarray]:
            V = x - self.points
            r = np.sqrt(self.kappa**2 + np.sum(V**2, axis=1))
            return float(w @ (r - self.kappa)), (w / r) @ V

        from scipy.optimize import minimize  # here: scipy.optimize costs a second of start-up

        res = minimize(obj, w @ self.points, jac=True, method="BFGS",
                       options={"gtol": 1e-12, "maxiter": 500})
        return const + self.scale * t * float(res.fun) / self.denom

    def best_fixed_cumulative(self, checkpoints: np.ndarray) -> np.ndarray:
        return np.array([self.best_fixed_loss(int(t)) for t in checkpoints])

    def uniform_regret(self, checkpoints: np.ndarray) -> np.ndarray:
        """Regret of the uniformly random point of K (Monte Carlo over ``UNIFORM_SAMPLES``
        fixed points per optimum: an estimate, not exact)."""
        per_point = np.array([float(np.mean(self.scale * self.shape(self._uniform - p)))
                              for p in self.points]) + 0.5 * self.B * self.noise
        played = np.array([self.counts(int(t)) @ per_point for t in checkpoints])
        return played - self.best_fixed_cumulative(checkpoints)

    def kernel_params(self) -> KernelParams:
        """(kind, B(1−ν), Bν, κ, denominator, optima, period) for the compiled loops."""
        return (self.kind, self.scale, self.B * self.noise, self.kappa, self.denom,
                np.ascontiguousarray(self.points), self.period)

    def params(self) -> dict[str, Any]:
        out = {"env": self.name, "d": self.d, "radius": self.R, "loss_bound": self.B,
               "noise": self.noise, "drift_period": self.period,
               "optima": self.points.tolist(), "lipschitz": self.lipschitz,
               "strong_convexity": self.strong_convexity, "smoothness": self.smoothness}
        if self.kind == 1:
            out["curvature_floor"] = self.curvature_floor
        return out


def make_bco_environment(name: str, d: int, rng: np.random.Generator, **kw: Any
                         ) -> BCOEnvironment:
    return BCOEnvironment(name, d, rng, **kw)
