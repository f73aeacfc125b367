"""A guarantee per person, not per report (issue 24): k contributions of one person, composed.

The device bounds every person to at most k reports per task and period (``ContributionBound``;
``services.device``). Every ledger of this package states a guarantee per report; this module
turns one into the guarantee of a person who sends up to k of them, against each observer:

- **local observer** (between device and shuffler): the k reports are independent runs of the
  local randomizer, adaptively composed (later reports depend on published models only).
  Pure ε-LDP composes to kε exactly at δ = 0 and, at δ > 0, to the optimal composition of
  Kairouz–Oh–Viswanath (2015, Thm 3.3), computed as the k-fold privacy-loss distribution of the
  worst-case ε-DP pair with dp-accounting (``pure_composed_epsilon``); an (ε, δ)-LDP report
  composes the same way from the worst-case (ε, δ) pair (``approx_composed_epsilon``), stated at
  δ_person = (k + 1) δ (k times the reports' δ, plus δ of slack for the composition).
- **central observer, ``ldp`` tasks**: the analyzer sees the same reports: as above.
- **central observer, shuffled tasks**: a person's k reports may share a batch. A batch of l
  reports of which c are hers is post-processing of c independent sub-batches, each holding one
  of her reports among ⌊l/c⌋ − 1 others (the union of shuffled multisets is the shuffled union;
  a sum is the sum of sub-sums), so her guarantee is at worst the k-fold composition of one
  report's batch guarantee at batch length ⌊l/k⌋ (amplification only grows with the length).
  The skellam (distributed DP) batch composes exactly in RDP: with device shares, k · ε_RDP(α)
  of a sub-sum holding ⌊n_h/k⌋ honest shares (AKL Cor. 3.6, ``skellam_person``); with the noise
  added by the aggregators (issue 40), the Skellam mechanism at k times the sensitivities (her
  reports in one batch, the worst case); the shuffled 0/1 reports compose
  their per-sub-batch (ε, δ) as above and are never worse than the local composition.
- **central observer, trusted analyzer (RDP)**: k rewards may share one episode's noisy sum: a
  Gaussian mechanism of sensitivity kΔ, i.e. RDP α k² Δ² / (2σ²) (Mironov 2017, Prop. 7) — not
  the k α Δ² / (2σ²) of k separate episodes, which the worst case includes.

``k = None`` (no bound configured) states no per-person guarantee at all: ``null`` figures and
an accounting string that says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from privbandit.shared.core.accounting.ledger import GaussianReports, PrivacyLedger, SkellamSums

# PLD discretization of the privacy loss: dp-accounting's pessimistic rounding keeps every
# figure an upper bound; 1e-4 keeps k ≤ 10⁴ compositions under a second.
PLD_INTERVAL = 1e-4
# The largest k a question may ask about (the inverse search's cap).
MAX_K = 100_000


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"the contribution bound k must be an integer >= 1, got {k!r}")
    if k > MAX_K:
        raise ValueError(f"the contribution bound k must be at most {MAX_K}, got {k}")


def _check_delta(delta: float) -> None:
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")


def person_delta(report_delta: float, k: int) -> float:
    """δ at which k (ε, δ)-DP reports are stated: (k + 1) δ (k reports' δ plus δ of slack)."""
    return (k + 1) * report_delta


def pure_composed_epsilon(eps: float, k: int, delta: float) -> float:
    """ε of the k-fold adaptive composition of ε-DP mechanisms at δ: the optimal composition
    (Kairouz–Oh–Viswanath Thm 3.3) by dp-accounting's PLD of the worst-case ε-DP pair, and never
    more than kε (basic composition, exact at δ = 0)."""
    _check_k(k)
    _check_delta(delta)
    if not (eps >= 0 and math.isfinite(eps)):
        raise ValueError(f"epsilon must be finite and >= 0, got {eps}")
    if eps == 0 or k == 1:
        return k * eps
    from dp_accounting.pld import common, privacy_loss_distribution

    pld = privacy_loss_distribution.from_privacy_parameters(
        common.DifferentialPrivacyParameters(eps, 0.0), value_discretization_interval=PLD_INTERVAL)
    return min(k * eps, float(pld.self_compose(k).get_epsilon_for_delta(delta)))


def approx_composed_epsilon(eps: float, delta_each: float, k: int, delta: float) -> float:
    """ε of the k-fold composition of (ε, δ_each)-DP mechanisms at a total δ: dp-accounting's
    PLD of the worst-case (ε, δ_each) pair (dominating every (ε, δ_each)-DP mechanism), composed
    k times; ``inf`` when δ ≤ 1 − (1 − δ_each)^k (no finite ε exists there). Never more than kε
    once δ ≥ k δ_each (basic composition)."""
    _check_k(k)
    _check_delta(delta)
    if delta_each == 0:
        return pure_composed_epsilon(eps, k, delta)
    if not 0.0 < delta_each < 1.0:
        raise ValueError(f"delta_each must be in [0, 1), got {delta_each}")
    if delta <= -math.expm1(k * math.log1p(-delta_each)):
        return math.inf
    from dp_accounting.pld import common, privacy_loss_distribution

    pld = privacy_loss_distribution.from_privacy_parameters(
        common.DifferentialPrivacyParameters(eps, delta_each),
        value_discretization_interval=PLD_INTERVAL)
    composed = float(pld.self_compose(k).get_epsilon_for_delta(delta))
    return min(composed, k * eps) if delta >= k * delta_each else composed


def gaussian_composed_epsilon(noise_multiplier: float, k: int, delta: float,
                              group: bool = False) -> float:
    """ε at δ of k Gaussian mechanisms of noise multiplier σ/Δ composed (RDP k α Δ²/(2σ²)), or,
    with ``group``, of one Gaussian mechanism at sensitivity kΔ (RDP α k² Δ²/(2σ²): k
    contributions in one noisy sum). dp-accounting's PLD accountant (tight for the Gaussian);
    the tests check it against the closed form of the analytic Gaussian (Balle–Wang 2018) at
    σ/(√k Δ) and σ/(kΔ)."""
    _check_k(k)
    _check_delta(delta)
    if not (noise_multiplier > 0 and math.isfinite(noise_multiplier)):
        raise ValueError(f"the noise multiplier must be positive, got {noise_multiplier}")
    import dp_accounting

    # The privacy loss of a Gaussian spreads over ~μ² (μ = kΔ/σ at most): a discretisation
    # relative to the RDP figure keeps the grid at a few thousand points however weak the
    # noise (PLD_INTERVAL alone would take minutes at μ ~ 100), and it stays pessimistic.
    rdp = dp_accounting.rdp.RdpAccountant()
    rdp.compose(dp_accounting.GaussianDpEvent(noise_multiplier / k if group else noise_multiplier),
                1 if group else k)
    rdp_eps = float(rdp.get_epsilon(delta))
    if rdp_eps > 50.0:  # no protection left to state precisely; the RDP figure bounds it
        return rdp_eps
    interval = PLD_INTERVAL * max(1.0, rdp_eps)
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=interval)
    if group:
        accountant.compose(dp_accounting.GaussianDpEvent(noise_multiplier / k))
    else:
        accountant.compose(dp_accounting.GaussianDpEvent(noise_multiplier), k)
    return float(accountant.get_epsilon(delta))


