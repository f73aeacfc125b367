"""Builders of the PrivacyLedger for each threat model (spec §3, §6).

Composition, common to every mode: a user contributes one report, and a report enters exactly one
shuffler batch (or one analyzer episode), so the user's guarantee is that of the one batch that
holds the report (parallel composition). Later batches and published models depend on that batch
only through published models, which is post-processing. A device that contributes several reports
composes over its own reports and keeps its own ledger; the figures here are per report.
"""

from __future__ import annotations

import math

from privbandit.shared.core.accounting.garcelon import theorem5_epsilon
from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger
from privbandit.shared.core.accounting.rdp import gaussian_dp_epsilon, rdp_to_dp
from privbandit.shared.core.accounting.shuffle import shuffle_epsilon

COMPOSITION = (
    "one report per user, each report in exactly one batch: parallel composition; later batches "
    "and broadcasts are post-processing of published models"
)


def none_ledger() -> PrivacyLedger:
    """Non-private baseline: no guarantee against any observer."""
    return PrivacyLedger(threat_model="none", accounting="non-private baseline")


def ldp_gaussian_ledger(eps: float, delta: float) -> PrivacyLedger:
    """Zheng et al. Alg. 5: Gaussian noise calibrated exactly (Balle–Wang) to (ε, δ)-LDP.

    The analyzer sees the same noisy report as an observer between device and shuffler, so the
    central figures equal the local ones. ``noise_multiplier``: σ/Δ of that calibration (Balle–
    Wang), with which a person's k reports compose exactly (``accounting.persons``).
    """
    from privbandit.shared.core.accounting.gaussian import gaussian_sigma

    return PrivacyLedger(
        threat_model="ldp",
        ldp_epsilon=eps,
        ldp_delta=delta,
        central_epsilon=eps,
        central_delta=delta,
        accounting=(
            f"(ε, δ)-LDP per report: analytic Gaussian mechanism (Balle–Wang 2018), ε={eps:g}, "
            f"δ={delta:g}; the analyzer sees the same report, so central = local; {COMPOSITION}"
        ),
        noise_multiplier=gaussian_sigma(eps, delta, 1.0),
    )


def ldp_privunit_ledger(eps: float) -> PrivacyLedger:
    """``ldp-linucb`` with ``mechanism = "privunit"``: PrivUnit2 (Bhowmick et al. 2018) on the
    report vector, pure ε-LDP (the exact likelihood-ratio bound, ``randomizers.privunit`` (★)),
    δ = 0; the analyzer sees the same report, so central = local."""
    return PrivacyLedger(
        threat_model="ldp",
        ldp_epsilon=eps,
        ldp_delta=0.0,
        central_epsilon=eps,
        central_delta=0.0,
        accounting=(
            f"pure ε-LDP per report: PrivUnit2 (Bhowmick et al. 2018), ε={eps:g}; the analyzer "
            f"sees the same report, so central = local; {COMPOSITION}"
        ),
    )


def ldp_binary_ledger(eps0: float) -> PrivacyLedger:
    """Garcelon Alg. 2–3 without shuffling (batch 1): pure ε0-LDP (Prop. 4), δ = 0."""
    return PrivacyLedger(
        threat_model="ldp",
        ldp_epsilon=eps0,
        ldp_delta=0.0,
        central_epsilon=eps0,
        central_delta=0.0,
        accounting=(
            f"pure ε0-LDP per report: 0/1 randomized response, Garcelon et al. Prop. 4, "
            f"ε0={eps0:g}; no shuffling, so central = local; {COMPOSITION}"
        ),
    )


