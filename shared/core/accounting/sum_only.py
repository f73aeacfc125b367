"""Central guarantee of the ``secure-sum`` shuffle transport: the analyzer sees only batch sums.

Spec §3: with ``secure-sum`` the shuffler forwards one encrypted batch sum and the analyzer
decrypts only (Z, U), the per-coordinate counts of the randomised bits of Garcelon et al. Alg. 2-3.

Model. One report holds n_bits = m·d(d+3)/2 bits. Each bit b goes through R_p^{0/1} (Alg. 3):
kept with probability 1 - p, replaced by a fair coin with probability p, where
p = 2/(exp(2ε0/(m d(d+3))) + 1); one randomised bit is ε_bit-LDP with
ε_bit = log((1 - p/2)/(p/2)) = 2ε0/(m d(d+3)), and the n_bits bits of a report compose to ε0.
All bits are randomised independently, so the released per-bit counts of a batch of l reports are
independent across bit positions, and the user's guarantee is the composition over the n_bits
positions of the guarantee of one count. (The analyzer actually receives, per coordinate, the sum
over the m bit positions; releasing each bit position's count separately is more informative, so
composing over all n_bits counts is an upper bound. For m = 1 the two coincide.)

One count. The target user's randomised bit is Bern(p/2) when its bit is 0 and Bern(1 - p/2) when
it is 1 (replace-one neighbours; the worst case flips the bit). Another user whose bit is 0
contributes Bern(p/2), one whose bit is 1 contributes Bern(1 - p/2). If a of the other l - 1 users
hold 0, the others' count is

    X_a = Bin(a, p/2) + (l - 1 - a) - Bin(l - 1 - a, p/2),

and the released count is X_a + own. With f_a the pmf of X_a,

    P_a(k) = (1 - p/2) f_a(k) + (p/2) f_a(k - 1)     (own bit 0),
    Q_a(k) = (p/2) f_a(k) + (1 - p/2) f_a(k - 1)     (own bit 1),

and the hockey-stick divergence δ_a(ε) = Σ_k max(0, P_a(k) - e^ε Q_a(k)) (and the reverse order).

Methods (``method=``):

- ``"worst-case"`` (default, sound): the privacy profile of one count is the upper envelope
  δ*(ε) = max_a max(δ_a(P‖Q), δ_a(Q‖P)) over every dataset of the other users. Each δ_a is convex
  and non-increasing in e^ε with δ_a ≥ (1 - e^ε)_+, so the envelope is the profile of a pair that
  dominates every (P_a, Q_a) (Zhu, Dong, Wang, AISTATS 2022); its PLD is built with dp-accounting's
  pessimistic connect-the-dots construction (Doroshenko et al. 2022) on a grid covering the whole
  loss range [-ε_bit, ε_bit], and self-composed n_bits times. Because other users' bits may differ
  from one bit position to the next, a single dominating pair is what makes the composition
  sound. Past a few thousand reports the envelope is bounded over blocks of datasets
  (``sum_only_worst_case``): at most the exact envelope of a slightly smaller batch. The PLD and its
  composition are ``pld``'s (dp-accounting's construction, without importing it).
- ``"all-equal"``: the computation as first specified for this module: others' non-blanket bits
  all 0, so X = Bin(l - 1, p/2) (the mixture over the blanket size N ~ Bin(l - 1, p) of
  Bin(N, 1/2)); PLD from ``from_two_probability_mass_functions`` on the exact pmfs, self-composed.
  This is the exact figure for that one dataset but NOT a worst case: e.g. at l = 20, ε_bit = 0.5,
  ε = 0.2 one 0-holder among 1-holders (a = 1) gives δ = 2.60e-3 > 2.46e-3 at a = 0. Kept for
  comparison; numerically it is within ~1e-3 of ``"worst-case"`` at the spec's parameters.
- ``"blanket"``: the privacy-blanket bound (Balle, Bell, Gascón, Nissim, CRYPTO 2019): reveal to
  the adversary which other users were randomised (N ~ Bin(l - 1, p) of them) and the others'
  bits; the count is then own + Bin(N, 1/2) + a known shift, so the pair ((N, k) under own 0,
  (N, k) under own 1) dominates every dataset. Sound but looser (the blanket noise variance is
  N/4 instead of ≈ (l - 1)(p/2)(1 - p/2)).

Truncation: binomial pmfs are cut where Bernstein's inequality bounds each tail by 1e-18; the
mass cut off, which bounds its contribution to any hockey-stick divergence, is added to δ.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

from privbandit.shared.core.accounting.binomial import truncated_binomial
from privbandit.shared.core.accounting.garcelon import randomizer_probability
from privbandit.shared.core.accounting.memo import remembered
from privbandit.shared.core.accounting.pld import GridPLD, connect_the_dots
from privbandit.shared.core.accounting.search import (
    largest_at_most,
    smallest_satisfying,
)
from privbandit.shared.core.accounting.shuffle import shuffle_epsilon
from privbandit.shared.core.accounting.sum_only_worst_case import (
    block_size,
    released_pair,
    worst_case_profile,
)

if TYPE_CHECKING:  # imported where used: dp-accounting loads scipy.signal (seconds of start-up)
    from dp_accounting.pld import privacy_loss_distribution as pld_lib


class PLD(Protocol):
    """What the ledger asks of a privacy-loss distribution (``pld.GridPLD`` for "worst-case",
    dp-accounting's for the comparison methods)."""

    def self_compose(self, times: int) -> PLD: ...

    def get_delta_for_epsilon(self, epsilon: float) -> float: ...

    def get_epsilon_for_delta(self, delta: float) -> float: ...


Method = Literal["worst-case", "all-equal", "blanket"]

# Privacy-loss grid of the connect-the-dots PLD ("worst-case"). Connect-the-dots is exact at the
# grid points and pessimistic between them; 5e-4 moves the composed ε at the spec's parameters by
# < 1e-4 compared with 1e-4, at a fraction of the cost.
DISCRETIZATION = 5e-4
# Rounding interval of `from_two_probability_mass_functions` ("all-equal", "blanket"): losses are
# rounded up to this grid, which can add up to n_bits · interval to the composed ε.
PMF_DISCRETIZATION = 1e-4
# Tail mass cut from each binomial (each side); added back to δ.
TAIL_MASS = 1e-18
# Largest batch considered by `sum_only_min_batch`.
MAX_BATCH_SIZE = 100_000


def n_bits(d: int, m: int) -> int:
    """Number of randomised bits per report: m · d(d+3)/2 (Garcelon Alg. 2)."""
    if d < 1 or m < 1:
        raise ValueError(f"d and m must be at least 1, got d={d}, m={m}")
    return m * d * (d + 3) // 2


def bit_epsilon(eps0: float, d: int, m: int) -> float:
    """ε_bit = log((1 - p/2)/(p/2)) = 2ε0/(m d(d+3)), the LDP level of one randomised bit."""
    return 2.0 * eps0 / (m * d * (d + 3))


def _flip_probability(eps_bit: float) -> float:
    """p with (1 - p/2)/(p/2) = e^{ε_bit}: p = 2/(e^{ε_bit} + 1)."""
    return 2.0 * math.exp(-eps_bit) / (1.0 + math.exp(-eps_bit))


def _truncated_binom(trials: int, prob: float) -> tuple[int, np.ndarray, float]:
    """(offset, pmf from offset on, mass cut off) of Bin(trials, prob) in a Bernstein window."""
    return truncated_binomial(trials, prob, TAIL_MASS)


def _worst_case_profile(eps_bit: float, l: int, eps_grid: np.ndarray) -> np.ndarray:
    """max over the other users' data (a = number of 0-holders) of δ_a(ε), both orderings
    (``sum_only_worst_case``: exact, or bounded by blocks of a past a few thousand reports)."""
    return worst_case_profile(_flip_probability(eps_bit), l, eps_grid)


def _connect_dots_pld(profile: np.ndarray, rounded: np.ndarray) -> GridPLD:
    return connect_the_dots(DISCRETIZATION, rounded, profile)


def _loss_grid(eps_bit: float) -> tuple[np.ndarray, np.ndarray]:
    """Integer grid (units of DISCRETIZATION) covering [-ε_bit, ε_bit], and the ε values."""
    lo = math.floor(-eps_bit / DISCRETIZATION) - 1
    hi = math.ceil(eps_bit / DISCRETIZATION) + 1
    rounded = np.arange(lo, hi + 1)
    return rounded, rounded * DISCRETIZATION


def _log_pmf_dict(mass: np.ndarray, keys: list[object]) -> dict[object, float]:
    with np.errstate(divide="ignore"):
        logs = np.log(mass)
    return {k: float(v) for k, v in zip(keys, logs, strict=True) if v > -math.inf}


def bit_pld(eps_bit: float, l: int, method: Method = "worst-case") -> PLD:
    """PLD of one released count (one bit position) in a batch of ``l`` reports (pessimistic)."""
    if not (eps_bit > 0 and math.isfinite(eps_bit)):
        raise ValueError(f"eps_bit must be positive and finite, got {eps_bit}")
    if l < 1:
        raise ValueError(f"batch size must be at least 1, got {l}")
    p = _flip_probability(eps_bit)
    if method == "worst-case":
        rounded, grid = _loss_grid(eps_bit)
        return _connect_dots_pld(_worst_case_profile(eps_bit, l, grid), rounded)
    if method == "all-equal":
        off, f, cut = _truncated_binom(l - 1, 0.5 * p)
        big_p, big_q = released_pair(f, p)
        keys: list[object] = list(range(off, off + len(big_p)))
        return _pmf_pld(_log_pmf_dict(big_q, keys), _log_pmf_dict(big_p, keys), cut)
    if method == "blanket":
        off_n, w, cut_n = _truncated_binom(l - 1, p)
        upper_d: dict[object, float] = {}
        lower_d: dict[object, float] = {}
        for i, weight in enumerate(w):
            n = off_n + i
            off, f, cut = _truncated_binom(n, 0.5)
            big_p, big_q = released_pair(f, p)
            keys = [(n, off + k) for k in range(len(big_p))]
            upper_d.update(_log_pmf_dict(weight * big_p, keys))
            lower_d.update(_log_pmf_dict(weight * big_q, keys))
            cut_n += weight * cut
        return _pmf_pld(lower_d, upper_d, cut_n)
    raise ValueError(f"unknown method {method!r}")


def _pmf_pld(
    lower: dict[object, float], upper: dict[object, float], cut: float
) -> pld_lib.PrivacyLossDistribution:
    """PLD of two log-pmfs (pessimistic). Truncated tail mass ``cut`` becomes an outcome under
    the upper measure only — infinite loss — which is how it is added to δ."""
    if cut > 0.0:
        upper = {**upper, "cut": math.log(cut)}
        lower = {**lower, "cut_lower": math.log(cut)}
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    return pld_lib.from_two_probability_mass_functions(
        lower,
        upper,
        pessimistic_estimate=True,
        value_discretization_interval=PMF_DISCRETIZATION,
        symmetric=False,
    )


def _check(eps0: float, l: int, delta: float | None = None) -> None:
    if not (eps0 > 0 and math.isfinite(eps0)):
        raise ValueError(f"eps0 must be a positive finite number, got {eps0}")
    if l < 1:
        raise ValueError(f"batch size must be at least 1, got {l}")
    if delta is not None and not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")


def composed_pld(eps0: float, l: int, d: int, m: int, method: Method = "worst-case") -> PLD:
    """PLD of all m·d(d+3)/2 released counts of one user: the per-bit PLD self-composed."""
    _check(eps0, l)
    count = n_bits(d, m)
    single = bit_pld(bit_epsilon(eps0, d, m), l, method)
    return single if count == 1 else single.self_compose(count)


def sum_only_delta(
    eps: float, eps0: float, l: int, d: int, m: int, method: Method = "worst-case"
) -> float:
    """δ(ε) of the released batch sums for one user (pessimistic PLD estimate)."""
    return float(composed_pld(eps0, l, d, m, method).get_delta_for_epsilon(eps))


def sum_only_epsilon(
    eps0: float, l: int, delta: float, d: int, m: int, method: Method = "worst-case"
) -> float:
    """Smallest ε with the released batch sums (ε, δ)-DP for one user, capped at ε0.

    The cap is sound: the sums are a post-processing of ε0-LDP reports.

    A pure function of its arguments (one worst-case PLD composed by FFT: 0.1–0.3 s, and the
    first one in a process imports dp-accounting) that the analyzer, every device and the demo
    ask at the same arguments: remembered across processes under ``PRIVBANDIT_ACCOUNTING_CACHE``
    (``memo``).
    """
    _check(eps0, l, delta)

    def compute() -> float:
        eps = float(composed_pld(eps0, l, d, m, method).get_epsilon_for_delta(delta))
        return min(eps, eps0)

    key = (float(eps0), int(l), float(delta), int(d), int(m), str(method))
    return remembered("sum_only_epsilon", key, compute)


def sum_only_max_eps0(
    target_eps: float,
    l: int,
    delta: float,
    d: int,
    m: int,
    method: Method = "worst-case",
    *,
    tol: float = 1e-3,
) -> float:
    """Largest ε0 (to ``tol``, rounded down) with ``sum_only_epsilon(ε0, l, δ) ≤ target_eps``.

    Doubling then regula falsi on ε0 (``search.largest_at_most``); the answer is always
    admissible (the lower end is kept).
    """
    if not target_eps > 0:
        raise ValueError(f"target_eps must be positive, got {target_eps}")
    _check(target_eps, l, delta)

    def central(e0: float) -> float:
        return sum_only_epsilon(e0, l, delta, d, m, method)

    return largest_at_most(central, target_eps, target_eps, tol)  # ε0 ≤ target: admissible


def sum_only_min_batch(
    eps0: float,
    target_eps: float,
    delta: float,
    d: int,
    m: int,
    method: Method = "worst-case",
    *,
    max_l: int = MAX_BATCH_SIZE,
) -> int | None:
    """Smallest batch l with ``sum_only_epsilon(ε0, l, δ) ≤ target_eps``; None above ``max_l``."""
    _check(eps0, 1, delta)
    if not target_eps > 0:
        raise ValueError(f"target_eps must be positive, got {target_eps}")
    if target_eps >= eps0:
        return 1

    def ok(l: int) -> bool:
        return sum_only_epsilon(eps0, l, delta, d, m, method) <= target_eps

    return smallest_satisfying(ok, max_l)


def _blocks_note(l: int) -> str:
    """How the worst case over the others' data was taken, when not exactly."""
    size = block_size(l)
    if size == 1:
        return ""
    return (f" (bounded over blocks of {size} datasets: at most the exact worst case of a batch "
            f"of {l - size + 1})")


def secure_sum_central(
    eps0: float, batch_size: int, delta: float, d: int, m: int
) -> tuple[float, str]:
    """Central ε of the ``secure-sum`` shuffle transport (spec §3), and how it was obtained.

    Worst-case PLD of the released batch sums (this module), composed over the m·d(d+3)/2 bit
    positions, never above the whole-report (Feldman–McMillan–Talwar) figure, of which the sums
    are a post-processing. ``ledgers.shuffle_ledger(..., aggregation="secure-sum")`` builds the
    ledger from it (ldp: ε0-LDP per report, Garcelon Prop. 4; paper: Garcelon Thm 5)."""
    _check(eps0, batch_size, delta)
    sums = sum_only_epsilon(eps0, batch_size, delta, d, m)
    reports = shuffle_epsilon(eps0, batch_size, delta)
    p = randomizer_probability(eps0, d, m)
    return min(sums, reports), (
        f"ldp: pure ε0-LDP per report (Garcelon Prop. 4); central (observer of the released "
        f"batch sums only): each of the {n_bits(d, m)} bit counts is randomized response "
        f"(p={p:.4g}) hidden among the other {batch_size - 1} users' randomised bits, "
        f"worst case over their data{_blocks_note(batch_size)}, privacy-loss distribution "
        f"(connect-the-dots, Doroshenko et al. 2022) composed over the bit counts, at "
        f"δ={delta:g}; capped by the "
        f"whole-report shuffling bound ({reports:.4g}); one report per user, each report in "
        f"exactly one batch: parallel composition; later batches and broadcasts are "
        f"post-processing of published models. central_epsilon_paper: Garcelon et al. Thm 5 "
        f"(Eq. 3, δ0 = δ/2)"
    )