def skellam_person(mech: SkellamSums, k: int, delta: float) -> tuple[float | None, str]:
    """(ε, words) at δ of a person's k reports under the distributed Skellam mechanism, from a
    ``skellam.ddp_ledger``'s fields: k sub-sums each holding one of her reports and ⌊n_h/k⌋
    honest shares (μ_sub = ⌊n_h/k⌋ σ_s²), composed in RDP (k · ε_sub(α), AKL Cor. 3.6) and
    converted by dp-accounting's conversion (``rdp.curve_to_dp``). None when k > n_h (a sub-sum
    would hold no honest share)."""
    from privbandit.shared.core.accounting.rdp import curve_to_dp
    from privbandit.shared.core.accounting.skellam import ORDERS, skellam_rdp

    _check_k(k)
    _check_delta(delta)
    l1, l2 = mech.l1_sensitivity, mech.l2_sensitivity
    if mech.noise == "aggregators":
        assert mech.aggregator_variance is not None  # the aggregators' ledger states it
        return _skellam_person_aggregators(mech.aggregator_variance, l1, l2, k, delta)
    assert mech.honest_shares is not None and mech.share_variance is not None  # the devices'
    n_h, share = mech.honest_shares, mech.share_variance
    per_sub = n_h // k
    if per_sub < 1:
        return None, (f"k={k} exceeds the ⌈γ l⌉={n_h} honest shares of a batch: no central "
                      f"guarantee per person")
    mu = per_sub * share
    eps, order = curve_to_dp(list(ORDERS), [k * skellam_rdp(a, mu, l1, l2) for a in ORDERS],
                             delta)
    return float(eps), (f"k sub-sums of ⌊n_h/k⌋={per_sub} honest shares each (μ={mu:.6g}), "
                        f"RDP composed k times (AKL Cor. 3.6), dp-accounting's conversion at "
                        f"order α={order}")


