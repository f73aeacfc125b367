"""The audits of the shipped mechanisms (shared.core.audit.pairs, run): the pairs attain the
calibrated sensitivities, every honest claim survives its audit, the single-pair mechanisms are
audited tightly (ε_lo ≥ claimed/2), and one planted calibration bug per family is caught
(ε_lo > claimed). Sizes are the smallest that keep a margin over the seeds tried (0–2): the
statistical tolerance is the bound's own confidence, 0.95, at a fixed seed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.shared.core.audit.pairs import mechanisms
from privbandit.shared.core.audit.run import audit, names


def one(name: str, samples: int, plant: bool = False, seed: int = 0):  # type: ignore[no-untyped-def]
    return audit(name, samples=samples, seed=seed, plant=plant)[0]


@pytest.mark.parametrize("name", ["ldp-linucb/plain", "ldp-linucb/frobenius",
                                  "ldp-linucb/centered", "ldp-linucb/centered-upper",
                                  "ddp-linucb/frobenius/public"])
def test_exact_pairs_attain_the_sensitivity(name: str) -> None:
    """The search finds a pair at the calibrated Δ (the joint bounds are exact) to 1e-4."""
    mech = mechanisms()[name](False)
    assert mech.attained is not None
    assert 1 - 1e-4 <= mech.attained <= 1 + 1e-9


def test_loose_pairs_are_said_to_be() -> None:
    """ldp-glb's Δ is within 2% of attained (the tests of glb.py find the same); ddp's upper
    encoding adds the parts' sups: √(4.5/6) of it at L = w = 1."""
    glb = mechanisms()["ldp-glb"](False)
    assert glb.attained is not None and 0.98 <= glb.attained < 1
    upper = mechanisms()["ddp-linucb/upper/public"](False)
    assert upper.attained == pytest.approx(math.sqrt(4.5 / 6), abs=1e-4)
    assert not glb.tight and not upper.tight


@pytest.mark.parametrize(("name", "cos"), [("ldp-linucb/privunit/plain", 0.0),
                                         ("ldp-linucb/privunit/centered", -2 / 7)])
def test_privunit_claim_and_pair(name: str, cos: float) -> None:
    """PrivUnit2's claim is the shipped calibration's exact ε (★), the ledger's; the pair is two
    inputs at the full report radius (no sign dilution) at the widest angle the report vectors
    allow: 90° for plain, arccos(−2/7) for the centered report (w = 2, c = 1/√2: the Gram
    parts' overlap ⟨x, x'⟩² − c⁴ against the reward parts' −⟨x, x'⟩, least at ⟨x, x'⟩ = ½)."""
    from privbandit.shared.core.audit.pairs import privunit_pair
    from privbandit.shared.core.policies import practical
    from privbandit.shared.core.policies.registry import make_config, randomizer_for
    from privbandit.shared.core.randomizers.privunit import privunit_epsilon

    mech = mechanisms()[name](False)
    assert mech.family == "privunit" and mech.delta == 0.0 and mech.tight
    intercept = {"intercept": 1 / math.sqrt(2)} if name.endswith("centered") else {}
    rand = randomizer_for(make_config("ldp-linucb", d=3, epsilon=1.0, **practical.LDP_LINUCB,
                                      **intercept))
    gamma, p, _ = rand.parameters
    assert mech.claimed_epsilon == privunit_epsilon(rand.D, gamma, p) == pytest.approx(1.0)
    (x0, y0), (x1, y1), found = privunit_pair(rand)
    clean = rand._clean(np.stack([x0, x1]), np.array([y0, y1]))[:, rand.free]
    assert np.allclose(np.linalg.norm(clean, axis=1), rand.radius, rtol=1e-9)
    assert found == pytest.approx(cos, abs=1e-4)


def test_the_audit_picks_the_mechanism_the_config_names() -> None:
    """``ldp_report`` audits the randomizer a config builds: the same task config with
    ``mechanism`` gaussian or privunit gives the Gaussian row (its (ε, δ)) or PrivUnit2's (pure
    ε), at the config's d and encoding; ``audit_task`` refuses other policies."""
    from privbandit.shared.core.audit.pairs import ldp_report
    from privbandit.shared.core.audit.run import audit_task
    from privbandit.shared.core.policies.registry import make_config

    base = {"d": 4, "epsilon": 2.0, "delta": 1e-5, "encoding": "frobenius"}
    gauss = ldp_report(make_config("ldp-linucb", **base, mechanism="gaussian"))
    unit = ldp_report(make_config("ldp-linucb", **base, mechanism="privunit"))
    assert (gauss.name, gauss.family, gauss.delta) == ("ldp-linucb/frobenius", "gaussian", 1e-5)
    assert (unit.name, unit.family, unit.delta) == ("ldp-linucb/privunit/frobenius", "privunit",
                                                    0.0)
    assert gauss.claimed_epsilon == 2.0 and unit.claimed_epsilon == pytest.approx(2.0, rel=1e-9)
    row = audit_task(make_config("ldp-linucb", **base, mechanism="privunit"), samples=4000)
    assert row.mechanism == unit.name and 0 < row.audited_epsilon_lower <= 2.0
    with pytest.raises(ValueError, match="ldp-linucb tasks"):
        audit_task(make_config("sblb", d=2))


