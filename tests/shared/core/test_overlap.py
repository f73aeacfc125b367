"""The overlap diagnostic (``shared.core.overlap``) is its definition, tells a deterministic
log, and makes IPS and SNIPS refuse where the evaluated policy leaves the log's support."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.shared.core.ope import evaluate_distribution
from privbandit.shared.core.overlap import overlap


def test_the_diagnostic_is_its_definition() -> None:
    rng = np.random.default_rng(0)
    n, K = 500, 4
    pi_b = rng.dirichlet(np.ones(K), n)
    a = np.array([rng.choice(K, p=row) for row in pi_b])
    p = pi_b[np.arange(n), a]
    pi_e = rng.dirichlet(np.ones(K), n)
    w = pi_e[np.arange(n), a] / p
    o = overlap(a, p, pi_e, pi_b)
    assert np.isclose(o.ess, w.sum() ** 2 / (w ** 2).sum())
    assert np.isclose(o.max_weight, w.max())
    assert o.unsupported == 0 and o.unsupported_exact and not o.deterministic_log
    # A uniform log and a deterministic target: w = K on the 1/K of rounds where they agree,
    # so ESS = (Σw)²/Σw² = (mK)²/(mK²) = m, the matched rounds.
    target = np.zeros((n, K))
    target[:, 0] = 1
    o = overlap(a, np.full(n, 1 / K), target)
    assert np.isclose(o.ess, float((a == 0).sum())) and o.max_weight == K


def test_the_unsupported_share_is_exact_with_pi_b_and_a_bound_without() -> None:
    n = 4
    pi_b = np.array([[0.5, 0.5, 0], [1, 0, 0], [0.2, 0.3, 0.5], [0, 0, 1]])
    a = np.array([0, 0, 2, 2])
    p = pi_b[np.arange(n), a]
    pi_e = np.array([[0, 0, 1], [0.5, 0.5, 0], [1, 0, 0], [0.25, 0.25, 0.5]])
    exact = overlap(a, p, pi_e, pi_b)
    # Round 0: mass 1 on action 2 (π_0 = 0); round 1: 0.5 on action 1; round 3: 0.5 on 0 and 1.
    assert exact.unsupported == pytest.approx((1 + 0.5 + 0 + 0.5) / 4)
    bound = overlap(a, p, pi_e)
    # Without pi_b only the pscore-1 rounds (1 and 3) tell: (1 − 0.5) + (1 − 0.5).
    assert bound.unsupported == pytest.approx((0.5 + 0.5) / 4)
    assert not bound.unsupported_exact and bound.unsupported <= exact.unsupported


def test_a_greedy_log_refuses_ips_and_snips_and_warns_on_dr() -> None:
    """The issue's case: every propensity 1. An evaluated policy that agrees with the log on a
    third of the rounds has two thirds of its choices unsupported."""
    rng = np.random.default_rng(1)
    n, K = 900, 3
    a = rng.integers(0, K, n)
    r = rng.random(n)
    pi_e = np.zeros((n, K))
    pi_e[np.arange(n), np.arange(n) % K] = 1
    ev = evaluate_distribution(r, a, np.ones(n), pi_e, np.zeros((n, K)))
    agree = float((a == np.arange(n) % K).mean())
    assert ev.overlap.deterministic_log and ev.overlap.unsupported_exact
    assert ev.overlap.unsupported == pytest.approx(1 - agree)
    assert set(ev.refused) == {"ips", "snips"} and "never takes" in ev.refused["ips"]
    assert set(ev) == {"dr"} and "reward model alone" in ev.warnings["dr"][0]
    # The same log evaluated at the logging policy itself is on-policy: nothing refused.
    own = np.zeros((n, K))
    own[np.arange(n), a] = 1
    ev = evaluate_distribution(r, a, np.ones(n), own, np.zeros((n, K)))
    assert ev.refused == {} and ev.overlap.unsupported == 0
    assert ev["ips"].value == pytest.approx(r.mean())
    assert ev["ips"].estimand.startswith("frozen value")


def test_few_effective_rounds_are_a_warning() -> None:
    n, K = 400, 20
    a = np.arange(n) % K
    pi_e = np.zeros((n, K))
    pi_e[:, 0] = 1
    o = overlap(a, np.full(n, 1 / K), pi_e)
    assert o.ess == pytest.approx(20) and o.refusal is None
    assert any("effective sample size 20.0" in w for w in o.warnings)
