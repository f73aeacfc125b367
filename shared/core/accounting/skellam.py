"""Rényi DP of the Skellam mechanism for integer vector sums (distributed DP over a secure sum).

Agarwal, Kairouz, Liu, "The Skellam Mechanism for Differentially Private Federated Learning"
(NeurIPS 2021), Theorem 3.5 / Corollary 3.6 (the multi-dimensional Skellam mechanism). Noise: each
coordinate of an integer vector gets an independent symmetric Skellam variable of variance μ,
Sk(μ) = Poisson(μ/2) − Poisson(μ/2). For a query whose values differ, between neighbouring
datasets, by an integer vector w with ‖w‖₂ ≤ Δ₂ and ‖w‖₁ ≤ Δ₁, the mechanism is (α, ε(α))-RDP
for every integer α > 1 with

    ε(α) = α Δ₂² / (2μ) + min( ((2α − 1) Δ₂² + 6 Δ₁) / (4μ²),  3 Δ₁ / (2μ) ).        (AKL Cor. 3.6)

The first term is the Gaussian mechanism's RDP at variance μ; the second is the price of
discreteness. (This is the formula of tensorflow_privacy's distributed Skellam accounting at
scale 1, i.e. in the integer domain; the tests check it against the exact Rényi divergence of
Sk(μ) + w and Sk(μ) summed over the support, in one coordinate and for worst-case integer shifts
in small dimensions.)

Adjacency used by ``ddp-linucb``: **replacement of one user in a batch of fixed size l.** The
analyzer sees Σ_i z_i + N over the l users of a batch, z_i the user's rounded integer vector with
‖z_i‖₂ ≤ B (the device's norm bound after rounding). Replacing one user's z by z' moves the sum by
w = z − z', so Δ₂ ≤ ‖z‖₂ + ‖z'‖₂ ≤ 2B — twice the per-user bound (``replacement_sensitivities``
also takes a tighter pair bound when the caller has one). For an integer vector w of dimension n,
‖w‖₁ ≤ √n ‖w‖₂ and ‖w‖₁ ≤ ‖w‖₂² (each |w_i| ≤ w_i²), so Δ₁ = min(√n Δ₂, Δ₂²).

Honest fraction γ ∈ (0, 1]: the guarantee is claimed as long as at least n_h = ⌈γ l⌉ devices of
each batch added their share. Each device adds Sk(σ_s²) per coordinate; sums of independent Skellam
variables are Skellam (Poisson is closed under sums), so the honest shares alone add Sk(n_h σ_s²),
independent of the data. What the other devices add (anything, or nothing) is independent of the
target user's data as well, so it is post-processing of the honest-noise mechanism: the guarantee
is that of the Skellam mechanism at μ = n_h σ_s². Shares are sized σ_s² = μ / n_h for a target μ.

Conversion to (ε, δ): dp-accounting's ``compute_epsilon`` (the Canonne–Kamath–Steinke 2020 Prop. 12
conversion, minimised over the integer orders below), as ``rdp.curve_to_dp`` transcribes it
(the same floats, without dp-accounting's second of imports in every service start).
Composition: one report per user, in exactly one batch (parallel composition); models are
post-processing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from privbandit.shared.core.accounting.ledger import (
    SECURE_SUM_OBSERVERS_GENERIC,
    PrivacyLedger,
    SkellamSums,
)
from privbandit.shared.core.accounting.rdp import curve_to_dp
from privbandit.shared.core.accounting.search import bisect_boundary

# Integer Rényi orders (AKL Cor. 3.6 is stated for integer α > 1).
ORDERS: tuple[int, ...] = (*range(2, 129), 160, 192, 256, 320, 384, 512, 768, 1024)


def _check_sensitivities(l1: float, l2: float) -> None:
    if not (l2 > 0 and math.isfinite(l2)) or not (l1 > 0 and math.isfinite(l1)):
        raise ValueError(f"sensitivities must be positive and finite, got Δ1={l1}, Δ2={l2}")


def skellam_rdp(alpha: int, mu: float, l1: float, l2: float) -> float:
    """ε(α) of the Skellam mechanism of variance μ per coordinate (AKL Cor. 3.6), integer α ≥ 2."""
    if int(alpha) != alpha or alpha < 2:
        raise ValueError(f"the Skellam RDP bound needs an integer order α ≥ 2, got {alpha}")
    if not (mu > 0 and math.isfinite(mu)):
        raise ValueError(f"Skellam variance μ must be positive and finite, got {mu}")
    _check_sensitivities(l1, l2)
    a = int(alpha)
    gaussian = a * l2**2 / (2.0 * mu)
    discrete = min(((2 * a - 1) * l2**2 + 6.0 * l1) / (4.0 * mu**2), 3.0 * l1 / (2.0 * mu))
    return gaussian + discrete


def skellam_epsilon(
    mu: float, l1: float, l2: float, delta: float, orders: Sequence[int] = ORDERS
) -> tuple[float, int]:
    """(ε, best order): the Skellam mechanism's RDP curve converted to (ε, δ) by dp-accounting's
    conversion (``rdp.curve_to_dp``)."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    rdp = [skellam_rdp(a, mu, l1, l2) for a in orders]
    eps, order = curve_to_dp(list(orders), rdp, delta)
    return float(eps), int(order)


