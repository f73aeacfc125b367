"""ε0*(l) of the packaged sblb schedules, computed once (``shuffle_schedule.max_eps0``).

Under the ``secure-sum`` accountant one ε0*(l) takes a search of 8–12 evaluations of the sum-only
worst-case PLD, each O(l) pmf convolutions: the eight lengths of sblb's practical schedule
(``geometric:1000,1.25,4096`` at d = 5, m = 4) took 95 s of wall time on the shared machine
(31 s of CPU). Every process that builds the policy needs them — the analyzer (debiasing and
the ledger), each device (one randomizer per length), the demo's simulator reference — so the
answers for the packaged tasks are kept here and ``max_eps0`` returns them without a search.

Nothing here is trusted blindly: ``tests/shared/core/test_sblb_mixed_batches.py``
(``test_every_tabulated_eps0_is_admissible_and_maximal``) re-runs the accountant on every entry
and checks it is admissible (central ε at the entry ≤ the target: the guarantee) and maximal to
``EPS0_TOL`` (central ε at entry + ``EPS0_TOL`` above the target: the answer the search gives).
``python -m shared.core.accounting.eps0_table`` prints the entries
again from the search, to paste here when a packaged schedule changes.
"""

from __future__ import annotations

from privbandit.shared.core.accounting.ledger import Aggregation

# (central ε target, δ, d, m, aggregation) → {batch length l: ε0*(l)}, as ``max_eps0`` finds them.
Key = tuple[float, float, int, int, Aggregation]

TABLE: dict[Key, dict[int, float]] = {
    # demo-shuffle (sblb over the secure sum at practical.SBLB): geometric:1000,1.25,4096.
    (1.0, 1e-6, 5, 4, "secure-sum"): {
        1000: 64.64129786657392,
        1250: 71.8189917073891,
        1562: 79.67448269435583,
        1953: 88.27334265441745,
        2441: 97.60361864079948,
        3051: 107.69652289207713,
        3814: 118.56161183619153,
        4096: 122.1946827134059,
    },
}


def lookup(target_eps: float, l: int, delta: float, d: int, m: int,
           aggregation: Aggregation) -> float | None:
    """The tabulated ε0*(l), or None if these parameters are not tabulated."""
    return TABLE.get((target_eps, delta, d, m, aggregation), {}).get(l)


def main() -> None:  # pragma: no cover - a maintenance command
    """Print every tabulated entry as the search finds it now (without the table)."""
    from privbandit.shared.core.accounting import shuffle_schedule

    for key, entries in TABLE.items():
        target, delta, d, m, aggregation = key
        print(key)
        for l in sorted(entries):
            eps0 = shuffle_schedule.search_eps0(
                target, l, delta, d, m, aggregation)
            print(f"        {l}: {eps0!r},", flush=True)


if __name__ == "__main__":  # pragma: no cover
    main()
