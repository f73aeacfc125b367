"""The guarantee per person (shared/core/accounting/persons.py): k reports composed, checked
against closed forms computed here independently of dp-accounting (Kairouz–Oh–Viswanath's
optimal composition, the analytic Gaussian of Balle–Wang, basic composition)."""

from __future__ import annotations

import math

import pytest
from scipy.special import comb
from scipy.stats import norm

from privbandit.shared.core.accounting import ledgers, persons
from privbandit.shared.core.accounting.ledger import SkellamSums
from privbandit.shared.core.accounting.skellam import ddp_ledger


def kov_pure(eps: float, k: int, i: int) -> tuple[float, float]:
    """Kairouz–Oh–Viswanath 2015 Thm 3.3 for δ = 0: the k-fold composition of ε-DP mechanisms
    is ((k − 2i) ε, δ_i)-DP with δ_i = Σ_{l<i} C(k, l) (e^{(k−l)ε} − e^{(k−2i+l)ε}) / (1+e^ε)^k,
    and no better (the bound is achieved by randomized response)."""
    total = sum(comb(k, j, exact=True) * (math.exp((k - j) * eps) - math.exp((k - 2 * i + j) * eps))
                for j in range(i))
    return (k - 2 * i) * eps, total / (1 + math.exp(eps)) ** k


def analytic_gaussian_delta(eps: float, mu: float) -> float:
    """Balle–Wang 2018 Thm 8: a Gaussian mechanism with Δ/σ = μ is (ε, δ)-DP exactly for
    δ = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)."""
    return float(norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2))


@pytest.mark.parametrize("eps,k,i", [(1.0, 10, 1), (0.5, 20, 3), (0.2, 50, 10)])
def test_pure_composition_is_kov_optimal(eps: float, k: int, i: int) -> None:
    eps_i, delta_i = kov_pure(eps, k, i)
    got = persons.pure_composed_epsilon(eps, k, delta_i)
    # Optimal composition: at δ_i the tight ε is ε_i; PLD's pessimistic discretisation may add
    # at most k · 1e-4 (one interval per composition), and it is never below the truth (−1e-9).
    assert eps_i - 1e-9 <= got <= eps_i + k * persons.PLD_INTERVAL


@pytest.mark.parametrize("eps,k", [(1.0, 1), (2.0, 3), (0.3, 7)])
def test_pure_composition_never_beyond_k_epsilon(eps: float, k: int) -> None:
    """At a δ far below δ_1 (KOV), only basic composition holds: kε."""
    _, delta_1 = kov_pure(eps, k, 1) if k > 1 else (0.0, 1e-3)
    got = persons.pure_composed_epsilon(eps, k, min(delta_1 / 100, 1e-12))
    assert got == pytest.approx(k * eps, rel=1e-3) and got <= k * eps


@pytest.mark.parametrize("ratio,k", [(2.0, 10), (5.0, 4), (1.0, 3)])
def test_gaussian_composition_against_analytic_gaussian(ratio: float, k: int) -> None:
    """k Gaussians of σ/Δ compose to one of σ/(√k Δ); k in one sum is one of σ/(kΔ): the
    ε stated at δ has δ(ε) ≤ δ in the closed form, and is tight (δ(ε − 0.01) > δ)."""
    delta = 1e-6
    for group, mu in ((False, math.sqrt(k) / ratio), (True, k / ratio)):
        eps = persons.gaussian_composed_epsilon(ratio, k, delta, group=group)
        assert analytic_gaussian_delta(eps, mu) <= delta * (1 + 1e-6)
        assert analytic_gaussian_delta(eps - 0.01, mu) > delta