def replacement_sensitivities(
    norm_bound: float, dim: int, pair_bound: float | None = None
) -> tuple[float, float]:
    """(Δ₁, Δ₂) of a sum of integer vectors under replacement of one vector (module docstring):
    Δ₂ = 2B for per-user bound ‖z‖₂ ≤ B (or ``pair_bound`` ≥ ‖z − z'‖₂ when smaller), and
    Δ₁ = min(√dim Δ₂, Δ₂²)."""
    if not (norm_bound > 0 and math.isfinite(norm_bound)) or dim < 1:
        raise ValueError("need a positive norm bound and dim >= 1")
    l2 = 2.0 * norm_bound
    if pair_bound is not None:
        if not pair_bound > 0:
            raise ValueError(f"pair_bound must be positive, got {pair_bound}")
        l2 = min(l2, pair_bound)
    return min(math.sqrt(dim) * l2, l2 * l2), l2


def honest_shares(gamma: float, batch_size: int) -> int:
    """n_h = ⌈γ l⌉ honest shares per batch (γ l within 1e-9 of an integer counts as that integer,
    so that float γ = 0.5, l = 1000 gives 500)."""
    if not (0.0 < gamma <= 1.0):
        raise ValueError(f"honest fraction must be in (0, 1], got {gamma}")
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, got {batch_size}")
    return max(1, min(batch_size, math.ceil(gamma * batch_size - 1e-9)))


def skellam_mu(
    target_eps: float, delta: float, l1: float, l2: float, *, rel_tol: float = 1e-6
) -> float:
    """Smallest central variance μ (to a relative ``rel_tol``, rounded up) with
    ``skellam_epsilon(μ) ≤ target_eps``: ε is decreasing in μ, so bisection on μ
    (``search.bisect_boundary``); the returned μ always meets the target."""
    if not (target_eps > 0 and math.isfinite(target_eps)):
        raise ValueError(f"target epsilon must be positive and finite, got {target_eps}")
    _check_sensitivities(l1, l2)

    def ok(mu: float) -> bool:
        return skellam_epsilon(mu, l1, l2, delta)[0] <= target_eps

    hi = l2**2
    while not ok(hi):
        hi *= 4.0
    lo = hi / 4.0
    while ok(lo):
        lo /= 4.0
    return bisect_boundary(ok, lo, hi, rel_tol * lo)


@dataclass(frozen=True)
class LedgerWords:
    """What a ``ddp-linucb`` ledger's accounting sentence names beside the mechanism: the
    quantization scale, the encoding, and the sentence of the task's secure sum
    (``ledger.observers_sentence``). Prose only: no figure depends on them."""

    scale: float | None = None
    encoding: str | None = None
    observers: str = SECURE_SUM_OBSERVERS_GENERIC

    def scale_words(self) -> str:
        words = "" if self.scale is None else f", scale s={self.scale:g}"
        return words if self.encoding is None else words + f", encoding {self.encoding}"


