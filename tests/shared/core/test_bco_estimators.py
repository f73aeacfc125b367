"""The BCO gradient estimators are unbiased for the smoothed loss (policies/bco_kernels.py).

Test loss f(x) = (wᵀ(x − c))³ + ‖x − a‖², whose smoothing f̂(y) = E_v f(y + Mv), v uniform in the
unit ball and M symmetric, has the closed-form gradient

    ∇f̂(y) = 3(wᵀ(y − c))² w + 3‖Mw‖²/(d + 2) · w + 2(y − a)        (E v vᵀ = I/(d + 2)),

which differs from ∇f(y) by the middle term. With c and a near y the losses (hence the estimator's
variance) are small while that term is not, so the noiseless tests also check that it is many
standard errors large: they tell the smoothed gradient from the plain one. M = δA (one point,
A = (∇²ℛ(y) + λI)^{-1/2}) or ρI (two points). Monte Carlo with fixed seeds; every coordinate
within 5 standard errors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.shared.core.bco_simulator import unit_directions
from privbandit.shared.core.policies.bco_kernels import (
    barrier_eigs,
    ellipsoid_apply,
    one_point_gradient,
    two_point_gradient,
)
from privbandit.shared.core.randomizers.bco import OnePointReport, TwoPointReport

K_SE = 5.0
N = 300_000
D = 4
R = 1.0
W = 3 * np.array([0.6, -0.3, 0.5, 0.2])
Y = np.array([0.35, -0.25, 0.2, 0.3])  # ‖y‖ ≈ 0.56 R
C = Y + np.array([0.02, 0.0, 0.0, 0.0])
A_PT = Y + np.array([0.0, 0.03, -0.02, 0.0])


def f(x: np.ndarray) -> np.ndarray:
    return ((x - C) @ W) ** 3 + np.sum((x - A_PT) ** 2, axis=-1)


def smoothed_gradient(M: np.ndarray) -> np.ndarray:
    Mw = M @ W
    return 3 * (W @ (Y - C)) ** 2 * W + 3 * (Mw @ Mw) / (D + 2) * W + 2 * (Y - A_PT)


def plain_gradient() -> np.ndarray:
    return 3 * (W @ (Y - C)) ** 2 * W + 2 * (Y - A_PT)


def ellipsoid_matrix(lam: float) -> np.ndarray:
    a, b, n2 = barrier_eigs(Y, R, lam)
    M = np.empty((D, D))
    for j in range(D):
        ellipsoid_apply(Y, np.eye(D)[j], a, b, n2, -0.5, M[:, j])
    return M


def check_unbiased(G: np.ndarray, target: np.ndarray, wrong: np.ndarray | None) -> None:
    mean = G.mean(axis=0)
    se = G.std(axis=0, ddof=1) / math.sqrt(G.shape[0])
    assert np.all(np.abs(mean - target) < K_SE * se), (mean, target, se)
    if wrong is not None:  # the test can tell the smoothed gradient from the plain one
        assert np.max(np.abs(wrong - target) / se) > 3 * K_SE


def test_ellipsoid_is_the_inverse_square_root_of_the_barrier_hessian() -> None:
    lam = 0.7
    q = R**2 - Y @ Y
    H = (2 / q) * np.eye(D) + (4 / q**2) * np.outer(Y, Y) + lam * np.eye(D)
    M = ellipsoid_matrix(lam)
    np.testing.assert_allclose(M @ M @ H, np.eye(D), atol=1e-12)


@pytest.mark.parametrize(("lam", "delta", "noise_sd"), [
    (0.0, 0.6, 0.0),    # Saha–Tewari: A = ∇²ℛ(y)^{-1/2}, exploration δ
    (0.8, 1.0, 0.0),    # Hazan–Levy: A = (∇²ℛ(y) + ημt I)^{-1/2}
    (0.0, 0.6, 1.0),    # with Alg. 1's noise on the loss: still unbiased
])
def test_one_point_estimator_is_unbiased_for_the_smoothed_loss(lam, delta, noise_sd) -> None:
    rng = np.random.default_rng(21)
    U = unit_directions(N, D, rng)
    X = np.empty((N, D))
    G = np.empty((N, D))
    g = np.empty(D)
    for i in range(N):
        one_point_gradient(Y, U[i], math.nan, R, lam, delta, X[i], g)
    values = f(X)
    if noise_sd:  # an offset keeps the losses in [0, B]: it adds variance, not bias
        values = values + 1.0
        rep = OnePointReport(1.0, 1e-6, 2.0)
        assert values.min() >= 0 and values.max() <= 2.0  # no clipping
        values = rep.report(values, rng)
    for i in range(N):
        one_point_gradient(Y, U[i], values[i], R, lam, delta, X[i], G[i])
    assert np.all(np.linalg.norm(X, axis=1) < R)
    check_unbiased(G, smoothed_gradient(delta * ellipsoid_matrix(lam)),
                   None if noise_sd else plain_gradient())


@pytest.mark.parametrize("private", [False, True])
def test_two_point_estimator_is_unbiased_for_the_smoothed_loss(private) -> None:
    rho = 0.35
    rng = np.random.default_rng(22)
    U = unit_directions(N, D, rng)
    X1, X2 = Y + rho * U, Y - rho * U
    diff = f(X1) - f(X2)
    if private:  # Zheng Alg. 2: + n_tᵀ(x1 − x2); G large enough that the clip never binds
        rep = TwoPointReport(1.0, 1e-6, 20.0)
        assert np.all(np.abs(diff) <= 20.0 * 2 * rho)
        diff = rep.report(f(X1), f(X2), X1, X2, rng)
    G = np.empty((N, D))
    for i in range(N):
        two_point_gradient(diff[i], U[i], rho, G[i])
    check_unbiased(G, smoothed_gradient(rho * np.eye(D)), None if private else plain_gradient())
