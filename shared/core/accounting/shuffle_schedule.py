"""ε0 that follows a batch schedule in the shuffle model (SBLB, issue 22), and its ledger.

The guarantee a task states for ``sblb`` is a central (ε, δ) against an observer of what the
shuffler releases. A report of an ε0-LDP randomizer hidden among l − 1 others is amplified to a
central ε that falls as l grows, so a larger batch allows a larger ε0 at the same central ε:

    ε0*(l) = max{ ε0 : central(ε0, l, δ) ≤ ε_target },

with ``central`` the accountant of the task's aggregation:

- ``reports`` (whole shuffled reports): Feldman–McMillan–Talwar Thm 3.2 (``accounting.shuffle``);
- ``secure-sum`` (only the batch sums): min(sum-only worst-case PLD bound, FMT bound)
  (``accounting.sum_only.secure_sum_central``; the sums are a post-processing of the reports).

Monotonicity in l (what makes a schedule sound). For a fixed dataset of the other users, the
released statistic of a batch of l + 1 is that of l plus one more user's independent report (or
its counts): a post-processing by independent noise, so its hockey-stick divergence at every ε is
at most the smaller batch's; the worst case over the others' data is a supremum over supersets,
so it is non-increasing too. Hence a report whose ε0 was sized for length l_k and which lands in
a batch of length l ≥ l_k is amplified at least as much as needed — and batches only grow
(``core.schedule``), so a report sized from the model it decided with never falls short.

Cost. The sum-only accountant's exact worst case over the others' data takes O(l) pmf
convolutions per evaluation (≈ 0.25 s at l = 4096; past l ≈ 5,600 it is bounded by blocks,
``sum_only_worst_case``): ε0 is sized for min(l, ``SECURE_SUM_ACCOUNTED_MAX``), where it is exact,
and, by the monotonicity above, the figure it certifies holds for every longer batch (the ledger
says so).
The FMT bound is O(√l) and is evaluated at the true length.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger
from privbandit.shared.core.accounting.search import illinois
from privbandit.shared.core.accounting.shuffle import shuffle_epsilon, shuffle_max_eps0
from privbandit.shared.core.accounting.sum_only import sum_only_epsilon

# Longest batch the sum-only accountant is run at (longer ones reuse its figure, which is an upper
# bound for them: module docstring). At d = 5, ε = 1 the ε0 it allows changes the per-report
# variance by < 10 % beyond this length (the 1/4 rounding floor of Alg. 2 dominates).
SECURE_SUM_ACCOUNTED_MAX = 4096
# Width of the final ε0 bracket; its admissible (lower) end is returned.
EPS0_TOL = 0.01
# Upper end of the ε0 search's doubling: the search stops growing its bracket here (the answer
# is then the cap, or lies below it). A search that starts above it — from a shorter batch's
# answer or the whole-report (FMT) one, both admissible — may still return more: at d = 20 and
# ε = 4 the growing batches' ε0 reach ≈ 1,460 (``digits``, docs/benchmarks/yardstick.md).
EPS0_CAP = 1e3


def accounted_length(l: int, aggregation: Aggregation) -> int:
    """The batch length the accountant is run at for a batch of ``l`` (≤ l: an upper bound)."""
    if l < 1:
        raise ValueError(f"batch size must be at least 1, got {l}")
    return min(l, SECURE_SUM_ACCOUNTED_MAX) if aggregation == "secure-sum" else l


def central_epsilon(eps0: float, l: int, delta: float, d: int, m: int,
                    aggregation: Aggregation) -> float:
    """Central ε at δ of one batch of length ``l`` of ε0-LDP reports, for the aggregation (module
    docstring); for secure-sum evaluated at ``accounted_length`` (an upper bound)."""
    if aggregation == "reports":
        return shuffle_epsilon(eps0, l, delta)
    if aggregation != "secure-sum":
        raise ValueError(f"unknown aggregation {aggregation!r}")
    reports = shuffle_epsilon(eps0, l, delta)
    return min(reports, sum_only_epsilon(eps0, accounted_length(l, aggregation), delta, d, m))


# ε0*(l) found so far, by (target, δ, d, m, aggregation): ε0* is non-decreasing in l (module
# docstring), so a shorter batch's answer is an admissible start for a longer one.
_FOUND: dict[tuple[float, float, int, int, str], dict[int, float]] = {}


@functools.lru_cache(maxsize=256)
def max_eps0(target_eps: float, l: int, delta: float, d: int, m: int,
             aggregation: Aggregation) -> float:
    """ε0*(l): the largest ε0 (to ``EPS0_TOL``, rounded down) whose batch of length ``l`` is
    central (target_eps, δ)-DP under the aggregation's accountant (``search_eps0``); the
    packaged tasks' answers come from ``eps0_table`` (each re-checked by its test)."""
    from privbandit.shared.core.accounting.eps0_table import lookup

    known = lookup(target_eps, l, delta, d, m, aggregation)
    if known is not None:
        return known
    return search_eps0(target_eps, l, delta, d, m, aggregation)


