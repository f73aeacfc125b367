"""BCO rows interop (in process): the independent client's rows (tests/interop/client.py, from
docs/protocol.md §3.3 "Bandit-convex-optimisation tasks" and §4 alone) have the project's wire
layout, its σ is the project's calibration, its points are the project's device's, and its noisy
values have the law of Zheng et al. Alg. 1 / Alg. 2 line 5.

Laws: n = 20 000 values of one (losses, points) per case, fixed seeds; the sample mean and
variance of the independent client's values and of the project's randomizer's are each within 6
standard errors of the closed form: N(clip(f(x), 0, B), σ²) for one point,
N(clip(f(x₁) − f(x₂), ±G‖Δx‖), σ²‖Δx‖²) for two (mean: √(Var/n); variance: √(2Var²/n), since
μ₄ = 3Var² for a normal law)."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.shared.core.policies import make_config, randomizer_for
from privbandit.shared.core.policies.bco_model import BCOModel
from privbandit.shared.core.randomizers.bco import OnePointReport, TwoPointReport
from tests.interop import client
from tests.interop.test_arm_rows import within

N = 20_000


def policy(algo: str, d: int = 2, **extra: object) -> dict[str, object]:
    """The policy JSON of ``GET /v1/tasks/{task}`` (the project's config, dumped)."""
    return make_config(algo, d=d, **extra).model_dump()


@pytest.mark.parametrize("algo", ["bco", "ldp-bco", "bco2", "ldp-bco2"])
@pytest.mark.parametrize("d", [1, 2, 5])
def test_rows_have_the_documented_size_and_decode_with_the_projects_code(algo: str, d: int
                                                                         ) -> None:
    rng = np.random.default_rng(21)
    rand = randomizer_for(make_config(algo, d=d))
    u = client.unit_direction(d, rng)
    top = rand.value_range[1]  # B (+ τσ), resp. 2ρG (+ τ2ρσ): values inside the refusal range
    for version, value in [(0, 0.5 * top), (7, 0.0), (2**32 - 1, 0.01 * top)]:
        row = client.bco_row(version, u, value)
        assert len(row) == 4 + 8 * (d + 1)
        assert rand.from_bytes(row).tolist() == [float(version), *u.tolist(), value]
        assert rand.to_bytes(np.array([version, *u, value])) == row


@pytest.mark.parametrize("calibration", ["analytic", "paper"])
@pytest.mark.parametrize(("eps", "delta", "B", "G"),
                         [(2.0, 1e-6, 1.0, 1.1), (0.5, 1e-5, 3.0, 0.4), (8.0, 1e-9, 0.2, 5.0)])
def test_independent_sigma_is_the_projects_calibration(calibration: str, eps: float,
                                                       delta: float, B: float, G: float) -> None:
    common = {"epsilon": eps, "delta": delta, "loss_bound": B, "lipschitz": G,
              "calibration": calibration}
    one = OnePointReport(eps, delta, B, calibration).sigma  # type: ignore[arg-type]
    two = TwoPointReport(eps, delta, G, calibration).sigma  # type: ignore[arg-type]
    assert client.bco_sigma(policy("ldp-bco", **common)) == pytest.approx(one, rel=1e-7)
    assert client.bco_sigma(policy("ldp-bco2", **common)) == pytest.approx(two, rel=1e-7)


def test_points_are_the_project_devices() -> None:
    """§4's points from the JSON model equal ``BCOModel.points`` (one point with a full A, two
    points), and u is a unit vector to 10⁻¹² with mean ≈ 0 (uniform on the sphere)."""
    rng = np.random.default_rng(22)
    d = 3
    M = rng.normal(size=(d, d))
    models = [BCOModel(3, 3, rng.normal(size=d) * 0.2, 1.0, A=M @ M.T, delta=0.3),
              BCOModel(4, 4, rng.normal(size=d) * 0.2, 1.0, rho=0.05)]
    us = np.array([client.unit_direction(d, rng) for _ in range(N)])
    assert np.abs(np.linalg.norm(us, axis=1) - 1.0).max() < 1e-12
    assert np.abs(us.mean(axis=0)).max() < 6 * np.sqrt(1.0 / (d * N))  # Var(u_i) = 1/d
    for m in models:
        for u in us[:50]:
            assert np.array_equal(client.bco_points(m.to_dict(), u), m.points(u))


@pytest.mark.parametrize(("loss", "eps"), [(0.3, 2.0), (1.7, 0.5), (-0.2, 1.0)])
def test_one_point_values_have_zhengs_alg1_law(loss: float, eps: float) -> None:
    """ldp-bco: clip(f, 0, B) + N(0, σ²) (losses outside [0, B] clip: 1.7 → 1, −0.2 → 0)."""
    rng = np.random.default_rng(23)
    pol = policy("ldp-bco", epsilon=eps, delta=1e-6)
    point = np.zeros((1, 2))
    theirs = np.array([client.bco_value(pol, [loss], point, rng) for _ in range(N)])
    ours = OnePointReport(eps, 1e-6, 1.0).report(np.full(N, loss), rng)
    var = client.bco_sigma(pol) ** 2
    for sample in (theirs, ours):
        within(sample, min(max(loss, 0.0), 1.0), var, 3 * var * var)


@pytest.mark.parametrize(("f1", "f2", "rho"), [(0.5, 0.45, 0.1), (0.9, 0.1, 0.05),
                                               (0.2, 0.6, 0.3)])
def test_two_point_values_have_zhengs_alg2_law(f1: float, f2: float, rho: float) -> None:
    """ldp-bco2: clip(f₁ − f₂, ±G‖Δx‖) + nᵀΔx, n ~ N(0, σ²I): N(clip, σ²‖Δx‖²) (the second and
    third cases clip at ±2ρG)."""
    rng = np.random.default_rng(24)
    pol = policy("ldp-bco2", epsilon=2.0, delta=1e-6, lipschitz=1.1)
    u = client.unit_direction(2, rng)
    points = np.stack([0.1 + rho * u, 0.1 - rho * u])
    theirs = np.array([client.bco_value(pol, [f1, f2], points, rng) for _ in range(N)])
    ours = TwoPointReport(2.0, 1e-6, 1.1).report(
        np.full(N, f1), np.full(N, f2), np.tile(points[0], (N, 1)), np.tile(points[1], (N, 1)),
        rng)
    bound = 1.1 * 2 * rho
    var = (client.bco_sigma(pol) * 2 * rho) ** 2
    for sample in (theirs, ours):
        within(sample, min(max(f1 - f2, -bound), bound), var, 3 * var * var)


@pytest.mark.parametrize("algo", ["bco", "bco2"])
def test_non_private_values_are_the_clipped_losses(algo: str) -> None:
    rng = np.random.default_rng(25)
    pol = policy(algo, lipschitz=1.1)
    points = np.array([[0.1, 0.0], [-0.1, 0.0]])[: 1 if algo == "bco" else 2]
    losses = [1.4, 0.2][: points.shape[0]]
    want = 1.0 if algo == "bco" else 0.22  # clip to B = 1, resp. ±G‖Δx‖ = 1.1 · 0.2
    assert client.bco_value(pol, losses, points, rng) == pytest.approx(want, rel=1e-12)