def test_gaussian_rdp_composition_closed_form() -> None:
    """Composed Gaussian RDP is k α/(2σ²) (Mironov Prop. 7 with composition): the PLD figure is
    never above its single-order conversions ε_RDP + log(1/δ)/(α − 1), and the per-person RDP
    the central ledger states in the same-episode worst case is k² · ε_RDP."""
    ratio, k, delta = 3.0, 8, 1e-6
    eps = persons.gaussian_composed_epsilon(ratio, k, delta)
    for alpha in (2.0, 4.0, 8.0, 16.0, 32.0):
        assert eps <= k * alpha / (2 * ratio**2) + math.log(1 / delta) / (alpha - 1)
    central = ledgers.central_ledger(2.0, 0.05, delta)
    fig = persons.person_figures(central, 5, delta)
    assert fig["rdp_epsilon"] == pytest.approx(25 * 0.05)
    assert fig["rdp_alpha"] == 2.0
    assert fig["central_epsilon"] == pytest.approx(
        persons.gaussian_composed_epsilon(math.sqrt(2.0 / 0.1), 5, delta, group=True))


def kov_approx(eps: float, delta_each: float, k: int, i: int) -> tuple[float, float]:
    """KOV Thm 3.3: k (ε, δ)-DP mechanisms compose to ((k − 2i) ε, 1 − (1 − δ)^k (1 − δ_i))."""
    eps_i, delta_i = kov_pure(eps, k, i)
    return eps_i, 1 - (1 - delta_each) ** k * (1 - delta_i)


@pytest.mark.parametrize("eps,delta_each,k,i", [(0.5, 1e-7, 10, 2), (1.0, 1e-6, 12, 1)])
def test_approx_composition_is_kov_optimal(eps: float, delta_each: float, k: int, i: int) -> None:
    eps_i, delta_i = kov_approx(eps, delta_each, k, i)
    got = persons.approx_composed_epsilon(eps, delta_each, k, delta_i)
    assert eps_i - 1e-9 <= got <= eps_i + k * persons.PLD_INTERVAL


def test_approx_composition_below_its_delta_floor_is_infinite() -> None:
    """No ε holds at δ ≤ 1 − (1 − δ_each)^k: composing k (ε, δ) mechanisms costs kδ at least."""
    assert persons.approx_composed_epsilon(1.0, 1e-6, 10, 9e-6) == math.inf
    assert math.isfinite(persons.approx_composed_epsilon(1.0, 1e-6, 10, 1.1e-5))