def _skellam_person_aggregators(
    mu: float, l1: float, l2: float, k: int, delta: float
) -> tuple[float, str]:
    """(ε, words) of a person's k reports when each aggregator adds Sk(μ) to every batch (the
    worst single observer's μ): her reports move the batch sums by at most k Δ₂ (L2) and k Δ₁
    (L1) in all, wherever they land. In one batch that is the Skellam mechanism at sensitivities
    (kΔ₁, kΔ₂) (AKL Cor. 3.6 holds for any integer shift within those norms); spread over
    batches, the RDP of each batch adds up, and each term of Cor. 3.6 is superadditive in the
    shift's size (α k_j² Δ₂²/(2μ); min(A k_j² + B k_j, C k_j) summed is at most
    min(A k² + B k, C k)), so the one-batch case is the worst."""
    from privbandit.shared.core.accounting.rdp import curve_to_dp
    from privbandit.shared.core.accounting.skellam import ORDERS, skellam_rdp

    eps, order = curve_to_dp(list(ORDERS), [skellam_rdp(a, mu, k * l1, k * l2) for a in ORDERS],
                             delta)
    return float(eps), (f"her k reports move the sums by at most kΔ (one batch is the worst "
                        f"case): Skellam mechanism of variance μ={mu:.6g} at sensitivities "
                        f"(kΔ1, kΔ2) (AKL Cor. 3.6), dp-accounting's conversion at order "
                        f"α={order}")


def _max_level(ledger: PrivacyLedger) -> float | None:
    """The largest per-report ε_t a task with per-user levels accepts (HeLDP)."""
    from privbandit.shared.core.privacy_levels import EPS_MAX, parse_levels

    spec = None if ledger.levels is None else ledger.levels.distribution
    if spec is None:
        return None
    levels = parse_levels(spec)
    points = levels.support_points() if levels.kind != "normal" else []
    return max(points) if points else EPS_MAX


