"""The services' BCO policies (``shared.core.policies.bco_service``) against the simulator's
compiled loops, and their report rows (``shared.core.randomizers.bco_rows``)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from privbandit.shared.core.bco_simulator import unit_directions
from privbandit.shared.core.environments.bco import BCOEnvironment
from privbandit.shared.core.policies import build_policy, make_config
from privbandit.shared.core.policies.bco import build_bco_policy
from privbandit.shared.core.policies.bco_kernels import barrier_eigs
from privbandit.shared.core.policies.bco_service import VERSION_HISTORY, exploration_matrix
from privbandit.shared.core.randomizers.bco_rows import TAIL, BCORowRandomizer

D = 3


def config(algo: str, mu: float):
    env = BCOEnvironment("bco-quadratic", D, np.random.default_rng(0), noise=0.2)
    params = {"d": D, "lipschitz": env.lipschitz * 1.01, "smoothness": env.smoothness,
              "strong_convexity": mu, "horizon": 500}
    if algo.startswith("ldp"):
        params["epsilon"] = 1.0
    return env, make_config(algo, **params)


@pytest.mark.parametrize("algo", ["bco", "ldp-bco", "bco2", "ldp-bco2"])
@pytest.mark.parametrize("mu", [0.0, 0.5])
def test_row_by_row_equals_the_simulators_loop(algo: str, mu: float) -> None:
    """Each user served the latest version: the services' path reaches the simulator's iterate
    (same u, offsets ζ and standard normals z; the device's value rebuilt as the kernels do)."""
    env, cfg = config(algo, mu)
    n = 200
    rng = np.random.default_rng(1)
    U = unit_directions(n, D, rng)[:, None, :]
    zeta, z = rng.random((n, 1)), rng.standard_normal((n, 1))
    sim = build_bco_policy(cfg, runs=1)
    sim.play(env, U, zeta, z)
    svc = build_policy(cfg)
    kind, scale, bnoise, kappa, denom, points, _ = env.kernel_params()
    for i in range(n):
        model = svc.model
        X = model.points(U[i, 0])
        g = np.sum((X - points[0]) ** 2, axis=1) / denom
        if model.rho is None:
            f = min(max(scale * g[0] + bnoise * zeta[i, 0], 0.0), cfg.loss_bound)
            value = f + svc.inner.sigma * z[i, 0]
        else:
            bound = 2 * model.rho * cfg.lipschitz
            value = min(max(scale * (g[0] - g[1]), -bound), bound) \
                + 2 * model.rho * svc.inner.sigma * z[i, 0]
        row = svc.randomizer.from_bytes(svc.randomizer.to_bytes(
            svc.randomizer.row(model.version, U[i, 0], value)))
        svc.admit_row(row)
        assert svc.ingest(row[None]) == 1
    np.testing.assert_allclose(svc.model.y, sim.y[0], rtol=0, atol=1e-9)
    assert svc.model.version == svc.reports == n


def test_a_stale_report_uses_its_own_versions_ellipsoid() -> None:
    """A report for version v is rebuilt from y_v and λ_v, not from the latest point."""
    _, cfg = config("bco", 0.5)
    a, b = build_policy(cfg), build_policy(cfg)
    u = np.eye(D)[0]
    a.ingest(a.randomizer.row(0, u, 0.9)[None])
    b.ingest(b.randomizer.row(0, u, 0.9)[None])
    # a: the second report was played from version 0; b: from version 1.
    a.ingest(a.randomizer.row(0, np.eye(D)[1], 0.2)[None])
    b.ingest(b.randomizer.row(1, np.eye(D)[1], 0.2)[None])
    assert not np.allclose(a.model.y, b.model.y)


def test_exploration_matrix_is_the_inverse_square_root() -> None:
    y, R, lam = np.array([0.3, -0.2, 0.5]), 1.0, 0.7
    A = exploration_matrix(y, R, lam)
    q = R**2 - y @ y
    H = (2 / q) * np.eye(D) + (4 / q**2) * np.outer(y, y) + lam * np.eye(D)
    np.testing.assert_allclose(A @ H @ A, np.eye(D), atol=1e-12)
    a, b, _ = barrier_eigs(y, R, lam)
    assert np.linalg.eigvalsh(A).max() == pytest.approx(a ** -0.5)


def test_history_keeps_the_last_versions_and_survives_state() -> None:
    _, cfg = config("bco2", 0.0)
    p = build_policy(cfg)
    u = np.eye(D)[0]
    for v in range(VERSION_HISTORY + 5):
        p.ingest(p.randomizer.row(v, u, 0.01)[None])
    assert p.model.y[0] < 0  # it moved (against the reported difference)
    # Version v was last reported on by report v + 1: kept while fewer than VERSION_HISTORY
    # reports have passed since.
    assert sorted(p.history) == list(range(5, VERSION_HISTORY + 6))
    with pytest.raises(ValueError, match="not one of"):
        p.admit_row(p.randomizer.row(4, u, 0.0))
    with pytest.raises(ValueError, match="not one of"):
        p.admit_row(p.randomizer.row(VERSION_HISTORY + 6, u, 0.0))  # never published
    q = build_policy(cfg)
    q.set_state(p.get_state())
    assert q.model.to_dict() == p.model.to_dict()
    assert sorted(q.history) == sorted(p.history)
    assert q.touched == p.touched and q.reached == p.reached == VERSION_HISTORY + 4
    skipped = q.skipped
    q.ingest(q.randomizer.row(0, u, 0.0)[None])  # fell out of the history: skipped, no crash
    assert q.skipped == skipped + 1 and q.model.version == p.model.version


def test_a_version_stays_while_its_reports_keep_arriving() -> None:
    """An outage's backlog: 3·VERSION_HISTORY reports all played from version 0 are all used."""
    _, cfg = config("ldp-bco", 0.5)
    p = build_policy(cfg)
    rng = np.random.default_rng(2)
    for _ in range(3 * VERSION_HISTORY):
        row = p.randomizer.row(0, unit_directions(1, D, rng)[0], 0.5)
        p.admit_row(row)
        p.ingest(row[None])
    assert p.skipped == 0 and p.reports == 3 * VERSION_HISTORY
    # Nothing played from a newer version has arrived: every version published meanwhile may
    # be held by a device whose reports wait behind the backlog, so all are kept.
    assert sorted(p.history) == list(range(3 * VERSION_HISTORY + 1))
    # Once VERSION_HISTORY reports pass without one for version 0, it goes.
    for _ in range(VERSION_HISTORY):
        v = p.model.version
        p.ingest(p.randomizer.row(v, unit_directions(1, D, rng)[0], 0.5)[None])
    with pytest.raises(ValueError, match="not one of"):
        p.admit_row(p.randomizer.row(0, np.eye(D)[0], 0.5))
    # The drain's versions began to age with the first of those reports: one more, and they
    # have all gone too.
    p.ingest(p.randomizer.row(p.model.version, np.eye(D)[0], 0.5)[None])
    assert sorted(p.history) == list(range(p.model.version - VERSION_HISTORY,
                                           p.model.version + 1))


@pytest.mark.parametrize("algo", ["ldp-bco", "ldp-bco2"])
def test_the_version_fetched_after_an_outage_outlives_the_backlog(algo: str) -> None:
    """The crash test's sequence, in formation order: the devices played version a while the
    analyzer was down (a backlog longer than VERSION_HISTORY); it came back and, a few reports
    into the drain, the devices fetched the then latest version b; b's reports were formed
    after the whole backlog, so they arrive after it. None may be refused, across a restart
    (state saved and loaded) in the middle of the drain; and once the devices have moved on
    from b, b ages out as before."""
    _, cfg = config(algo, 0.5)
    p = build_policy(cfg)
    rng = np.random.default_rng(3)

    def report(version: int) -> None:
        row = p.randomizer.row(version, unit_directions(1, D, rng)[0], 0.01)
        p.admit_row(row)  # raises for a version not kept
        p.ingest(row[None])

    for _ in range(20):  # before the outage: each user served the latest version
        report(p.model.version)
    a = p.model.version
    backlog = VERSION_HISTORY + 60
    for _ in range(10):
        report(a)
    b = p.model.version  # what the devices fetched once the analyzer was back
    for _ in range(backlog // 2 - 10):
        report(a)
    restarted = build_policy(cfg)
    restarted.set_state(p.get_state())
    p = restarted
    for _ in range(backlog - backlog // 2):
        report(a)
    assert p.model.version - b > VERSION_HISTORY  # b was published that many reports ago
    for _ in range(40):
        report(b)
    assert p.skipped == 0 and p.reports == 20 + backlog + 40
    # The devices move on: b goes once VERSION_HISTORY reports pass without one for it.
    for _ in range(VERSION_HISTORY):
        report(p.model.version)
    with pytest.raises(ValueError, match="not one of"):
        p.admit_row(p.randomizer.row(b, np.eye(D)[0], 0.01))
    report(p.model.version)  # and the drain's versions, reached with the first of those
    assert len(p.history) == VERSION_HISTORY + 1  # the steady state: the latest and the last


@pytest.mark.parametrize("points", [1, 2])
def test_rows_refuse_what_no_device_sends(points: int) -> None:
    r = BCORowRandomizer(2, points, loss_bound=1.0, lipschitz=1.0, rho=0.01, sigma=2.0,
                         report=None)
    lo, hi = r.value_range
    clean_hi = 1.0 if points == 1 else 0.02
    assert hi == pytest.approx(clean_hi + TAIL * 2.0 * (1 if points == 1 else 0.02))
    u = [0.6, 0.8]
    r.check_row(np.array([3, *u, hi]))
    r.check_row(np.array([3, *u, lo]))
    for bad in ([3, *u, hi * 1.0001 + 1e-12], [3, 0.6, 0.81, 0.0], [-1, *u, 0.0],
                [2.5, *u, 0.0], [3, *u, np.nan], [3, np.inf, 0.8, 0.0]):
        with pytest.raises(ValueError):
            r.check_row(np.array(bad))
    # TAIL: a two-sided normal tail of 2⁻⁴⁰.
    assert 2 * norm.sf(TAIL) == pytest.approx(2.0**-40)