def _skellam_ledger(eps: float, order: int, mu: float, l1: float, l2: float, delta: float,
                    accounting: str, **extra: object) -> PrivacyLedger:
    """A ``ddp-linucb`` ledger (both designs): central (ε, δ) of the Skellam mechanism of
    variance μ at its best order, no local guarantee, and the design's own fields."""
    return PrivacyLedger(
        threat_model="shuffle",
        ldp_epsilon=None,
        ldp_delta=None,
        central_epsilon=eps,
        central_delta=delta,
        rdp_alpha=float(order),
        rdp_epsilon=skellam_rdp(order, mu, l1, l2),
        aggregation="secure-sum",
        accounting=accounting,
        l1_sensitivity=l1,
        l2_sensitivity=l2,
        **extra,
    )


def ddp_ledger(
    share_variance: float,
    gamma: float,
    batch_size: int,
    l1: float,
    l2: float,
    delta: float,
    words: LedgerWords = LedgerWords(),
) -> PrivacyLedger:
    """Ledger of the distributed Skellam mechanism (``ddp-linucb``): what each observer sees
    (``words``: the scale, encoding and secure-sum sentence its accounting names).

    - shuffler: only its transport's view (``SECURE_SUM_OBSERVERS``: one Prio3 share per report,
      or Paillier ciphertexts; no DP claim needed or made);
    - analyzer and public: the noisy batch sums and the models computed from them, at central
      (ε, δ) for the Skellam mechanism with μ = ⌈γ l⌉ · σ_s² (module docstring);
    - ``ldp_epsilon`` is null: a report holds only a 1/(γ l) share of the noise, so on its own (to
      whoever could decrypt one report, i.e. a colluding shuffler and analyzer) it is
      essentially the user's exact statistics — no meaningful local guarantee is claimed.
    """
    if not (share_variance > 0 and math.isfinite(share_variance)):
        raise ValueError(f"share variance must be positive, got {share_variance}")
    n_h = honest_shares(gamma, batch_size)
    mu = n_h * share_variance
    eps, order = skellam_epsilon(mu, l1, l2, delta)
    scale_txt = words.scale_words()
    return _skellam_ledger(
        eps, order, mu, l1, l2, delta,
        accounting=(
            f"distributed DP (Skellam): each device adds Skellam noise of variance "
            f"σ_s²={share_variance:.6g} per coordinate to its rounded statistics{scale_txt}; "
            f"{words.observers}. Guarantee if at least ⌈γ l⌉={n_h} of "
            f"l={batch_size} devices per batch added their share (γ={gamma:g}): Skellam mechanism "
            f"of variance μ={mu:.6g}, replacement of one user in a fixed batch "
            f"(Δ2={l2:.6g} = 2× the per-user norm bound after rounding or the pair bound, "
            f"Δ1={l1:.6g}), RDP by Agarwal–Kairouz–Liu 2021 Cor. 3.6, converted to (ε, δ) by "
            f"dp-accounting (best order α={order}); no local guarantee (ldp_epsilon null): one "
            f"report carries only a 1/⌈γ l⌉ share of the noise; one report per user, each in "
            f"exactly one batch: parallel composition; models are post-processing"
        ),
        noise="devices",
        skellam_mu=mu,
        share_variance=share_variance,
        honest_fraction=gamma,
        honest_shares=n_h,
    )


