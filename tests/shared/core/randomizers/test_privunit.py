"""PrivUnit2 on ldp-linucb's report (shared/core/randomizers/privunit.py; issue 44 item 5).

Privacy: the calibrated (γ, p) spend exactly ε by the closed form (★), whose cap fraction q is
checked against an independent quadrature of the sphere's marginal; the sampler draws the density
(★) assumes — P(z in the cap) = p and the law of t = ⟨z, û⟩ inside and outside the cap — and
z's first and second moments are the stated m û and a ûûᵀ + b (I − ûûᵀ) (k standard errors,
fixed seeds). Estimator: the analyzer's (G̃, ũ) are unbiased in every encoding, including norm
rounding (‖x‖ < L, y ∈ (0, 1)), and each coordinate's variance is within the stated bound.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate

from privbandit.shared.core.accounting import ledgers
from privbandit.shared.core.policies.config import LDPGLBConfig, LDPLinUCBConfig
from privbandit.shared.core.policies.ldp_linucb import LDPLinUCB
from privbandit.shared.core.randomizers.privunit import (
    PrivUnitRandomizer,
    cap_first_moment,
    cap_fraction,
    privunit_epsilon,
    privunit_parameters,
    sample_cap,
)

C = 1 / math.sqrt(2)
K_SE = 5.0  # tolerance in standard errors


def marginal_density(D: int):  # noqa: ANN202 - a closure
    """Density of t = ⟨U, e⟩, U uniform on S^{D−1}: ∝ (1 − t²)^{(D−3)/2}, normalised here by
    quadrature (independent of the module's Beta-function forms)."""
    z = integrate.quad(lambda t: (1 - t * t) ** ((D - 3) / 2), -1, 1)[0]
    return lambda t: (1 - t * t) ** ((D - 3) / 2) / z


@pytest.mark.parametrize("D", [3, 8, 19])
@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
def test_calibration_spends_exactly_epsilon(D: int, eps: float) -> None:
    gamma, p, m = privunit_parameters(D, eps)
    assert privunit_epsilon(D, gamma, p) == pytest.approx(eps, abs=1e-9)
    f = marginal_density(D)
    q = integrate.quad(f, gamma, 1)[0]
    assert cap_fraction(D, gamma) == pytest.approx(q, rel=1e-7)
    # The likelihood ratio's two density levels (per unit of the uniform measure): their ratio
    # is e^ε, so no pair of inputs and output is further apart (★).
    assert math.log((p / q) / ((1 - p) / (1 - q))) == pytest.approx(eps, abs=1e-7)
    mu = integrate.quad(lambda t: t * f(t), gamma, 1)[0]
    assert cap_first_moment(D, gamma) == pytest.approx(mu, rel=1e-7)
    assert m == pytest.approx(mu * (p / q - (1 - p) / (1 - q)), rel=1e-9)
    # γ minimises the variance 1/m²: no γ on a grid does better at the same ε.
    for g in np.linspace(0.0, 0.95, 60):
        qq = cap_fraction(D, float(g))
        e0 = eps - math.log((1 - qq) / qq)
        if e0 < 0:
            continue
        pp = 1 / (1 + math.exp(-e0))
        assert cap_first_moment(D, float(g)) * (pp / qq - (1 - pp) / (1 - qq)) <= m * (1 + 1e-6)


@pytest.mark.parametrize("D", [3, 19])
def test_sampler_draws_the_stated_density(D: int) -> None:
    eps, n = 1.0, 200_000
    gamma, p, m = privunit_parameters(D, eps)
    rng = np.random.default_rng(np.random.SeedSequence(44).spawn(1)[0])
    u = rng.normal(size=D)
    u /= np.linalg.norm(u)
    z = sample_cap(D, gamma, p, np.tile(u, (n, 1)), rng)
    np.testing.assert_allclose(np.linalg.norm(z, axis=1), 1.0, atol=1e-12)
    t = z @ u
    inside = t >= gamma
    assert abs(inside.mean() - p) <= K_SE * math.sqrt(p * (1 - p) / n)
    # The law of t inside and outside the cap: P(t ≥ s | region) at several s, against the
    # quadrature of the sphere's marginal restricted to the region.
    f = marginal_density(D)
    q = integrate.quad(f, gamma, 1)[0]
    for s in np.linspace(-0.8, 0.8, 9):
        if s >= gamma:
            want, got, k = integrate.quad(f, s, 1)[0] / q, (t[inside] >= s).mean(), inside.sum()
        else:
            want = integrate.quad(f, s, gamma)[0] / (1 - q)
            got, k = (t[~inside] >= s).mean(), (~inside).sum()
        assert abs(got - want) <= K_SE * math.sqrt(max(want * (1 - want), 1e-4) / k) + 1e-12
    # Moments: E z = m u; E z zᵀ = a u uᵀ + b (I − u uᵀ) with b = (1 − a)/(D − 1) — in particular
    # the component orthogonal to u is isotropic.
    mean = z.mean(axis=0)
    se = z.std(axis=0) / math.sqrt(n)
    assert np.all(np.abs(mean - m * u) <= K_SE * se)
    a = float(np.mean(t * t))
    perp = z - t[:, None] * u
    second = perp.T @ perp / n
    proj = np.eye(D) - np.outer(u, u)
    b = (1 - a) / (D - 1)
    # Entries of (z⊥ z⊥ᵀ) are bounded by 1: s.e. ≤ 1/√n.
    assert np.abs(second - b * proj).max() <= K_SE / math.sqrt(n)


def reports_and_truth(rand: PrivUnitRandomizer, n: int, rng: np.random.Generator,
                      c: float | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n reports of random contexts (norms below L: norm rounding at work) and rewards in
    [0, 1], with the true Σ x xᵀ and Σ y x."""
    d = rand.d
    if c is None:
        x = rng.normal(size=(n, d))
        x *= rng.random((n, 1)) ** 0.5 / np.linalg.norm(x, axis=1, keepdims=True)
    else:
        rest = rng.normal(size=(n, d - 1))
        rest *= math.sqrt(1 - c * c) * rng.random((n, 1)) ** 0.5 / np.linalg.norm(
            rest, axis=1, keepdims=True)
        x = np.concatenate([np.full((n, 1), c), rest], axis=1)
    y = rng.random(n)
    return rand.randomize(x, y, rng), x.T @ x, x.T @ y


@pytest.mark.parametrize(("encoding", "w", "c"), [
    ("plain", 1.0, None), ("frobenius", 1.5, None), ("centered", 2.0, C),
    ("centered-upper", 1.0, C),
])
def test_estimator_is_unbiased_within_the_stated_variance(encoding: str, w: float,
                                                          c: float | None) -> None:
    d, n, batches = 3, 4_000, 10
    rand = PrivUnitRandomizer(d, 1.0, 1.0, encoding, w, c)
    rng = np.random.default_rng(np.random.SeedSequence(7).spawn(1)[0])
    errs_G, errs_u, rows_all = [], [], []
    for _ in range(batches):
        rows, G, u = reports_and_truth(rand, n, rng, c)
        est = rand.estimate(rand.sufficient(rows), n)
        errs_G.append(est.G - G)
        errs_u.append(est.u - u)
        rows_all.append(rows)
    rows = np.concatenate(rows_all)
    # Every report's free part has norm r/m (and is admissible on the wire).
    np.testing.assert_allclose(np.linalg.norm(rows[:, rand.free], axis=1), rand.norm, rtol=1e-12)
    for row in rows[:5]:
        rand.from_bytes(rand.to_bytes(row))
    # Per coordinate, the report's variance (about its own clean value, so conservative here:
    # the contexts vary) is the stated bound's order; the bound holds for the noise itself.
    assert rows[:, rand.free].var(axis=0).max() <= 1.05 * rand.coordinate_variance + 1.0
    # Unbiased: the mean error over batches within K_SE standard errors, per entry, with the
    # per-entry s.e. from the stated variance bounds (n reports per batch).
    N = n * batches
    i, j = np.triu_indices(d)
    diag = i == j
    eG = np.mean(errs_G, axis=0)[i, j]
    var_G = np.where(diag, rand.matrix_proxy(), rand.offdiag_proxy())
    if c is not None:  # Σ x₀² = n c² is exact under an intercept
        var_G[0] = 0.0
        assert abs(eG[0]) < 1e-9 * n
    assert np.all(np.abs(eG) <= K_SE * np.sqrt(var_G * n / batches) + 1e-9)
    eu = np.mean(errs_u, axis=0)
    assert np.all(np.abs(eu) <= K_SE * math.sqrt(rand.vector_proxy() * n / batches))
    # ... and the test has power: the errors are the size the variance says (not all zero).
    assert np.abs(eu).max() > 0.05 * math.sqrt(rand.vector_proxy() * n / batches)
    assert N == rows.shape[0]


def test_wire_refuses_forged_reports() -> None:
    rand = PrivUnitRandomizer(5, 1.0, 1.0, "centered", 2.0, C)
    rng = np.random.default_rng(3)
    x = np.concatenate([[C], np.full(4, 0.5 * C)])
    row = rand.randomize(x[None, :], np.array([1.0]), rng)[0]
    assert np.array_equal(rand.from_bytes(rand.to_bytes(row)), row)
    bigger = row.copy()
    bigger[rand.free] *= 1.01
    with pytest.raises(ValueError, match="sphere"):
        rand.from_bytes(rand.to_bytes(bigger))
    moved = row.copy()
    moved[0] += 0.1
    with pytest.raises(ValueError, match="constant"):
        rand.from_bytes(rand.to_bytes(moved))
    with pytest.raises(ValueError, match="bytes"):
        rand.from_bytes(b"\0" * 8)


def test_config_flag_ledger_and_policy() -> None:
    config = LDPLinUCBConfig(d=5, epsilon=1.0, mechanism="privunit", encoding="auto",
                             intercept=C)
    policy = LDPLinUCB(config, np.random.default_rng(0))
    assert isinstance(policy.randomizer, PrivUnitRandomizer)
    assert policy.randomizer.encoding == "centered" and policy.randomizer.D == 19
    ledger = policy.ledger()
    assert ledger.ldp_epsilon == 1.0 and ledger.ldp_delta == 0.0
    assert ledger.central_delta == 0.0 and "PrivUnit2" in ledger.accounting
    assert ledgers.ldp_privunit_ledger(1.0).ldp_delta == 0.0
    # At ε = 1 the per-coordinate variance bound is far below the Gaussian report's σ² at
    # (1, 10⁻⁶) (80.3): the reason for the mechanism.
    assert policy.randomizer.coordinate_variance < 13.0
    rows = policy.randomizer.randomize(np.full((200, 5), C / 2) + np.eye(5)[0] * C / 2,
                                       np.ones(200), np.random.default_rng(1))
    assert policy.ingest(rows) == 100  # one publication window
    with pytest.raises(ValueError, match="mechanism"):
        LDPGLBConfig(d=5, mechanism="privunit")
