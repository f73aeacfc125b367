"""``ddp-linucb`` with the noise added by the aggregators (issue 40): the honest ranges (held by
every honest report and attained), the estimator's unbiasedness with the aggregators' noise,
the ledger's per-observer guarantee against the accountant, the exact sampler's large rates
split into parts, and the shuffler's keyed noise stream."""

import math
import secrets
from fractions import Fraction

import numpy as np
import pytest

from privbandit.shared.core.accounting.ledger import SkellamSums
from privbandit.shared.core.accounting.persons import skellam_person
from privbandit.shared.core.accounting.rdp import curve_to_dp
from privbandit.shared.core.accounting.skellam import ORDERS, skellam_epsilon, skellam_rdp
from privbandit.shared.core.randomizers.exact_poisson import MAX_TABLE_RATE, ExactSkellam
from privbandit.shared.core.randomizers.skellam import SkellamRandomizer
from privbandit.shared.crypto.noise_stream import KeyedBits, load_noise_key

C = 1 / math.sqrt(2)
ENCODINGS = [
    {"encoding": "upper"},
    {"encoding": "frobenius", "u_weight": 1.3},
    {"encoding": "centered", "u_weight": 1.5, "intercept": C},
]


def make(**kw: object) -> SkellamRandomizer:
    return SkellamRandomizer(d=3, epsilon=1.0, delta=1e-6, batch_size=50, scale=16.0,
                             **kw)  # type: ignore[arg-type]


