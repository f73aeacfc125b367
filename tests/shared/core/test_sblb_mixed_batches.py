"""sblb's growing schedule in the services (issue 22 items 1 and 6): a batch may mix reports sized
for its own length l_k with late ones, sized for an earlier l_b ≤ l_k (a device that decided or
reported before the model announcing l_k reached it). The invariant, shown here with exact
distributions and the accountants rather than words:

1. ε0*(l) is non-decreasing along the schedule, so a late report's flip probability p_b is at
   least the batch's p_k, and R_{p_b} = R_{p_k} ∘ R_q exactly, with (1 − p_b) = (1 − q)(1 − p_k):
   a late report IS the batch's own randomizer applied to a randomised input
   (``test_a_late_report_is_the_batch_randomizer_on_a_randomised_input``);
2. so a mixed batch is the nominal batch (every report at ε0(l_k), l_k of them) run on a
   randomised dataset, independent across users: its central guarantee is at most the nominal
   batch's worst case over datasets, which the accountant certifies ≤ the target. Checked
   exactly on one released count of the secure sum (every mix of late and on-time users, every
   dataset) against the worst case of the nominal batch
   (``test_a_mixed_batch_sum_is_as_private_as_the_nominal_batch``), and with the accountants
   for every pair of schedule lengths (``test_the_accountant_certifies_every_late_pair``);
3. the analyzer debiases the batch at p_k without knowing which report is late (the shuffler
   never forwards the stated length: labels would split the batch into smaller, less amplified
   groups); a late report's debiased statistic is then exactly (1 − p_b)/(1 − p_k) ≤ 1 times its
   true (x xᵀ, r x) in expectation — a down-weighted user of a weighted ridge regression, whose
   noise proxy (a bounded range of 1/(m(1 − p_k))) is the one the analyzer uses
   (``test_a_late_report_is_debiased_to_a_down_weighted_statistic``);
4. the model announces each new length (``test_sblb_announces_every_new_length``).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from privbandit.shared.core.accounting import eps0_table, shuffle_schedule
from privbandit.shared.core.accounting.shuffle_schedule import central_epsilon
from privbandit.shared.core.policies import build_policy, make_config
from privbandit.shared.core.policies.sblb import SBLB
from privbandit.shared.core.randomizers.binary import BinaryRandomizer, output_probability

DELTA = 1e-6
SCHEDULE = "geometric:10,2,80"


def _policy(aggregation: str, d: int = 2) -> SBLB:
    config = make_config("sblb", d=d, epsilon=1.0, batch_schedule=SCHEDULE, accountant=aggregation)
    policy = build_policy(config)
    assert isinstance(policy, SBLB)
    return policy


def _pairs(policy: SBLB) -> list[tuple[int, int]]:
    """Every (l_b, l_k) with l_b ≤ l_k among the schedule's lengths."""
    sizes = policy.schedule.distinct_sizes()
    return [(b, k) for b, k in itertools.product(sizes, sizes) if b <= k]


@pytest.mark.parametrize("aggregation", ["reports", "secure-sum"])
def test_a_late_report_is_the_batch_randomizer_on_a_randomised_input(aggregation: str) -> None:
    """Exact: for every pair of lengths and every input and output bit vector of one report
    (d = 2: 5 bits), P(R_{p_b}(b) = o) = Σ_{b'} P(R_q(b) = b') P(R_{p_k}(b') = o)."""
    policy = _policy(aggregation)
    width = policy.randomizer_for(policy.schedule.first).width
    vectors = np.array(list(itertools.product((0, 1), repeat=width)), dtype=np.uint8)
    for l_b, l_k in _pairs(policy):
        late, nominal = policy.randomizer_for(l_b), policy.randomizer_for(l_k)
        assert late.eps0 <= nominal.eps0 and late.p >= nominal.p
        q = 1 - (1 - late.p) / (1 - nominal.p)
        assert 0 <= q <= 1
        for bits in vectors:
            direct = output_probability(vectors, bits[None, :], late.p)
            pre = output_probability(vectors, bits[None, :], q)  # P(R_q(bits) = b')
            through = np.array([
                float(np.dot(pre, output_probability(np.broadcast_to(o, vectors.shape), vectors,
                                                     nominal.p)))
                for o in vectors
            ])
            np.testing.assert_allclose(direct, through, rtol=1e-12, atol=1e-15)


