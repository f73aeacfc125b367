"""Compiled inner loops of the BCO policies (``shared.core.policies.bco``).

Every algorithm here is sequential — x_{t+1} depends on the feedback of user t — so T = 10⁶ users
are a loop of 10⁶ steps. numba compiles these loops (the ``fast`` extra); without numba they run
as plain Python (same results, far slower). All randomness arrives as arrays drawn by the caller
from injected ``numpy.random.Generator``s; nothing here draws.

Self-concordant barrier of the ball K = {‖x‖ ≤ R}: ℛ(x) = −ln(R² − ‖x‖²), a ν = 1 barrier with
    ∇ℛ(x) = 2x/q,   ∇²ℛ(x) = (2/q) I + (4/q²) x xᵀ,   q = R² − ‖x‖²,
so H = ∇²ℛ(y) + λI has eigenvalue a = 2/q + λ on y^⊥ and b = a + 4‖y‖²/q² along y, and H^{±1/2}
are closed forms (``ellipsoid_apply``). The Dikin ellipsoid {y + H^{-1/2} u : ‖u‖ ≤ 1} lies in K
whenever λ ≥ 0 (H ≽ ∇²ℛ(y), and the unit Dikin ellipsoid of a self-concordant barrier is inside the
set), so every point the one-point methods play is in K.

FTRL step over the ball: argmin_x  cᵀx + (k/2)‖x‖² + ℛ(x)  is x = −s c/‖c‖ with s ∈ [0, R) the
root of  k s + 2s/(R² − s²) = ‖c‖  (increasing in s), found by bisection (``ftrl_ball``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

try:  # the ``fast`` extra
    from numba import njit
except ImportError:  # pragma: no cover - exercised only without numba
    def njit(*args: Any, **kwargs: Any) -> Any:  # type: ignore[no-redef]  # stand-in for numba.njit
        if args and callable(args[0]):
            return args[0]
        return lambda f: f

BISECTION_STEPS = 64


@njit(cache=True)
def shape_value(kind: int, x: np.ndarray, p: np.ndarray, kappa: float, denom: float) -> float:
    """g(x − p) of ``shared.core.environments.bco``: quadratic (kind 0) or pseudo-Huber (1)."""
    s2 = 0.0
    for j in range(x.shape[0]):
        v = x[j] - p[j]
        s2 += v * v
    if kind == 0:
        return s2 / denom
    return (math.sqrt(kappa * kappa + s2) - kappa) / denom


@njit(cache=True)
def barrier_eigs(y: np.ndarray, R: float, lam: float) -> tuple[float, float, float]:
    """(a, b, ‖y‖²): eigenvalues of ∇²ℛ(y) + λI on y^⊥ and along y."""
    n2 = 0.0
    for j in range(y.shape[0]):
        n2 += y[j] * y[j]
    q = R * R - n2
    a = 2.0 / q + lam
    return a, a + 4.0 * n2 / (q * q), n2


@njit(cache=True)
def ellipsoid_apply(y: np.ndarray, u: np.ndarray, a: float, b: float, n2: float, power: float,
                    out: np.ndarray) -> None:
    """out = H^power u for H with eigenvalue a on y^⊥ and b along y (power = ±1/2)."""
    pa = a**power
    pb = b**power
    proj = 0.0
    if n2 > 0.0:
        for j in range(y.shape[0]):
            proj += y[j] * u[j]
        proj /= n2
    for j in range(y.shape[0]):
        out[j] = pa * u[j] + (pb - pa) * y[j] * proj


@njit(cache=True)
def ftrl_ball(c: np.ndarray, scale: float, k: float, R: float, out: np.ndarray) -> None:
    """out = argmin_x (scale·c)ᵀx + (k/2)‖x‖² − ln(R² − ‖x‖²) over the open ball."""
    cn = 0.0
    for j in range(c.shape[0]):
        cn += c[j] * c[j]
    cn = math.sqrt(cn)
    target = scale * cn
    if cn == 0.0 or target == 0.0:
        for j in range(c.shape[0]):
            out[j] = 0.0
        return
    lo = 0.0
    hi = R
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        q = R * R - mid * mid  # 0 only where rounding reaches R: the root is below
        if q > 0.0 and k * mid + 2.0 * mid / q < target:
            lo = mid
        else:
            hi = mid
    for j in range(c.shape[0]):
        out[j] = -lo * c[j] / cn


@njit(cache=True)
def one_point_gradient(y: np.ndarray, u: np.ndarray, value: float, R: float, lam: float,
                       delta: float, x_out: np.ndarray, g_out: np.ndarray) -> None:
    """The ellipsoidal one-point estimator (Saha–Tewari / Hazan–Levy Alg. 1).

    With A = (∇²ℛ(y) + λI)^{-1/2}: the point played is x = y + δ A u, and given the feedback v at x,
    g = (d/δ) v A^{-1} u. For u uniform on the sphere, E[g] = ∇f̂(y) with f̂(y) = E_w f(y + δ A w),
    w uniform in the unit ball (Stokes; Flaxman et al. Lemma 1 after the linear map δA). Call
    twice: first with value = nan to get x_out, then with the feedback to get g_out.
    """
    a, b, n2 = barrier_eigs(y, R, lam)
    d = y.shape[0]
    if math.isnan(value):
        ellipsoid_apply(y, u, a, b, n2, -0.5, x_out)
        for j in range(d):
            x_out[j] = y[j] + delta * x_out[j]
        return
    ellipsoid_apply(y, u, a, b, n2, 0.5, g_out)
    coef = d * value / delta
    for j in range(d):
        g_out[j] *= coef


@njit(cache=True)
def one_point_loop(y: np.ndarray, c: np.ndarray, t0: int, U: np.ndarray, zeta: np.ndarray,
                   z: np.ndarray, sigma: float, kind: int, scale: float, bnoise: float,
                   kappa: float, denom: float, points: np.ndarray, period: int, R: float,
                   B: float, eta: float, mu: float, delta: float, inst: np.ndarray,
                   maxnorm: np.ndarray) -> None:
    """Users t0 … t0+n−1 of ``runs`` independent copies (arrays (runs, d) y, c updated in place).

    Per user (0-based round t, run r): play x = y + δAu (A with λ = ημ(t+1)); the user's loss
    f = B(1−ν)g + Bν ζ is clipped to [0, B] and reported with σ z added (Alg. 1 line 5; σ = 0 for
    the baseline); c += g − μ y; y ← argmin ηcᵀx + ημ(t+1)/2 ‖x‖² + ℛ(x), the FTRL step of
    Hazan–Levy Alg. 1 (Σ_τ gᵀx + μ/2‖x − y_τ‖², up to constants; Saha–Tewari when μ = 0).
    inst[i, r] = F_t(x), the expected loss of the point played.
    """
    n, runs, d = U.shape
    m = points.shape[0]
    x = np.empty(d)
    g = np.empty(d)
    for i in range(n):
        t = t0 + i
        p = points[0] if period == 0 else points[(t // period) % m]
        lam = eta * mu * (t + 1)
        for r in range(runs):
            yr = y[r]
            one_point_gradient(yr, U[i, r], math.nan, R, lam, delta, x, g)
            nx = 0.0
            for j in range(d):
                nx += x[j] * x[j]
            nx = math.sqrt(nx)
            if nx > maxnorm[r]:
                maxnorm[r] = nx
            gv = shape_value(kind, x, p, kappa, denom)
            inst[i, r] = scale * gv + 0.5 * bnoise
            f = min(max(scale * gv + bnoise * zeta[i, r], 0.0), B)
            one_point_gradient(yr, U[i, r], f + sigma * z[i, r], R, lam, delta, x, g)
            for j in range(d):
                c[r, j] += g[j] - mu * yr[j]
            ftrl_ball(c[r], eta, eta * mu * (t + 1), R, yr)


@njit(cache=True)
def two_point_gradient(diff: float, u: np.ndarray, rho: float, out: np.ndarray) -> None:
    """Agarwal–Dekel–Xiao's estimator (Zheng Alg. 4 line 6): g = (d/(2ρ)) · diff · u, with diff the
    (noisy) f(y + ρu) − f(y − ρu). E[g] = ∇f̂(y), f̂(y) = E_w f(y + ρw), w uniform in the ball."""
    d = u.shape[0]
    coef = d * diff / (2.0 * rho)
    for j in range(d):
        out[j] = coef * u[j]


@njit(cache=True)
def two_point_loop(y: np.ndarray, t0: int, U: np.ndarray, z: np.ndarray, sigma: float,
                   kind: int, scale: float, kappa: float, denom: float, bnoise: float,
                   points: np.ndarray, period: int, R: float, G: float, eta0: float, mu: float,
                   rho: float, shrink: float, inst: np.ndarray, maxnorm: np.ndarray) -> None:
    """Zheng Alg. 2 around Alg. 4: play y ± ρu, report diff + σ z ‖x1 − x2‖ (z standard normal:
    n_tᵀ(x1 − x2) = 2ρ n_tᵀu ~ N(0, 4ρ²σ²) for ‖u‖ = 1, the same law), step η_t = η0
    (μ = 0) or η0/(μ(t+1)), project onto (1 − ξ)K, the ball of radius ``shrink``.
    inst[i, r] = (F_t(x1) + F_t(x2))/2 (Eq. 2 with K = 2)."""
    n, runs, d = U.shape
    m = points.shape[0]
    x1 = np.empty(d)
    x2 = np.empty(d)
    g = np.empty(d)
    for i in range(n):
        t = t0 + i
        p = points[0] if period == 0 else points[(t // period) % m]
        eta = eta0 if mu == 0.0 else eta0 / (mu * (t + 1))
        for r in range(runs):
            yr = y[r]
            ur = U[i, r]
            n1 = 0.0
            n2 = 0.0
            for j in range(d):
                x1[j] = yr[j] + rho * ur[j]
                x2[j] = yr[j] - rho * ur[j]
                n1 += x1[j] * x1[j]
                n2 += x2[j] * x2[j]
            nx = math.sqrt(max(n1, n2))
            if nx > maxnorm[r]:
                maxnorm[r] = nx
            g1 = shape_value(kind, x1, p, kappa, denom)
            g2 = shape_value(kind, x2, p, kappa, denom)
            inst[i, r] = 0.5 * scale * (g1 + g2) + 0.5 * bnoise
            bound = 2.0 * rho * G
            diff = min(max(scale * (g1 - g2), -bound), bound)  # the user's ζ_t cancels
            two_point_gradient(diff + 2.0 * rho * sigma * z[i, r], ur, rho, g)
            ny = 0.0
            for j in range(d):
                yr[j] -= eta * g[j]
                ny += yr[j] * yr[j]
            ny = math.sqrt(ny)
            if ny > shrink:
                for j in range(d):
                    yr[j] *= shrink / ny