def extreme_inputs(r: SkellamRandomizer, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Contexts at ‖x‖ = L in the axis and diagonal directions (where the ranges' edges lie),
    and random ones, with rewards 0 and 1."""
    d, L = r.d, r.L
    c = r.intercept
    rows = []
    if c is None:
        for i in range(d):
            for sign in (1.0, -1.0):
                e = np.zeros(d)
                e[i] = sign * L
                rows.append(e)
                for j in range(i + 1, d):
                    for s2 in (1.0, -1.0):
                        v = np.zeros(d)
                        v[i], v[j] = sign * L / math.sqrt(2), s2 * L / math.sqrt(2)
                        rows.append(v)
    else:
        rho = math.sqrt(L * L - c * c)
        for i in range(1, d):
            for sign in (1.0, -1.0):
                v = np.zeros(d)
                v[0], v[i] = c, sign * rho
                rows.append(v)
                for j in range(i + 1, d):
                    for s2 in (1.0, -1.0):
                        w = np.zeros(d)
                        w[0], w[i], w[j] = c, sign * rho / math.sqrt(2), s2 * rho / math.sqrt(2)
                        rows.append(w)
    rand = rng.normal(size=(200, d))
    rand *= L * rng.random((200, 1)) / np.linalg.norm(rand, axis=1, keepdims=True)
    if c is not None:
        rand[:, 0] = c
        rest = rand[:, 1:]
        rest *= np.minimum(1.0, math.sqrt(L * L - c * c) / np.linalg.norm(rest, axis=1,
                                                                           keepdims=True))
    X = np.vstack([np.array(rows), rand])
    X = np.repeat(X, 2, axis=0)
    r_ = np.tile([0.0, 1.0], X.shape[0] // 2)
    return X, r_


@pytest.mark.parametrize("kw", ENCODINGS, ids=[k["encoding"] for k in ENCODINGS])
def test_honest_reports_stay_in_their_ranges_and_reach_them(kw: dict) -> None:
    r = make(**kw)
    rng = np.random.default_rng(1)
    X, R = extreme_inputs(r, rng)
    scaled = r.scaled(*r.check(X, R))
    z = np.vstack([r.round_rows(scaled, rng) for _ in range(20)])
    assert (z >= r.range_lo).all() and (z <= r.range_hi).all()
    # Attained: honest inputs come within one rounding step of every edge, so the ranges are
    # the honest ones (a report at an edge moves a coordinate 1.0x what an honest one can).
    assert (scaled.max(axis=0) >= r.range_hi - 1).all()
    assert (scaled.min(axis=0) <= r.range_lo + 1).all()
    assert r.aggregated_noise and r.share_variance == 0.0 and r.honest is None


@pytest.mark.parametrize("kw", ENCODINGS, ids=[k["encoding"] for k in ENCODINGS])
def test_device_report_is_the_rounded_statistics_and_unbiased(kw: dict) -> None:
    """No noise on the device: every entry within one step of s·v, mean s·v (k = 4 standard
    errors of a rounding coin, variance ≤ ¼)."""
    r = make(**kw)
    rng = np.random.default_rng(2)
    X, R = extreme_inputs(r, rng)
    x, reward = X[7], R[7]
    want = r.scaled(*r.check(x[None, :], np.array([reward])))[0]
    reports = np.array([r.device_report(x, float(reward)) for _ in range(4000)])
    assert (np.abs(reports - want) < 1).all()
    assert (np.abs(reports.mean(axis=0) - want) < 4 * math.sqrt(0.25 / 4000)).all()


def test_batch_estimate_is_unbiased_with_the_aggregators_noise() -> None:
    """Σ z + noise over 300 batches of 50: the estimate of G's mean is the true G's within 4
    standard errors of the noise (variance 2μ_a/s² per entry plus rounding)."""
    r = make(encoding="frobenius", u_weight=1.0)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(50, 3))
    x /= 2 * np.linalg.norm(x, axis=1, keepdims=True)
    reward = rng.random(50)
    true = r.estimate(r.sufficient(r.scale * r.statistics(x, reward)), 50)
    ests = []
    for _ in range(300):
        stat = r.sufficient(r.randomize(x, reward, rng)) + r.batch_noise(rng)
        ests.append(r.estimate(stat, 50).G)
    mean = np.mean(ests, axis=0)
    sd = math.sqrt((r.batch_noise_variance + 50 * 0.25) / 300) / r.scale
    assert np.all(np.abs(mean - true.G) < 4 * sd)


def test_ledger_is_the_accountant_per_observer() -> None:
    """Each aggregator's μ_a ≥ the accountant's μ for (1, 10⁻⁶); the analyzer and the shuffler
    get ε(μ_a), the public ε(2μ_a), each recomputed here from the closed form (AKL Cor. 3.6)
    through dp-accounting's conversion."""
    r = make(encoding="frobenius")
    ledger = r.ledger()
    extra = ledger.model_extra or {}
    mu = r.aggregator_variance
    assert mu >= r.mu_target
    assert skellam_epsilon(r.mu_target, r.l1, r.l2, 1e-6)[0] <= 1.0
    for name, var in (("analyzer", mu), ("shuffler", mu), ("public", 2 * mu)):
        want, _ = curve_to_dp(list(ORDERS), [skellam_rdp(a, var, r.l1, r.l2) for a in ORDERS],
                              1e-6)
        assert extra["observers"][name]["central_epsilon"] == pytest.approx(want, rel=1e-12)
        assert extra["observers"][name]["central_epsilon"] <= 1.0
    assert ledger.central_epsilon == extra["observers"]["analyzer"]["central_epsilon"]
    assert extra["observers"]["public"]["central_epsilon"] < ledger.central_epsilon
    assert ledger.ldp_epsilon is None and extra["honest_fraction"] is None


def test_a_person_of_k_reports_is_the_mechanism_at_k_times_the_sensitivity() -> None:
    r = make(encoding="frobenius")
    mech = r.ledger().mechanism
    assert isinstance(mech, SkellamSums) and mech.noise == "aggregators"
    one, _ = skellam_person(mech, 1, 1e-6)
    assert one == pytest.approx(r.ledger().central_epsilon, rel=1e-12)
    three, words = skellam_person(mech, 3, 1e-6)
    want, _ = curve_to_dp(list(ORDERS), [skellam_rdp(a, r.aggregator_variance, 3 * r.l1,
                                                     3 * r.l2) for a in ORDERS], 1e-6)
    assert three == pytest.approx(want, rel=1e-12) and three > one and "kΔ" in words


def test_large_rates_are_drawn_in_exact_parts() -> None:
    """λ above the table limit: 2^k parts of λ/2^k (each exact Poisson), mean 0 and variance
    2λ within 4 standard errors over 4,000 draws from a seeded bit source."""
    variance = 4.0 * MAX_TABLE_RATE * 5  # λ = 10 × the limit
    rng = np.random.default_rng(4)

    def bits(k: int) -> int:
        return int.from_bytes(rng.bytes((k + 7) // 8), "big") >> (-k % 8)

    s = ExactSkellam(variance, bits)
    assert s.parts == 16 and s.lam / s.parts <= MAX_TABLE_RATE
    assert s.lam == Fraction(s.lam.numerator, s.lam.denominator)
    x = np.array([s.sample() for _ in range(4000)], dtype=float)
    assert abs(x.mean()) < 4 * math.sqrt(s.variance / 4000)
    assert abs(x.var() / s.variance - 1) < 4 * math.sqrt(2 / 4000)


def test_keyed_noise_is_the_same_at_every_attempt_and_differs_between_batches(
        tmp_path: object) -> None:
    from pathlib import Path

    key = load_noise_key(Path(str(tmp_path)))
    assert load_noise_key(Path(str(tmp_path))) == key  # kept, not remade
    r = make(encoding="frobenius")
    sampler = r.aggregator_sampler()
    first = sampler.with_bits(KeyedBits(key, "t", "b1").randbits).sample_vector(r.n)
    again = sampler.with_bits(KeyedBits(key, "t", "b1").randbits).sample_vector(r.n)
    other = sampler.with_bits(KeyedBits(key, "t", "b2").randbits).sample_vector(r.n)
    stranger = sampler.with_bits(KeyedBits(secrets.token_bytes(32), "t", "b1").randbits
                                 ).sample_vector(r.n)
    assert first == again and first != other and first != stranger
