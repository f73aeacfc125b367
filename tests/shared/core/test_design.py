"""G-optimal designs meet the Kiefer–Wolfowitz bound max_a ‖a‖²_{V(π)⁻¹} ≤ d (1 + tol)."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.shared.core.design import g_optimal_design
from privbandit.shared.core.environments.fixed_linear import FixedLinearEnvironment


def _g(arms: np.ndarray, w: np.ndarray) -> float:
    V = (arms * w[:, None]).T @ arms
    return float(np.max(np.einsum("ij,jk,ik->i", arms, np.linalg.inv(V), arms)))


@pytest.mark.parametrize("K,d,tol", [(100, 5, 0.05), (1000, 5, 0.01), (10_000, 5, 0.05),
                                     (60, 10, 0.05), (500, 20, 0.1), (30, 2, 0.001)])
def test_design_meets_the_kiefer_wolfowitz_bound(K: int, d: int, tol: float) -> None:
    arms = FixedLinearEnvironment(d, K, np.random.default_rng(K + d)).fixed_arms
    design = g_optimal_design(arms, tol)
    w = design.weights
    assert w.shape == (K,) and (w >= 0).all() and w.sum() == pytest.approx(1.0)
    g = _g(arms, w)  # recomputed independently, in the original coordinates
    assert g == pytest.approx(design.g, rel=1e-8)
    assert d <= g * (1 + 1e-9) and g <= d * (1 + tol)  # every design has g ≥ d
    assert design.support.size <= K


def test_gaussian_arms_and_a_tight_tolerance() -> None:
    arms = np.random.default_rng(5).normal(size=(300, 6))
    design = g_optimal_design(arms, 1e-4)
    assert _g(arms, design.weights) <= 6 * (1 + 1e-4)


def test_arms_that_do_not_span_use_their_span() -> None:
    """Three arms in a plane of R^5: the bound is the span's dimension, 2."""
    basis = np.linalg.qr(np.random.default_rng(2).normal(size=(5, 2)))[0]
    arms = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]) @ basis.T
    design = g_optimal_design(arms, 0.01)
    assert design.rank == 2 and design.g <= 2 * 1.01
    pinv = np.linalg.pinv((arms * design.weights[:, None]).T @ arms)
    assert np.max(np.einsum("ij,jk,ik->i", arms, pinv, arms)) <= 2 * 1.01


def test_the_design_of_an_orthonormal_basis_is_uniform() -> None:
    design = g_optimal_design(np.eye(4), 1e-6)
    assert np.allclose(design.weights, 0.25) and design.g == pytest.approx(4.0)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError):
        g_optimal_design(np.eye(3), 0.0)
    with pytest.raises(ValueError):
        g_optimal_design(np.zeros((4, 3)), 0.1)