def person_figures(
    ledger: PrivacyLedger,
    k: int | None,
    delta: float,
    period: str = "forever",
    central_at: Callable[[int], tuple[float, float]] | None = None,
    batch_size: int | None = None,
) -> dict[str, Any]:
    """The ``per_person`` object of a ledger: the guarantee of a person who contributes at most
    ``k`` reports per ``period`` (module docstring), beside the per-report figures.

    ``delta``: the task's δ, at which pure-ε figures are stated. ``central_at(n)``: the central
    (ε, δ) of one report in a shuffled batch of length n, and ``batch_size`` the task's batch
    length (both for the shuffled 0/1 reports; without them the central figure falls back on the
    local composition, which bounds it)."""
    out: dict[str, Any] = {
        "k": k, "period": period, "ldp_epsilon": None, "ldp_delta": None,
        "central_epsilon": None, "central_delta": None, "rdp_alpha": None, "rdp_epsilon": None,
    }
    if ledger.threat_model == "none":
        out["accounting"] = "non-private baseline: no guarantee per report nor per person"
        return out
    if k is None:
        out["accounting"] = ("no contribution bound: a person's reports are not bounded, so no "
                             "guarantee per person is stated (the figures above are per report)")
        return out
    _check_k(k)
    _check_delta(delta)
    words: list[str] = []

    # Local: the k reports' own randomizers, composed.
    local: tuple[float, float] | None = None
    eps_report, delta_report = ledger.ldp_epsilon, ledger.ldp_delta
    if eps_report is None and ledger.threat_model == "ldp":
        eps_report, delta_report = _max_level(ledger), 0.0
        if eps_report is not None:
            words.append(f"per-user levels: each report at her own ε_t ≤ {eps_report:g}, so "
                         f"Σ ε_t ≤ k · {eps_report:g}")
    mech = ledger.mechanism
    if eps_report is not None and isinstance(mech, GaussianReports) and delta_report:
        # An analytic Gaussian report: k of them are one Gaussian at σ/(√k Δ), at the same δ.
        ratio = mech.noise_multiplier
        local = (gaussian_composed_epsilon(ratio, k, delta_report), delta_report)
        out["ldp_epsilon"], out["ldp_delta"] = local
        words.append(f"local: k={k} Gaussian ({eps_report:g}, {delta_report:g})-LDP reports "
                     f"(σ/Δ={ratio:.4g}) compose to one Gaussian at σ/(√k Δ) (dp-accounting "
                     f"PLD)")
    elif eps_report is not None:
        if not delta_report:
            e = pure_composed_epsilon(eps_report, k, delta)
            # Within 0.1 % of kε the exact (kε, 0) is the stronger statement.
            local = (k * eps_report, 0.0) if e >= 0.999 * k * eps_report else (e, delta)
            words.append(f"local: k={k} pure {eps_report:g}-LDP reports, optimal composition "
                         f"(dp-accounting PLD; k·ε={k * eps_report:g} at δ=0)")
        else:
            dp = person_delta(delta_report, k)
            local = (approx_composed_epsilon(eps_report, delta_report, k, dp), dp)
            words.append(f"local: k={k} ({eps_report:g}, {delta_report:g})-LDP reports composed "
                         f"(dp-accounting PLD of the worst-case pair) at δ=(k+1)·δ={dp:g}")
        out["ldp_epsilon"], out["ldp_delta"] = local

    central: tuple[float, float] | None = None
    if ledger.threat_model == "ldp":
        central = local
        words.append("central = local (the analyzer sees the same reports)")
    elif ledger.threat_model == "central" and ledger.rdp_alpha is not None:
        assert ledger.rdp_epsilon is not None and ledger.central_delta is not None
        ratio = math.sqrt(ledger.rdp_alpha / (2.0 * ledger.rdp_epsilon))
        central = (gaussian_composed_epsilon(ratio, k, ledger.central_delta, group=True),
                   ledger.central_delta)
        out["rdp_alpha"] = ledger.rdp_alpha
        out["rdp_epsilon"] = k * k * ledger.rdp_epsilon
        words.append(f"central: k={k} rewards may share one episode's noisy sum: Gaussian at "
                     f"sensitivity kΔ, RDP α k² Δ²/(2σ²) (σ/Δ={ratio:.4g}), (ε, δ) by "
                     f"dp-accounting's PLD")
    elif isinstance(mech, SkellamSums) and ledger.central_delta is not None:
        eps, how = skellam_person(mech, k, ledger.central_delta)
        central = None if eps is None else (eps, ledger.central_delta)
        words.append(f"central (distributed DP): {how}")
    elif ledger.threat_model == "shuffle" and ledger.central_delta is not None:
        dp = person_delta(ledger.central_delta, k)
        if central_at is not None and batch_size is not None and batch_size // k >= 2:
            sub = batch_size // k
            eps_sub, delta_sub = central_at(sub)
            eps = approx_composed_epsilon(eps_sub, delta_sub, k, person_delta(delta_sub, k))
            central = (eps, person_delta(delta_sub, k))
            words.append(f"central: k={k} reports at worst in one batch of l={batch_size}: k "
                         f"sub-batches of ⌊l/k⌋={sub}, each ({eps_sub:.4g}, {delta_sub:g}), "
                         f"composed (dp-accounting PLD) at δ=(k+1)·δ")
        if local is not None and eps_report is not None:
            # The shuffler's output is post-processing of the person's k local reports.
            lo = approx_composed_epsilon(eps_report, delta_report or 0.0, k,
                                         central[1] if central else dp)
            if central is None or lo < central[0]:
                central = (lo, central[1] if central else dp)
                words.append("central: bounded by the local composition (no better bound)")
    out["central_epsilon"], out["central_delta"] = central if central else (None, None)
    if central is None and ledger.threat_model != "ldp":
        words.append("central: no guarantee per person can be stated")
    per = "in all (period: forever)" if period == "forever" else f"per period of {period}"
    # What the device counts lives in its database (issue 40 item 7: docs/operations.md).
    out["accounting"] = (f"per person: at most k={k} reports {per}, as counted by the device's "
                         f"database (if it is lost and replaced with --init --forget-persons, "
                         f"each of its persons may send k more in that period: 2k in all); "
                         + "; ".join(words))
    return out