def shuffle_ledger(
    eps0: float,
    batch_size: int,
    delta: float,
    T: int | None = None,
    d: int = 5,
    m: int = 1,
    aggregation: Aggregation = "reports",
) -> PrivacyLedger:
    """Shuffle model. ldp: ε0-LDP per report (Garcelon Prop. 4), δ = 0. central, by transport:

    - ``reports`` (the analyzer sees the shuffled multiset of reports): Feldman–McMillan–Talwar
      numerical amplification bound (Thm 3.2) for an ε0-LDP randomizer among ``batch_size``
      reports, at the given δ;
    - ``secure-sum`` (the analyzer sees only the batch sums): ``sum_only.secure_sum_central``.

    ``central_epsilon_paper``: Garcelon Thm 5 (Eq. 3) for the whole sequence of batch statistics
    over horizon T with δ0 = δ/2 (None without T or where its conditions fail).
    """
    if aggregation == "secure-sum":
        from privbandit.shared.core.accounting.sum_only import secure_sum_central

        central, accounting = secure_sum_central(eps0, batch_size, delta, d, m)
    elif aggregation == "reports":
        central = shuffle_epsilon(eps0, batch_size, delta)
        accounting = (
            f"ldp: pure ε0-LDP per report (Garcelon Prop. 4); central (observer of the shuffler "
            f"output, whole shuffled reports): Feldman–McMillan–Talwar 2021 Thm 3.2 numerical "
            f"amplification bound, ε0={eps0:g} among l={batch_size} reports at δ={delta:g}; "
            f"{COMPOSITION}. central_epsilon_paper: Garcelon et al. Thm 5 (Eq. 3, δ0 = δ/2, "
            f"advanced composition over all batches)"
        )
    else:
        raise ValueError(f"unknown aggregation {aggregation!r}")
    paper = None if T is None else theorem5_epsilon(eps0, batch_size, delta, T, d, m)
    return PrivacyLedger(
        threat_model="shuffle",
        ldp_epsilon=eps0,
        ldp_delta=0.0,
        central_epsilon=central,
        central_delta=delta,
        accounting=accounting,
        central_epsilon_paper=paper,
        aggregation=aggregation,
    )


def central_ledger(alpha: float, rdp_eps: float, delta: float) -> PrivacyLedger:
    """Trusted analyzer (Azize–Basu AdaR-OFUL): (α, ε)-RDP and its (ε, δ) conversion.

    The episode noise is a Gaussian mechanism with σ/Δ = √(α/(2ε)), so its whole RDP curve
    α' ↦ α'Δ²/(2σ²) is known; dp-accounting's RDP accountant converts that curve to (ε, δ) (the
    best order wins; ``rdp.gaussian_dp_epsilon``, its transcription), which is never above the
    single-order conversion at α (also reported).
    """
    single = rdp_to_dp(alpha, rdp_eps, delta)
    sigma_over_delta = math.sqrt(alpha / (2.0 * rdp_eps))
    curve = gaussian_dp_epsilon(sigma_over_delta, 1.0, delta)
    return PrivacyLedger(
        threat_model="central",
        rdp_alpha=alpha,
        rdp_epsilon=rdp_eps,
        central_epsilon=min(curve, single),
        central_delta=delta,
        accounting=(
            f"(α, ε)-RDP of the Gaussian mechanism per adaptive episode (Azize–Basu 2023), "
            f"α={alpha:g}, ε={rdp_eps:g}, noise σ/Δ={sigma_over_delta:.4g}; (ε, δ) from the "
            f"mechanism's full RDP curve by dp-accounting's RdpAccountant (single-order "
            f"conversion at α: {single:.4g}); trusted analyzer, no local guarantee; the guarantee "
            f"covers each user's reward — contexts are public in Azize–Basu's model and V = λI + "
            f"Σ x xᵀ is broadcast exactly; {COMPOSITION}"
        ),
        central_epsilon_single_order=single,
    )


def rdp_epsilon_for_central(alpha: float, central: float, delta: float,
                            tol: float = 1e-4) -> float:
    """The RDP ε at order α whose ``central_ledger`` states central ε in [central − tol, central]
    at δ: the trusted-analyzer policies (adar-oful, adar-gope, adar-ucb) take their budget as
    (α, ε)-RDP, and this is the RDP ε of a stated (ε, δ)-DP target (e.g. 0.04871 at α = 2 for
    (1, 10⁻⁶)). The ledger's ε is continuous and increasing in the RDP ε (the noise
    σ/Δ = √(α/(2ε)) falls), so bisection on ln ε keeps a lower end that never states a weaker
    guarantee than the target; raises ``ValueError`` if no RDP ε in [10⁻¹², 10⁶] brackets it."""
    if not central > 0 or not tol > 0:
        raise ValueError("the central ε and the tolerance must be positive")

    def stated(log_eps: float) -> float:
        value = central_ledger(alpha, math.exp(log_eps), delta).central_epsilon
        if value is None:  # a central ledger always states ε
            raise ValueError("the central ledger states no ε")
        return value

    lo, hi = math.log(1e-12), math.log(1e6)
    if stated(lo) > central or stated(hi) <= central:
        raise ValueError(f"no RDP ε at α = {alpha:g} gives central ε = {central:g} at δ = "
                         f"{delta:g}")
    for _ in range(200):
        mid = (lo + hi) / 2
        value = stated(mid)
        if value <= central:
            lo = mid
            if central - value <= tol:
                return math.exp(lo)
        else:
            hi = mid
    raise ValueError("bisection did not reach the tolerance")