def aggregator_ledger(
    aggregator_variance: float,
    l1: float,
    l2: float,
    delta: float,
    words: LedgerWords = LedgerWords(),
) -> PrivacyLedger:
    """Ledger of ``ddp-linucb`` with the noise added by the two aggregators (issue 40)
    (``words`` as in ``ddp_ledger``).

    Each aggregator adds Sk(μ_a) per coordinate to its aggregate share of a batch, drawn from
    its own randomness, before the shares are combined; the released sum is S = Σ z_i + N_s + N_a.
    Per observer, what protects it is the noise it did not add (it can subtract its own):

    - the analyzer sees S (and knows N_a): Skellam mechanism of variance μ_a (N_s);
    - the shuffler sees the models computed from S and one uniformly random share of each
      report (and knows N_s): variance μ_a (N_a);
    - the public sees the models: variance 2μ_a (sums of independent Skellams are Skellam).

    No device needs to add anything: the noise does not depend on what devices send, so a
    device that sends no noise, an invalid report or nothing at all cannot lower it (no honest
    fraction). Adjacency: replacement of one user's rounded statistics in one batch (Δ₁, Δ₂ as
    ``ddp_ledger``); RDP by AKL Cor. 3.6, converted by dp-accounting's conversion. The top-level
    central (ε, δ) is the worst single observer's (μ_a); ``observers`` lists each.
    """
    if not (aggregator_variance > 0 and math.isfinite(aggregator_variance)):
        raise ValueError(f"aggregator variance must be positive, got {aggregator_variance}")
    eps, order = skellam_epsilon(aggregator_variance, l1, l2, delta)
    eps_public, order_public = skellam_epsilon(2.0 * aggregator_variance, l1, l2, delta)
    scale_txt = words.scale_words()
    observers = {
        "analyzer": {"central_epsilon": eps, "central_delta": delta,
                     "protected_by": "the shuffler's noise", "skellam_mu": aggregator_variance},
        "shuffler": {"central_epsilon": eps, "central_delta": delta,
                     "protected_by": "the analyzer's noise", "skellam_mu": aggregator_variance},
        "public": {"central_epsilon": eps_public, "central_delta": delta,
                   "protected_by": "both aggregators' noise",
                   "skellam_mu": 2.0 * aggregator_variance},
    }
    return _skellam_ledger(
        eps, order, aggregator_variance, l1, l2, delta,
        accounting=(
            f"distributed DP (Skellam), noise added by the aggregators: devices send their "
            f"exact rounded statistics{scale_txt}, each entry proved within its honest range; "
            f"the shuffler and the analyzer each add Skellam noise of variance "
            f"μ_a={aggregator_variance:.6g} per coordinate to their aggregate share of a batch; "
            f"{words.observers}. Each observer is covered by the noise it did not "
            f"add: the analyzer by the shuffler's (ε={eps:.4g}), the shuffler by the "
            f"analyzer's (ε={eps:.4g}), the public by both (variance 2μ_a, ε={eps_public:.4g} at "
            f"order α={order_public}); whatever devices send, no batch carries less; "
            f"replacement of one user in a batch (Δ2={l2:.6g}, Δ1={l1:.6g}), RDP by "
            f"Agarwal–Kairouz–Liu 2021 Cor. 3.6, converted to (ε, δ) by dp-accounting (best "
            f"order α={order}); no local guarantee (ldp_epsilon null): a report holds the "
            f"user's exact rounded statistics, hidden by secret sharing, not by noise; one "
            f"report per user, each in exactly one batch: parallel composition; models are "
            f"post-processing"
        ),
        noise="aggregators",
        skellam_mu=aggregator_variance,
        aggregator_variance=aggregator_variance,
        share_variance=None,
        honest_fraction=None,
        honest_shares=None,
        observers=observers,
    )


def batch_schedule_ledger(
    schedule: str, sizes: Sequence[int], ledgers: Sequence[PrivacyLedger]
) -> PrivacyLedger:
    """The task's ledger under a batch schedule, from one ``ddp_ledger`` per batch length.

    Each user's report enters exactly one batch, and each batch's sum is released once with its
    own Skellam noise: by parallel composition a user's guarantee is that of the batch it is in,
    so the task's guarantee is the worst over the batch lengths the schedule uses. The figures of
    that worst batch are the top-level fields; ``per_batch`` lists every length's."""
    if not ledgers or len(sizes) != len(ledgers):
        raise ValueError("need one ledger per batch length, and at least one")
    worst = max(ledgers, key=lambda lg: lg.central_epsilon or 0.0)
    per_batch = [
        {
            "batch_size": int(size),
            "central_epsilon": lg.central_epsilon,
            "central_delta": lg.central_delta,
            "skellam_mu": None if mech is None else mech.skellam_mu,
            "share_variance": None if mech is None else mech.share_variance,
            "honest_shares": None if mech is None else mech.honest_shares,
        }
        for size, lg in zip(sizes, ledgers, strict=True)
        for mech in [lg.mechanism if isinstance(lg.mechanism, SkellamSums) else None]
    ]
    return worst.model_copy(update={
        "per_batch": per_batch,
        "batch_schedule": schedule,
        "worst_batch_epsilon": worst.central_epsilon,
        "accounting": (
            f"batch schedule {schedule}: every batch's noise is sized for its own length, so "
            f"each batch is central (ε, δ)-DP on its own (per_batch); one report per user, in "
            f"exactly one batch: parallel composition, the guarantee is the worst batch's. "
            f"Worst batch: {worst.accounting}"
        ),
    })
