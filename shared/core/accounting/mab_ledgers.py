"""Ledgers of the multi-armed policies (issue 8, item 4), in the shape of spec §6.

Every ledger carries ``per_user_epsilon`` — ``{distribution, mean, fraction_used,
fraction_declined}`` for tasks whose users have (possibly different) local levels, ``null`` for
the others — beside the fields of ``PrivacyLedger``. Fractions are measured over the reports the
analyzer counted; before any report they are the distribution's own values (p0 = P(ε ≥ ε_min) and
P(ε = 0)).

Composition is the one of every task here: a user contributes one report, the analyzer's later
models depend on it only through what it published (post-processing), so each user's guarantee is
that of her own report (LDP tasks) or of the one episode that holds her reward (AdaR-UCB, Lemma 11
of Azize–Basu: episodes are disjoint, so the RDP of the sequence of released means is that of one).
"""

from __future__ import annotations

from typing import Any

from privbandit.shared.core.accounting import ledgers
from privbandit.shared.core.accounting.ledger import PrivacyLedger
from privbandit.shared.core.privacy_levels import PrivacyLevels

COMPOSITION = ("one report per user; later models are post-processing of published ones, so a "
               "user's guarantee is that of her own report")


def per_user_summary(levels: PrivacyLevels, eps_min: float | None, used: int, declined: int,
                     reports: int) -> dict[str, Any]:
    """The ``per_user_epsilon`` object: spec, exact mean, fractions used and declined."""
    if reports > 0:
        used_frac, declined_frac = used / reports, declined / reports
    else:
        used_frac = levels.prob_at_least(eps_min) if eps_min is not None else 1.0
        declined_frac = levels.prob_declined()
    return {
        "distribution": levels.spec,
        "mean": levels.mean(),
        "fraction_used": float(used_frac),
        "fraction_declined": float(declined_frac),
    }


def no_local_levels(ledger: PrivacyLedger) -> PrivacyLedger:
    """A ledger of a task without per-user levels: ``per_user_epsilon`` is null."""
    return ledger.model_copy(update={"per_user_epsilon": None})


def heldp_ledger(levels: PrivacyLevels, eps_min: float, mechanism: str, sigmoid: bool,
                 used: int = 0, declined: int = 0, reports: int = 0) -> PrivacyLedger:
    """CTL / CTB (HeLDP Lemmas 5 and 9): pure ε_t-LDP for each user at her own ε_t.

    ``ldp_epsilon`` (and the equal central figure: the analyzer sees the same report) is the
    common ε when every user has the same level, null otherwise; δ = 0.
    """
    common = levels.common
    curator = {"laplace": "CTL (Laplace(1/ε_t) added to the reward; Lemma 5)",
               "bernoulli": "CTB (one randomized-response bit; Lemma 9)"}[mechanism]
    if sigmoid:
        curator += " after the sigmoid s(r) = 1/(1+e^-r) (Corollary 13: any real reward)"
    return PrivacyLedger(
        threat_model="ldp",
        ldp_epsilon=common,
        ldp_delta=0.0,
        central_epsilon=common,
        central_delta=0.0,
        accounting=(
            f"pure ε_t-LDP per report, each user at her own level ε_t ~ {levels.spec}: {curator}; "
            f"ε_t = 0 sends nothing informative; the analyzer discards responses with "
            f"ε_t < ε_min = {eps_min:g} (post-processing); the analyzer sees the same report, so "
            f"central = local{'' if common is not None else ' (per user)'}; {COMPOSITION}"
        ),
        per_user_epsilon=per_user_summary(levels, eps_min, used, declined, reports),
    )


def ldp_mab_ledger(levels: PrivacyLevels, epsilon: float, delta: float, used: int = 0,
                   reports: int = 0) -> PrivacyLedger:
    """Zheng et al. Alg. 1: (ε, δ)-LDP per report, Gaussian at sensitivity 2B = 1 (Balle–Wang)."""
    base = ledgers.ldp_gaussian_ledger(epsilon, delta)
    return base.model_copy(update={
        "accounting": base.accounting.replace(
            "(ε, δ)-LDP per report", "(ε, δ)-LDP per report (Zheng et al. Alg. 1, one noisy loss "
            "of sensitivity 2B = 1)", 1),
        "per_user_epsilon": per_user_summary(levels, None, used, 0, reports),
    })


def adar_ucb_ledger(alpha: float, rdp_eps: float, delta: float) -> PrivacyLedger:
    """AdaR-UCB (Azize–Basu Thm 4): (α, ε)-RDP of the trusted analyzer and its (ε, δ) conversion.

    Each episode releases one mean of n rewards in [0, 1] (sensitivity 1/n) plus
    N(0, α/(2ε n²)): σ/Δ = √(α/(2ε)) for every episode, so the whole RDP curve α' ↦ α'ε/α is
    known and dp-accounting's RDP accountant converts it (never above the single-order bound at α).
    """
    base = ledgers.central_ledger(alpha, rdp_eps, delta)
    single = base.single_order_epsilon  # central_ledger states it
    assert single is not None
    ratio = (alpha / (2 * rdp_eps)) ** 0.5
    return base.model_copy(update={
        "accounting": (
            f"(α, ε)-RDP of the Gaussian mechanism on each episode's mean (Azize–Basu 2023, "
            f"AdaR-UCB Thm 4), α={alpha:g}, ε={rdp_eps:g}, σ/Δ={ratio:.4g}; "
            f"disjoint episodes (Lemma 11); (ε, δ) from the mechanism's full RDP curve by "
            f"dp-accounting's RdpAccountant (single-order conversion at α: {single:.4g}); trusted "
            f"analyzer, no local guarantee; {COMPOSITION}"
        ),
        "per_user_epsilon": None,
    })