def _count_pmf(probs: list[float]) -> np.ndarray:
    """The pmf of a sum of independent Bernoulli(probs) (Poisson binomial), by convolution."""
    pmf = np.array([1.0])
    for prob in probs:
        pmf = np.convolve(pmf, [1 - prob, prob])
    return pmf


def _delta(P: np.ndarray, Q: np.ndarray, eps: float) -> float:
    """Hockey-stick divergence, both orders (the privacy profile of the pair at ε)."""
    return float(max(np.maximum(P - math.exp(eps) * Q, 0).sum(),
                     np.maximum(Q - math.exp(eps) * P, 0).sum()))


def _released(victim_p: float, others: list[tuple[float, int]]) -> tuple[np.ndarray, np.ndarray]:
    """One released count (one bit position of the secure sum): the victim's bit 0 vs 1 under
    R_{victim_p}, plus every other user's randomised bit (its flip probability, its bit)."""
    rest = _count_pmf([p / 2 if bit == 0 else 1 - p / 2 for p, bit in others])
    own0 = np.convolve(rest, [1 - victim_p / 2, victim_p / 2])
    own1 = np.convolve(rest, [victim_p / 2, 1 - victim_p / 2])
    return own0, own1


def test_a_mixed_batch_sum_is_as_private_as_the_nominal_batch() -> None:
    """One count of a batch of l_k = 12 (per-bit ε of ε0(12) at d = 2): for the victim on time or
    late, every number of late others and every dataset of the others' bits, the released
    count's privacy profile at several ε stays within the nominal batch's worst case over
    datasets (what ``sum_only``'s worst-case accountant composes)."""
    config = make_config("sblb", d=2, epsilon=1.0, batch_schedule="geometric:6,2,12",
                         accountant="secure-sum")
    policy = build_policy(config)
    assert isinstance(policy, SBLB)
    l_k, l_b = 12, 6
    p_k, p_b = policy.randomizer_for(l_k).p, policy.randomizer_for(l_b).p
    assert p_b > p_k  # the late ones are strictly noisier: the case to check
    eps_bit = math.log((1 - p_k / 2) / (p_k / 2))
    for eps in (0.0, 0.25 * eps_bit, 0.5 * eps_bit, 0.9 * eps_bit):
        nominal_worst = max(
            _delta(*_released(p_k, [(p_k, 0)] * a + [(p_k, 1)] * (l_k - 1 - a)), eps)
            for a in range(l_k)
        )
        for victim_p, late in itertools.product((p_k, p_b), range(l_k)):
            for zeros_late, zeros_on_time in itertools.product(range(late + 1),
                                                               range(l_k - late)):
                others = ([(p_b, 0)] * zeros_late + [(p_b, 1)] * (late - zeros_late)
                          + [(p_k, 0)] * zeros_on_time
                          + [(p_k, 1)] * (l_k - 1 - late - zeros_on_time))
                assert _delta(*_released(victim_p, others), eps) <= nominal_worst + 1e-12


@pytest.mark.parametrize("aggregation", ["reports", "secure-sum"])
def test_the_accountant_certifies_every_late_pair(aggregation: str) -> None:
    """For every l_b ≤ l_k of the schedule: the nominal batch (ε0(l_k), l_k) meets the target
    (the guarantee a mixed batch inherits, above), a whole batch of late reports (ε0(l_b), l_k)
    does too, and the ledger's worst case is the largest per-batch figure, within the target."""
    policy = _policy(aggregation)
    for l_b, l_k in _pairs(policy):
        assert central_epsilon(policy.eps0_for(l_k), l_k, DELTA, 2, 1, aggregation) <= 1.0
        assert (central_epsilon(policy.eps0_for(l_b), l_k, DELTA, 2, 1, aggregation)
                <= central_epsilon(policy.eps0_for(l_k), l_k, DELTA, 2, 1, aggregation) + 1e-12)
    ledger = policy.ledger(aggregation=aggregation)
    figures = [row["central_epsilon"] for row in ledger.per_batch or []]
    assert [row["batch_size"] for row in ledger.per_batch or []] == [10, 20, 40, 80]
    assert ledger.worst_batch_epsilon == max(figures) <= 1.0
    assert ledger.ldp_epsilon == max(row["eps0"] for row in ledger.per_batch or [])


