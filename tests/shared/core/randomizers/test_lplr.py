"""LPLR-Update's randomizer (Li, Simchi-Levi & Wang, Alg. 3, Prop. 4.1; docs/lplr.md §3): the
stated L1 sensitivities, the exact ε of the Laplace parts, the Wishart mechanism's density ratio
and the δ of its moving support, the aggregate-noise fast path and unbiasedness."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import laplace, wishart

from privbandit.shared.core.accounting.lplr import lplr_ledger
from privbandit.shared.core.randomizers.base import upper_indices
from privbandit.shared.core.randomizers.lplr import (
    BlockSums,
    LPLRRandomizer,
    laplace_sum,
    laplace_sum_bound,
)

D = 4
BLOCKS = 3


def _unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.normal(size=(n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True) * rng.random((n, 1)) ** 0.2


def _flat(s: BlockSums, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    iu = upper_indices(d)
    return s.counts, s.vectors.ravel(), s.matrices[:, iu[0], iu[1]].ravel()


def test_sensitivities_hold_and_are_attained() -> None:
    """Over random neighbouring users (any block or none, any ‖u‖, ‖z‖ ≤ 1) the clean reports
    move by at most (2, 2√d, d + 1) in L1; the pair u = z = 1/√d in two blocks attains all three."""
    rng = np.random.default_rng(11)
    rz = LPLRRandomizer(D, 1.0, 0.2, 0.4)
    n = 20_000
    blocks = rng.integers(-1, BLOCKS, size=(2, n))
    u, z = _unit_rows(rng, 2 * n, D), _unit_rows(rng, 2 * n, D)
    worst = np.zeros(3)
    for i in range(n):
        a = rz.clean(blocks[:, i][:1], u[i:i + 1], z[i:i + 1], BLOCKS)
        b = rz.clean(blocks[:, i][1:], u[n + i:n + i + 1], z[n + i:n + i + 1], BLOCKS)
        dist = [np.abs(p - q).sum() for p, q in zip(_flat(a, D), _flat(b, D), strict=True)]
        worst = np.maximum(worst, dist)
    bound = np.array([rz.count_sensitivity, rz.vector_sensitivity, rz.matrix_sensitivity])
    assert (worst <= bound * (1 + 1e-12)).all()
    e = np.full((1, D), 1 / math.sqrt(D))
    a, b = rz.clean(np.array([0]), e, e, BLOCKS), rz.clean(np.array([1]), e, e, BLOCKS)
    dist = [np.abs(p - q).sum() for p, q in zip(_flat(a, D), _flat(b, D), strict=True)]
    assert dist == pytest.approx(bound.tolist(), rel=1e-12)


def _laplace_log_density(rz: LPLRRandomizer, out: BlockSums, clean: BlockSums) -> float:
    parts = zip(_flat(out, D), _flat(clean, D),
                (rz.count_scale, rz.vector_scale, rz.matrix_scale), strict=True)
    return float(sum(laplace.logpdf(o, loc=c, scale=s).sum() for o, c, s in parts))


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
def test_laplace_report_is_exactly_epsilon_ldp(eps: float) -> None:
    """log p(o | user) − log p(o | user') ≤ ε at every sampled output o, for the worst pair and
    random pairs, and = ε exactly where every noise coordinate lies beyond both clean values."""
    rng = np.random.default_rng(5)
    rz = LPLRRandomizer(D, eps, 0.25, 0.35)
    e = np.full((1, D), 1 / math.sqrt(D))
    pairs = [(rz.clean(np.array([0]), e, e, BLOCKS), rz.clean(np.array([1]), e, e, BLOCKS))]
    for _ in range(20):
        b = rng.integers(-1, BLOCKS, size=2)
        u, z = _unit_rows(rng, 2, D), _unit_rows(rng, 2, D)
        pairs.append((rz.clean(b[:1], u[:1], z[:1], BLOCKS), rz.clean(b[1:], u[1:], z[1:], BLOCKS)))
    worst = -np.inf
    for a, b in pairs:
        for _ in range(50):
            out = a + rz.aggregate_noise(1, BLOCKS, rng)
            worst = max(worst, _laplace_log_density(rz, out, a) - _laplace_log_density(rz, out, b))
    assert worst <= eps * (1 + 1e-9)
    a, b = pairs[0]
    far = BlockSums(1, *(np.where(p >= q, p + 100.0, p - 100.0)
                         for p, q in ((a.counts, b.counts), (a.vectors, b.vectors),
                                      (a.matrices, b.matrices))))
    ratio = _laplace_log_density(rz, far, a) - _laplace_log_density(rz, far, b)
    assert ratio == pytest.approx(eps, rel=1e-9)
    assert lplr_ledger(rz).ldp_epsilon == eps and lplr_ledger(rz).ldp_delta == 0.0


@pytest.mark.parametrize("eps_m", [0.3, 1.0])
def test_wishart_density_ratio_on_common_support_is_the_closed_form(eps_m: float) -> None:
    """For S = U + W, W ~ W_d(d + 1, I/(2ε_m)), wherever S − U' is also positive definite:
    log f(S − U) − log f(S − U') = (tr U − tr U')/(2c) = ε_m (tr U − tr U') ≤ ε_m."""
    rng = np.random.default_rng(8)
    rz = LPLRRandomizer(D, eps_m / 0.5, 0.25, 0.25, matrix_noise="wishart")
    assert rz.eps_matrix == pytest.approx(eps_m)
    scale = rz.wishart_c * np.eye(D)
    checked = 0
    for _ in range(300):
        u, v = _unit_rows(rng, 2, D)
        U, V = np.outer(u, u), np.outer(v, v) * rng.integers(0, 2)  # V may be the empty input
        S = U + rz.wishart_sum(1, 1, rng)[0]
        if np.linalg.eigvalsh(S - V).min() <= 0:
            continue
        got = (wishart.logpdf(S - U, df=rz.wishart_df, scale=scale)
               - wishart.logpdf(S - V, df=rz.wishart_df, scale=scale))
        assert got == pytest.approx(eps_m * (np.trace(U) - np.trace(V)), abs=1e-8)
        assert got <= eps_m + 1e-9
        checked += 1
    assert checked > 50


@pytest.mark.parametrize("eps_m", [0.2, 1.0])
def test_wishart_support_mismatch_has_probability_one_minus_exp_minus_eps(eps_m: float) -> None:
    """P(W − uuᵀ not positive definite) = P(χ²_2 ≤ ‖u‖²/c) = 1 − e^{−ε_m‖u‖²} (docs §3.3): the
    δ of the paper's Wishart part. Monte Carlo, 40,000 draws, within 4 standard errors."""
    rng = np.random.default_rng(21)
    rz = LPLRRandomizer(D, eps_m / 0.5, 0.25, 0.25, matrix_noise="wishart")
    n = 40_000
    W = rz.wishart_sum(1, n, rng)
    u = np.zeros(D)
    u[0] = 1.0
    quad = np.einsum("i,nij,j->n", u, np.linalg.inv(W), u)
    p_hat = float(np.mean(quad >= 1.0))
    p = -math.expm1(-eps_m)
    assert abs(p_hat - p) <= 4 * math.sqrt(p * (1 - p) / n)
    ledger = lplr_ledger(rz)
    assert ledger.ldp_delta == pytest.approx(p) and ledger.ldp_epsilon == rz.epsilon


def test_laplace_sum_has_the_law_of_a_sum_of_laplace_draws() -> None:
    """Gamma(n, b) − Gamma(n, b) against explicit sums of n Laplace(b): variance 2nb² and
    kurtosis 3 + 3/n agree within 4 standard errors (200,000 draws each)."""
    rng = np.random.default_rng(2)
    n, b, reps = 3, 0.7, 200_000
    fast = laplace_sum(n, b, (reps,), rng)
    slow = rng.laplace(0, b, size=(reps, n)).sum(axis=1)
    for x in (fast, slow):
        var = x.var()
        assert abs(var - 2 * n * b * b) <= 4 * math.sqrt((x**4).mean() - var**2) / math.sqrt(reps)
        kurt = (x**4).mean() / var**2
        assert abs(kurt - (3 + 3 / n)) <= 0.1
    # The tail bound used by the confidence widths holds (failure rate below δ).
    bound = laplace_sum_bound(n, b, 1e-3)
    assert np.mean(np.abs(fast) >= bound) <= 1e-3


@pytest.mark.parametrize("noise", ["laplace", "wishart"])
def test_debiased_block_sums_are_unbiased(noise: str) -> None:
    """E[debiased(clean + aggregate noise)] = clean, per coordinate within 4 standard errors."""
    rng = np.random.default_rng(9)
    rz = LPLRRandomizer(D, 2.0, 0.2, 0.4, matrix_noise=noise)
    users = 40
    block = rng.integers(-1, BLOCKS, size=users)
    clean = rz.clean(block, _unit_rows(rng, users, D), _unit_rows(rng, users, D), BLOCKS)
    reps = 4000
    outs = [rz.debiased(clean + rz.aggregate_noise(users, BLOCKS, rng)) for _ in range(reps)]
    for part, truth in ((lambda s: s.counts, clean.counts), (lambda s: s.vectors, clean.vectors),
                        (lambda s: s.matrices, clean.matrices)):
        x = np.stack([part(o) for o in outs])
        se = x.std(axis=0, ddof=1) / math.sqrt(reps)
        assert (np.abs(x.mean(axis=0) - truth) <= 4 * se + 1e-12).all()


def test_randomizer_refuses_out_of_range_inputs() -> None:
    rz = LPLRRandomizer(D, 1.0, 0.2, 0.4)
    ok = np.zeros((1, D))
    with pytest.raises(ValueError):
        rz.clean(np.array([0]), np.full((1, D), 1.0), ok, BLOCKS)
    with pytest.raises(ValueError):
        rz.clean(np.array([BLOCKS]), ok, ok, BLOCKS)
    with pytest.raises(ValueError):
        rz.clean(np.array([0]), np.full((1, D), np.nan), ok, BLOCKS)
    with pytest.raises(ValueError):
        LPLRRandomizer(D, 1.0, 0.6, 0.5)