def test_every_honest_claim_survives() -> None:
    """``all`` at 4000 samples a side: every row has ε_lo ≤ claimed ε, and the fields the JSON
    promises."""
    rows = audit("all", samples=4000, seed=0)
    assert [r.mechanism for r in rows] == names()
    for r in rows:
        assert 0 <= r.audited_epsilon_lower <= r.claimed_epsilon, r
        row = r.to_dict()
        for key in ("mechanism", "claimed_epsilon", "delta", "audited_epsilon_lower", "samples",
                    "confidence"):
            assert key in row
        assert r.planted is None and r.note


@pytest.mark.parametrize(("name", "samples"), [
    ("sblb/bit", 20_000), ("heldp-ucb-l@2", 20_000), ("heldp-ucb-b@2", 20_000),
    ("heldp-ucb-b@0.5", 20_000), ("ldp-mab", 2_000_000),
    # PrivUnit2 (pure ε: the ratio e^ε holds exactly on cap(û₁) ∖ cap(û₀)): 0.77–0.97 here
    ("ldp-linucb/privunit/plain", 20_000), ("ldp-linucb/privunit/centered", 20_000),
])
def test_single_pair_mechanisms_are_audited_tightly(name: str, samples: int) -> None:
    """Randomised response and the Laplace/Gaussian value at a fixed pair: ε_lo reaches half
    the claim (the Gaussian needs 2·10⁶ samples: its claim is at δ = 10⁻⁶, a finite sample
    measures rates near 1/N)."""
    r = one(name, samples)
    assert r.tight
    assert r.claimed_epsilon / 2 <= r.audited_epsilon_lower <= r.claimed_epsilon


@pytest.mark.slow
def test_gaussian_report_is_audited_tightly() -> None:
    """ldp-linucb's plain report at 10⁶ samples: ε_lo ≥ claimed/2 (0.58–0.63 over seeds 0–2)."""
    r = one("ldp-linucb/plain", 1_000_000)
    assert 0.5 <= r.audited_epsilon_lower <= r.claimed_epsilon


# -- a planted bug per family ----------------------------------------------------------------

@pytest.mark.parametrize(("name", "samples"), [
    # gaussian: σ for one coordinate's sensitivity L² instead of Δ = 3.6 (ldp-glb); σ for
    # B = ½ instead of 2B = 1, half the noise (ldp-mab)
    ("ldp-glb", 100_000), ("ldp-mab", 1_000_000),
    # binary: the flip probability of 4 ε0
    ("sblb/report", 20_000), ("sblb/bit", 20_000), ("sblb/batch-sum-l2", 20_000),
    # skellam: the aggregators' noise of a task at ε = 3 (a ninth of μ_a), as the analyzer and
    # the public see it; the devices' design: shares sized for an 8 times longer batch
    ("ddp-linucb/frobenius/analyzer", 100_000), ("ddp-linucb/frobenius/public", 100_000),
    ("ddp-linucb/frobenius/devices", 100_000),
    # privunit: the cap and its probability calibrated for 3 ε (2.2–2.8 over seeds 0–2)
    ("ldp-linucb/privunit/plain", 20_000), ("ldp-linucb/privunit/centered", 20_000),
    # heldp: noise of level 3 ε_t on a report stating ε_t
    ("heldp-ucb-l@0.5", 20_000), ("heldp-ucb-b@0.5", 20_000),
    # central: AdaR-UCB and AdaR-OFUL with the noise of RDP ε = 16 under the claim ε = 1 (σ/4)
    ("adar-ucb", 20_000), ("adar-oful", 10_000),
])
def test_planted_bug_is_caught(name: str, samples: int) -> None:
    """Every family's planted calibration bug gives ε_lo above the honest claim: an auditor
    that cannot fire fails here."""
    r = one(name, samples, plant=True)
    assert r.planted
    assert r.audited_epsilon_lower > r.claimed_epsilon


def test_unknown_mechanism_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown mechanism"):
        audit("nope")