def search_eps0(target_eps: float, l: int, delta: float, d: int, m: int,
                aggregation: Aggregation) -> float:
    """ε0*(l) by search: the largest ε0 (to ``EPS0_TOL``, rounded down) whose batch of length
    ``l`` is central (target_eps, δ)-DP under the aggregation's accountant.

    ``reports``: ``shuffle.shuffle_max_eps0`` (FMT). ``secure-sum``: the FMT answer is admissible
    (the central figure is a minimum that includes it), and so is ε0* of any shorter batch; the
    largest of them starts a doubling bracket, then regula falsi (Illinois) on
    g(ε0) = central(ε0) − target until the bracket is ``EPS0_TOL`` wide; the admissible end is
    returned, so the answer always meets the target. For l = 1 nothing is amplified: ε0 = target
    (pure LDP)."""
    if not target_eps > 0:
        raise ValueError(f"target_eps must be positive, got {target_eps}")
    if aggregation not in ("reports", "secure-sum"):
        raise ValueError(f"unknown aggregation {aggregation!r}")
    start = shuffle_max_eps0(target_eps, l, delta)
    if aggregation == "reports" or l == 1:
        return start
    found = _FOUND.setdefault((target_eps, delta, d, m, aggregation), {})
    start = max([start, *(e for k, e in found.items() if k <= l)])

    def g(e0: float) -> float:
        return central_epsilon(e0, l, delta, d, m, aggregation) - target_eps

    lo, g_lo = start, -0.0  # g(start) ≤ 0 (admissible); its exact value only steers the search
    hi = 2.0 * lo
    g_hi = g(hi)
    while g_hi <= 0:
        if hi >= EPS0_CAP:
            found[l] = hi
            return hi
        lo, g_lo = hi, g_hi
        # The last doubling stops at the cap, so an ε0* between the last doubling and the cap is
        # still found (stopping at the last doubling left a target of 4 at central 2.48 on d = 20,
        # l = 1000: admissible, but not the largest ε0 the target allows).
        hi = min(2.0 * hi, EPS0_CAP)
        g_hi = g(hi)
    if g_lo == 0.0:
        g_lo = g(lo)
    # Regula falsi (Illinois) until the bracket is EPS0_TOL wide (``search.illinois``).
    lo = illinois(g, (lo, g_lo, hi, g_hi), lambda b: b[2] - b[0] <= EPS0_TOL,
                  margin=0.1 * EPS0_TOL)[0]
    found[l] = lo
    return lo


def schedule_ledger(schedule: str, sizes: Sequence[int], ledgers: Sequence[PrivacyLedger],
                    aggregation: Aggregation) -> PrivacyLedger:
    """The task's ledger under a batch schedule, from one shuffle ledger per batch length.

    Each user's report enters exactly one batch (parallel composition): a user's guarantee is the
    one of its batch, with that batch's ε0 locally and its amplified figure centrally. The top-level
    figures are the worst over the lengths the schedule uses (central: the batch with the largest
    central ε; local: the largest ε0); ``per_batch`` lists every length's."""
    if not ledgers or len(sizes) != len(ledgers):
        raise ValueError("need one ledger per batch length, and at least one")
    worst = max(ledgers, key=lambda lg: lg.central_epsilon or 0.0)
    worst_ldp = max(lg.ldp_epsilon or 0.0 for lg in ledgers)
    per_batch = [
        {
            "batch_size": int(size),
            "accounted_batch_size": accounted_length(int(size), aggregation),
            "eps0": lg.ldp_epsilon,
            "central_epsilon": lg.central_epsilon,
            "central_delta": lg.central_delta,
        }
        for size, lg in zip(sizes, ledgers, strict=True)
    ]
    capped = (" (secure-sum: batches longer than "
              f"{SECURE_SUM_ACCOUNTED_MAX} are accounted at that length, an upper bound since "
              "amplification only grows with the batch)" if aggregation == "secure-sum" else "")
    return worst.model_copy(update={
        "ldp_epsilon": worst_ldp,
        "per_batch": per_batch,
        "batch_schedule": schedule,
        "worst_batch_epsilon": worst.central_epsilon,
        "central_epsilon_paper": None,
        "accounting": (
            f"batch schedule {schedule}: each batch's reports use the ε0 announced with the model "
            f"for that batch's length (per_batch){capped}; batches only grow, and a longer batch "
            f"amplifies at least as much, so every batch meets its own figure; one report per "
            f"user, in exactly one batch: parallel composition, the guarantee is the worst "
            f"batch's (ldp_epsilon: the largest ε0). Worst batch: {worst.accounting}"
        ),
    })