def test_skellam_person_is_the_gaussian_limit_plus_discreteness() -> None:
    """k sub-sums with ⌊n_h/k⌋ shares each, RDP composed: at k = 1 the batch ledger's own ε;
    at k > 1 never below the Gaussian of the same variance composed k times in RDP, k α/(2σ²)
    (the Skellam RDP is the Gaussian's plus a positive term; same orders and conversion) and,
    at a large variance, within 5 % of it."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    from privbandit.shared.core.accounting.skellam import ORDERS

    delta = 1e-6
    l1, l2 = 20.0, 20.0
    ledger = ddp_ledger(share_variance=4.0, gamma=1.0, batch_size=1000, l1=l1, l2=l2, delta=delta)
    mech = ledger.mechanism
    assert isinstance(mech, SkellamSums) and mech.noise == "devices"
    one, _ = persons.skellam_person(mech, 1, delta)
    assert one == pytest.approx(ledger.central_epsilon, rel=1e-9)
    for k in (2, 5, 10):
        eps, _ = persons.skellam_person(mech, k, delta)
        assert eps is not None
        sigma2 = (1000 // k) * 4.0
        gauss, _ = compute_epsilon(list(ORDERS), [k * a * l2**2 / (2 * sigma2) for a in ORDERS],
                                   delta)
        assert gauss <= eps <= 1.05 * gauss
    assert persons.skellam_person(mech, 1001, delta)[0] is None  # no honest share left


def test_shuffle_person_central_never_above_local_composition() -> None:
    """The central figure per person is min(k sub-batches of ⌊l/k⌋ composed, the k local
    reports composed); for ε0 = 2, l = 1000 the sub-batches win at small k."""
    delta, eps0, l = 1e-6, 2.0, 1000

    def at(n: int) -> tuple[float, float]:
        lg = ledgers.shuffle_ledger(eps0, n, delta, aggregation="reports")
        assert lg.central_epsilon is not None
        return lg.central_epsilon, delta

    base = ledgers.shuffle_ledger(eps0, l, delta, aggregation="reports")
    for k in (1, 3, 10):
        fig = persons.person_figures(base, k, delta, central_at=at, batch_size=l)
        local = persons.approx_composed_epsilon(eps0, 0.0, k, fig["central_delta"])
        assert fig["central_epsilon"] <= local + 1e-12
        assert fig["ldp_epsilon"] == pytest.approx(k * eps0, rel=1e-3)
    small = persons.person_figures(base, 3, delta, central_at=at, batch_size=l)
    eps_sub, _ = at(l // 3)
    assert small["central_epsilon"] <= 3 * eps_sub  # basic composition at δ ≥ 3δ
    assert small["central_epsilon"] < 3 * eps0
    # What a lost device database does to the bound is said with it (issue 40 item 7).
    assert "replaced with --init --forget-persons" in small["accounting"]
    assert "k more in that period: 2k in all" in small["accounting"]


def test_unbounded_and_baseline_state_no_person_guarantee() -> None:
    fig = persons.person_figures(ledgers.ldp_binary_ledger(1.0), None, 1e-6)
    assert fig["k"] is None and fig["ldp_epsilon"] is None and fig["central_epsilon"] is None
    assert "no contribution bound" in fig["accounting"]
    assert persons.person_figures(ledgers.none_ledger(), 5, 1e-6)["central_epsilon"] is None


def test_heldp_levels_compose_at_the_largest_level() -> None:
    from privbandit.shared.core.accounting.mab_ledgers import heldp_ledger
    from privbandit.shared.core.privacy_levels import parse_levels

    ledger = heldp_ledger(parse_levels("choice:0.5,1,2"), 0.5, "bernoulli", False)
    fig = persons.person_figures(ledger, 4, 1e-6)
    assert fig["ldp_epsilon"] == pytest.approx(8.0, rel=1e-3)  # Σ ε_t ≤ k · max ε_t


@pytest.mark.parametrize("k", [0, -1, persons.MAX_K + 1])
def test_bad_k_refused(k: int) -> None:
    with pytest.raises(ValueError):
        persons.person_figures(ledgers.ldp_binary_ledger(1.0), k, 1e-6)


def test_inverse_questions_round_trip() -> None:
    """The largest k and the largest per-report ε meet the target, and one step more does not."""
    delta, target = 1e-6, 3.0

    def by_k(k: int) -> float:
        return persons.pure_composed_epsilon(0.4, k, delta)

    k = persons.largest_k(by_k, target)
    assert by_k(k) <= target < by_k(k + 1)
    assert persons.largest_k(by_k, 0.1) == 0

    def by_eps(e: float) -> float:
        return persons.pure_composed_epsilon(e, 10, delta)

    e = persons.largest_report_epsilon(by_eps, target)
    assert e is not None
    assert by_eps(e) <= target < by_eps(e * (1 + 2e-5))
    assert persons.largest_report_epsilon(by_eps, 1e-9) is None


def test_gaussian_ldp_reports_compose_exactly_at_the_same_delta() -> None:
    """An analytic-Gaussian (ε, δ)-LDP report (σ/Δ from Balle–Wang's calibration): k of them
    are one Gaussian at μ = √k Δ/σ, whose exact δ(ε) (closed form) meets δ at the stated ε, and
    which is far below basic composition kε."""
    eps, delta, k = 2.0, 1e-6, 6
    ledger = ledgers.ldp_gaussian_ledger(eps, delta)
    ratio = (ledger.model_extra or {})["noise_multiplier"]
    assert analytic_gaussian_delta(eps, 1 / ratio) == pytest.approx(delta, rel=1e-6)
    fig = persons.person_figures(ledger, k, delta)
    assert fig["ldp_delta"] == delta and fig["central_epsilon"] == fig["ldp_epsilon"]
    mu = math.sqrt(k) / ratio
    assert analytic_gaussian_delta(fig["ldp_epsilon"], mu) <= delta * (1 + 1e-6)
    assert analytic_gaussian_delta(fig["ldp_epsilon"] - 0.01, mu) > delta
    assert fig["ldp_epsilon"] < 0.6 * k * eps
