"""The grid PLD (shared/core/accounting/pld.py) against dp-accounting's construction of the same."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from privbandit.shared.core.accounting import sum_only
from privbandit.shared.core.accounting.pld import DIRECT_COMPOSE_MAX, GridPLD, connect_the_dots


def profiles() -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, rounded grid, δ on it): sum-only worst-case profiles, and randomized response."""
    out = []
    for eps0, l, d in ((2.0, 1000, 5), (8.0, 500, 5), (0.5, 100, 2), (6.0, 150, 2)):
        eps_bit = sum_only.bit_epsilon(eps0, d, 1)
        rounded, grid = sum_only._loss_grid(eps_bit)
        out.append((f"sum-only {eps0} {l} {d}", rounded,
                    sum_only._worst_case_profile(eps_bit, l, grid)))
    # randomized response at ε = 0.3: δ(x) = (p1 − e^x (1 − p1))_+ + ((1 − p1) − e^x p1)_+
    p1 = math.exp(0.3) / (1 + math.exp(0.3))
    rounded = np.arange(-600, 601)
    grid = rounded * sum_only.DISCRETIZATION
    out.append(("rr 0.3", rounded, np.maximum(p1 - np.exp(grid) * (1 - p1), 0.0)
                + np.maximum((1 - p1) - np.exp(grid) * p1, 0.0)))
    return out


def reference(rounded: np.ndarray, deltas: np.ndarray) -> pld_lib.PrivacyLossDistribution:
    deltas = np.minimum.accumulate(np.clip(deltas, 0.0, 1.0))
    return pld_lib.PrivacyLossDistribution(
        pld_pmf.create_pmf_pessimistic_connect_dots(sum_only.DISCRETIZATION, rounded, deltas))


@pytest.mark.parametrize(("name", "rounded", "deltas"), profiles(), ids=lambda v: str(v)[:20])
@pytest.mark.parametrize("times", [1, 2, 7, 20])
def test_same_figures_as_dp_accounting(name: str, rounded: np.ndarray, deltas: np.ndarray,
                                       times: int) -> None:
    mine = connect_the_dots(sum_only.DISCRETIZATION, rounded, deltas)
    ref = reference(rounded, deltas)
    if times > 1:
        mine = mine.self_compose(times)
        ref = ref.self_compose(times)
    assert isinstance(mine, GridPLD) or mine.__class__ is ref.__class__
    # δ(ε): dp-accounting moves tails of mass ≤ 1e-15 to +∞ when it composes (pessimistic),
    # this grid PLD convolves exactly: equal, or below by at most that mass.
    for eps in (-0.1, 0.0, 0.003, 0.01, 0.05, 0.2, 0.5, 1.0):
        got, want = mine.get_delta_for_epsilon(eps), ref.get_delta_for_epsilon(eps)
        assert want - 2e-15 <= got <= want * (1 + 1e-12) + 1e-17, (name, eps)
    for delta in (1e-3, 1e-6, 1e-9):
        got, want = mine.get_epsilon_for_delta(delta), ref.get_epsilon_for_delta(delta)
        if math.isinf(want):
            assert math.isinf(got)
        else:
            # the 1e-15 of δ at most, through the slope of δ(ε) there
            assert got == pytest.approx(want, rel=1e-6, abs=1e-9), (name, delta)
            assert got <= want + 1e-12


def test_epsilon_for_delta_inverts_delta_for_epsilon() -> None:
    rounded = np.arange(-200, 201)
    eps_bit = 0.1
    pld = connect_the_dots(5e-4, rounded, sum_only._worst_case_profile(eps_bit, 300, rounded
                                                                         * 5e-4))
    composed = pld.self_compose(20)
    assert isinstance(composed, GridPLD)
    for delta in (1e-2, 1e-5, 1e-8):
        eps = composed.get_epsilon_for_delta(delta)
        assert composed.get_delta_for_epsilon(eps) == pytest.approx(delta, rel=1e-9)
        assert composed.get_delta_for_epsilon(eps - 1e-4) > delta


def test_wide_supports_are_composed_by_dp_accounting() -> None:
    # Past DIRECT_COMPOSE_MAX composed points the direct convolution would cost seconds: the pmf
    # goes to dp-accounting's FFT composition, whose figures the old code reported.
    rounded = np.arange(-3000, 3001)
    grid = rounded * 5e-4
    deltas = sum_only._worst_case_profile(1.5, 200, grid)
    mine = connect_the_dots(5e-4, rounded, deltas)
    times = DIRECT_COMPOSE_MAX // rounded.size + 1
    composed = mine.self_compose(times)
    assert not isinstance(composed, GridPLD)
    ref = reference(rounded, deltas).self_compose(times)
    assert composed.get_epsilon_for_delta(1e-6) == ref.get_epsilon_for_delta(1e-6)