def test_a_late_report_is_debiased_to_a_down_weighted_statistic() -> None:
    """Exact expectation: the counts of one report at p_b have mean m((1 − p_b) v + p_b/2) per
    value v (unary rounding is unbiased); the batch's estimator at p_k maps them to
    (1 − p_b)/(1 − p_k) · (x xᵀ, r x) — the offsets cancel exactly."""
    policy = _policy("secure-sum", d=3)
    rng = np.random.default_rng(20261127)
    x = rng.normal(size=3)
    x /= 2 * np.linalg.norm(x)
    r = 0.7
    from privbandit.shared.core.randomizers.binary import encode_values

    v = encode_values(x[None, :], np.array([r]), 1.0)[0]
    for l_b, l_k in _pairs(policy):
        late, nominal = policy.randomizer_for(l_b), policy.randomizer_for(l_k)
        mean_counts = late.m * ((1 - late.p) * v + late.p / 2)
        est = nominal.estimate(mean_counts, 1)
        alpha = (1 - late.p) / (1 - nominal.p)
        assert 0 < alpha <= 1
        np.testing.assert_allclose(est.G, alpha * np.outer(x, x), atol=1e-12)
        np.testing.assert_allclose(est.u, alpha * r * x, atol=1e-12)


@pytest.mark.parametrize("algo", ["sblb", "sblb-fixed"])
def test_sblb_announces_every_new_length(algo: str) -> None:
    """A model follows every batch whose successor has a new length, announcing it (the
    devices size ε0 from it); at the cap no announcement forces a model (sblb: det switching)."""
    config = make_config(algo, d=2, epsilon=1.0, batch_schedule=SCHEDULE, regularizer="noise")
    policy = build_policy(config)
    assert isinstance(policy, SBLB)
    assert policy.model.batch_size is None and policy.announced_batch_size == 10
    rng = np.random.default_rng(7)
    for size in config.schedule.sizes(10 + 20 + 40 + 80):
        randomizer = policy.randomizer
        assert randomizer.batch_size == size  # what a device states with the report
        x = rng.normal(size=(size, 2))
        x /= 2 * np.linalg.norm(x, axis=1, keepdims=True)
        version = policy.model.version
        policy.ingest(randomizer.randomize(x, rng.random(size), rng))
        if policy.batch_size != size:
            assert policy.model.version == version + 1
            assert policy.model.batch_size == policy.batch_size
    assert policy.model.batch_size == 80 == policy.batch_size


def test_a_fixed_schedule_states_no_length() -> None:
    """Fixed batches: no length on the randomizer (a report's bytes are what they were) and none
    in the model."""
    policy = build_policy(make_config("sblb", d=2, eps0=4.0, batch_size=20))
    assert isinstance(policy.randomizer, BinaryRandomizer)
    assert policy.randomizer.batch_size is None and policy.announced_batch_size is None


@pytest.mark.slow
def test_every_tabulated_eps0_is_admissible_and_maximal() -> None:
    """The packaged ε0*(l) (``eps0_table``): the accountant re-run on each entry meets the target
    (the privacy guarantee rests on this) and fails it ``EPS0_TOL`` above (the search's answer),
    and the lookup returns it."""
    for (target, delta, d, m, aggregation), entries in eps0_table.TABLE.items():
        assert aggregation in ("reports", "secure-sum")
        previous = 0.0
        for l, eps0 in sorted(entries.items()):
            assert eps0 >= previous  # non-decreasing in l
            previous = eps0
            assert central_epsilon(eps0, l, delta, d, m, aggregation) <= target  # type: ignore[arg-type]
            above = eps0 + shuffle_schedule.EPS0_TOL
            assert central_epsilon(above, l, delta, d, m, aggregation) > target  # type: ignore[arg-type]
            assert shuffle_schedule.max_eps0(target, l, delta, d, m, aggregation) == eps0  # type: ignore[arg-type]
