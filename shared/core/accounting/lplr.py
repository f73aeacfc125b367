"""Ledger of ``lplr`` (Li, Simchi-Levi & Wang, Prop. 4.1): one report per user, LDP per report.

Each user reports once, to the one layer group of the one epoch she arrives in (which group is a
function of her arrival time, not of her data), and that report covers all K oracles and all bins
of the layer (``shared.core.randomizers.lplr``). Her guarantee is therefore the report's: ε =
ε_count + ε_vector + ε_matrix by basic composition of the three Laplace parts (δ = 0), or with the
paper's Wishart matrix part δ = 1 − e^{−ε_matrix} (docs/lplr.md §3.3). Later decisions depend on
the report only through broadcast trees (post-processing), and the analyzer sees the same report
as any observer on the way, so central = local.
"""

from __future__ import annotations

from privbandit.shared.core.accounting.ledger import PrivacyLedger
from privbandit.shared.core.accounting.ledgers import COMPOSITION
from privbandit.shared.core.randomizers.lplr import LPLRRandomizer


def lplr_ledger(randomizer: LPLRRandomizer) -> PrivacyLedger:
    r = randomizer
    matrix = ("Laplace on upper(φφᵀ/ρ²), L1 sensitivity d + 1" if r.matrix_noise == "laplace"
              else f"Wishart W_d(d + 1, I/(2ε_m)): ε_m-DP on the common support, δ = 1 − e^(−ε_m)"
                   f" = {r.delta:.3g} from the moving support")
    return PrivacyLedger(
        threat_model="ldp",
        ldp_epsilon=r.epsilon,
        ldp_delta=r.delta,
        central_epsilon=r.epsilon,
        central_delta=r.delta,
        accounting=(
            f"ε-LDP per report (LPLR-Update, Prop. 4.1): counts Laplace ε_c={r.eps_count:g} (L1 "
            f"sensitivity 2), vectors Laplace ε_v={r.eps_vector:g} (2√d), matrices "
            f"ε_m={r.eps_matrix:g} ({matrix}); basic composition ε = {r.epsilon:g}; the analyzer "
            f"sees the same report, so central = local; {COMPOSITION}"
        ),
    )