def with_person(ledger: PrivacyLedger, figures: dict[str, Any]) -> PrivacyLedger:
    """``ledger`` with its ``per_person`` object."""
    return ledger.model_copy(update={"per_person": figures})


def largest_k(person_eps: Callable[[int], float | None], target: float,
              max_k: int = MAX_K) -> int:
    """The largest k ≤ ``max_k`` whose per-person ε is at most ``target`` (0 if even one report
    exceeds it), for a per-person ε non-decreasing in k: doubling, then bisection
    (``search.smallest_satisfying`` on "exceeds"). A figure that cannot be stated (None)
    exceeds every target."""
    from privbandit.shared.core.accounting.search import smallest_satisfying

    def exceeds(k: int) -> bool:
        eps = person_eps(k)
        return eps is None or eps > target

    if exceeds(1):
        return 0
    first = smallest_satisfying(exceeds, max_k)
    return max_k if first is None else first - 1


def largest_report_epsilon(person_eps: Callable[[float], float | None], target: float,
                           rel_tol: float = 1e-5, floor: float = 1e-6,
                           cap: float = 64.0) -> float | None:
    """The largest per-report ε in [``floor``, ``cap``] (to a relative ``rel_tol``, rounded down)
    whose per-person ε is at most ``target``, for a per-person ε non-decreasing in the per-report
    one: bisection on ln ε (``search.bisect_boundary``), since per-report figures span decades
    (an RDP ε of 10⁻³, a 0/1 randomizer's ε0 of 10). None when even ``floor`` exceeds it."""
    from privbandit.shared.core.accounting.search import bisect_boundary

    def ok(log_eps: float) -> bool:
        value = person_eps(math.exp(log_eps))
        return value is not None and value <= target

    lo, hi = math.log(floor), math.log(cap)
    if not ok(lo):
        return None
    if ok(hi):
        return cap
    return math.exp(bisect_boundary(ok, hi, lo, rel_tol))
