"""Ledgers of the LDP bandit convex optimisation policies (issue 12), in the shape of spec §6.

Each user sends one report (one noisy loss, Alg. 1; one noisy difference, Alg. 2); the points she
is served and her perturbation direction do not depend on her loss, and later points are
post-processing of earlier reports, so a user's guarantee is that of her own report — the Gaussian
mechanism at the sensitivity of ``shared.core.randomizers.bco``. The analyzer sees the same report,
so the central figures equal the local ones. ``ldp_epsilon`` is the exact ε of the σ in use at δ
(Balle–Wang Thm 8): the requested ε for the analytic calibration, the ε the paper's σ actually
achieves otherwise.
"""

from __future__ import annotations

from privbandit.shared.core.accounting import ledgers
from privbandit.shared.core.accounting.ledger import PrivacyLedger
from privbandit.shared.core.accounting.mab_ledgers import COMPOSITION
from privbandit.shared.core.randomizers.bco import Calibration, achieved_epsilon

MECHANISMS = {
    "ldp-bco": ("Zheng et al. Alg. 1: the loss f_t(x_t) ∈ [0, B] plus N(0, σ²), sensitivity B",
                "2B√(2 ln(1.25/δ))/ε (Alg. 1 line 2)"),
    "ldp-bco2": ("Zheng et al. Alg. 2: the difference f_t(x_{t,1}) − f_t(x_{t,2}) (clipped to "
                 "±G‖Δx‖) plus n_tᵀΔx, n_t ~ N(0, σ²I), sensitivity 2G‖Δx‖ against noise "
                 "sd σ‖Δx‖", "2G√(2 ln(1.25/δ))/ε (Alg. 2 line 2)"),
}


def ldp_bco_ledger(algo: str, epsilon: float, delta: float, sigma_over_sensitivity: float,
                   calibration: Calibration) -> PrivacyLedger:
    """(ε, δ)-LDP per report of ``ldp-bco`` / ``ldp-bco2`` (σ/Δ of the mechanism in use)."""
    mechanism, paper_sigma = MECHANISMS[algo]
    eps = epsilon if calibration == "analytic" else achieved_epsilon(
        sigma_over_sensitivity, delta, 1.0)
    how = ("analytic Gaussian mechanism (Balle–Wang 2018 Thm 8), σ the smallest noise that is "
           f"exactly (ε={epsilon:g}, δ={delta:g})-DP" if calibration == "analytic" else
           f"the paper's σ = {paper_sigma} for ε={epsilon:g}, δ={delta:g} (classic bound, "
           f"proven for ε < 1); its exact ε at δ is {eps:.6g}")
    base = ledgers.ldp_gaussian_ledger(eps, delta)
    return base.model_copy(update={
        "accounting": (f"(ε, δ)-LDP per report: {mechanism}; calibration {calibration}: {how}; "
                       f"σ/Δ = {sigma_over_sensitivity:.6g}; the analyzer sees the same report, "
                       f"so central = local; {COMPOSITION}"),
        "calibration": calibration,
        "sigma_over_sensitivity": sigma_over_sensitivity,
    })
