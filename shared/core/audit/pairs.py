"""The attaining pair of every mechanism a ledger claims, run through the shipped code.

Each ``Mechanism`` holds the claimed (ε, δ) — read from the policy's own ledger or accountant
(PrivUnit2: the randomizer's own exact ε, which must equal its ledger's) — and
``sample(which, n, rng)``: n outputs of the mechanism on input D₀ (``which`` = 0) or D₁ (or a
statistic of each, post-processing: PrivUnit2's), drawn by the randomizer the task builds
(``registry.randomizer_for`` on a config) or by the policy's own release code. Nothing here
re-implements a mechanism: a planted bug (``plant=True``) is the shipped randomizer or policy
constructed with a wrong parameter — half the calibrated σ (ldp-linucb's Gaussian report),
PrivUnit2's cap and cap probability calibrated for 3 ε (its PrivUnit2 report), σ for one
coordinate's sensitivity L² (ldp-glb), σ for B = ½ instead of 2B (ldp-mab), the flip
probability of 4 ε0 (sblb), the aggregators' noise of ε = 3 (ddp-linucb; with the devices'
noise, shares sized for a batch 8 times longer), the noise of level 3 ε_t (HeLDP), the noise of
RDP ε = 16 (AdaR) — and the claim stays the honest configuration's, so the audit must find ε_lo
above it.

Pairs (D₀, D₁):

- Gaussian reports (``ldp-linucb`` in each encoding, ``ldp-glb``): the pair of contexts and
  rewards whose clean reports are farthest apart, found by a search over a grid of unit-norm
  contexts in a 2-D subspace (and of anchors θ̂ for ldp-glb) on the randomizer's own clean map;
  ``attained`` = that distance / the Δ the randomizer is calibrated to (1 for the exact joint
  bounds; below 1 for ldp-glb, whose Δ adds three sups).
- PrivUnit2 reports (``ldp-linucb`` with ``mechanism = "privunit"``, its practical default;
  ``ldp_report`` picks the Gaussian or the PrivUnit2 audit from the randomizer a config builds):
  the two inputs at the full report radius whose directions are the widest apart, the test the
  region cap(û₁) ∖ cap(û₀) where the likelihood ratio is exactly e^ε (``_privunit_report``).
- sblb (Garcelon Alg. 2–3, d = 1, m = 1): one user's report for x = +1 vs x = −1 at r = 1 (its
  ỹ bit flips; z̃ = x²/2 + ½ is the same), the one randomised bit at its per-bit ε, and the batch
  sum of l reports with the other l − 1 users fixed (the sum-only ledger's view).
- ddp-linucb: the batch sum of l users' rounded statistics with the aggregators' Skellam noise
  (as the public and as the analyzer see it) or, in the previous design, the devices' shares; the
  target's pair the farthest apart weighted statistics, the others at x = 0, r = 0.
- ldp-mab: r = 0 vs r = 1. HeLDP: s = 0 vs s = 1 at the user's level ε_t.
- AdaR-UCB: one episode's released mean of n rewards, all 0 vs one of them 1. AdaR-GOPE: one
  phase's private estimate, one reward 0 vs 1 at a support arm. AdaR-OFUL: the first episode's
  θ̃ = V⁻¹(u + Y₁) at V = λI, one reward 0 vs 1 at x = L e₁.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

Sampler = Callable[[int, int, np.random.Generator], np.ndarray]


@dataclass(frozen=True)
class Mechanism:
    """One auditable mechanism: its claim, its attaining pair's sampler, and what to expect."""

    name: str
    family: str
    claimed_epsilon: float
    delta: float
    sample: Sampler
    # True when the claim is attained by this single pair (ε_lo can approach it); else ``note``
    # says why the audit must stay below (composition, amplification, a loose bound).
    tight: bool
    note: str
    # pair distance / calibrated sensitivity, where defined (PrivUnit2: pair norm / radius r)
    attained: float | None = None
    planted: str | None = None      # the planted bug, when built with plant=True


def farthest_pair(clean: Callable[[np.ndarray, np.ndarray], np.ndarray], xs: np.ndarray,
                  rewards: tuple[float, ...] = (0.0, 1.0)
                  ) -> tuple[tuple[np.ndarray, float], tuple[np.ndarray, float], float]:
    """The two (x, r) among ``xs`` × ``rewards`` whose ``clean`` rows are farthest apart, and
    that distance (all pairwise distances by the Gram identity)."""
    n = xs.shape[0]
    X = np.concatenate([xs] * len(rewards))
    R = np.repeat(np.asarray(rewards, dtype=float), n)
    C = np.asarray(clean(X, R), dtype=float)
    sq = (C * C).sum(axis=1)
    d2 = sq[:, None] + sq[None, :] - 2.0 * C @ C.T
    i, j = np.unravel_index(int(np.argmax(d2)), d2.shape)
    return (X[i], float(R[i])), (X[j], float(R[j])), math.sqrt(max(float(d2[i, j]), 0.0))


def circle(d: int, radius: float, points: int, intercept: float | None = None) -> np.ndarray:
    """Contexts of norm ``radius`` on a grid of ``points`` angles in the plane of coordinates
    (0, 1) — or, with an intercept c, x = (c, ρ cos a, ρ sin a, 0…), ρ² = radius² − c²."""
    a = np.linspace(0.0, 2.0 * math.pi, points, endpoint=False)
    xs = np.zeros((points, d))
    if intercept is None:
        xs[:, 0], xs[:, 1] = radius * np.cos(a), radius * np.sin(a)
    else:
        rho = math.sqrt(max(radius * radius - intercept * intercept, 0.0))
        xs[:, 0], xs[:, 1], xs[:, 2] = intercept, rho * np.cos(a), rho * np.sin(a)
    return xs


def _rows(x: np.ndarray, n: int) -> np.ndarray:
    return np.repeat(np.asarray(x, dtype=float)[None, :], n, axis=0)


# -- LDP Gaussian reports ------------------------------------------------------------------------

GAUSSIAN_EPSILON, GAUSSIAN_DELTA = 1.0, 1e-6


def ldp_linucb(encoding: str, plant: bool = False) -> Mechanism:
    """``ldp-linucb``'s Gaussian report in ``encoding`` (d = 3, L = 1; the centered ones at
    c = 1/√2)."""
    from privbandit.shared.core.policies.registry import make_config
    from privbandit.shared.core.randomizers.gaussian import CENTERED

    params: dict[str, Any] = {"d": 3, "epsilon": GAUSSIAN_EPSILON, "delta": GAUSSIAN_DELTA,
                              "encoding": encoding, "mechanism": "gaussian"}
    if encoding in CENTERED:
        params["intercept"] = 1 / math.sqrt(2)
    return ldp_report(make_config("ldp-linucb", **params), plant)


def ldp_report(config: Any, plant: bool = False) -> Mechanism:
    """The audit of the report an ``ldp-linucb`` config's task sends: the randomizer its config
    builds (``registry.randomizer_for``: the Gaussian report, or PrivUnit2 where the config says
    ``mechanism = "privunit"``, as the practical default does) at the config's d, L, ε (δ),
    encoding and intercept, against the claim of the config's own ledger."""
    from privbandit.shared.core.policies.registry import build_policy, randomizer_for
    from privbandit.shared.core.randomizers.gaussian import GaussianRandomizer
    from privbandit.shared.core.randomizers.privunit import PrivUnitRandomizer

    ledger = build_policy(config, np.random.default_rng(0)).ledger()
    rand = randomizer_for(config)
    if isinstance(rand, PrivUnitRandomizer):
        return _privunit_report(rand, ledger, plant)
    assert isinstance(rand, GaussianRandomizer)
    encoding = rand.encoding
    planted = None
    if plant:  # the calibrated σ, halved (e.g. a variance read as a standard deviation's square)
        rand.sigma = rand.sigma / 2
        planted = "half the calibrated noise (σ/2)"
    xs = circle(rand.d, rand.L, 720, rand.intercept)
    (x0, r0), (x1, r1), dist = farthest_pair(rand._clean, xs)
    pair = ((x0, r0), (x1, r1))

    def sample(which: int, n: int, rng: np.random.Generator) -> np.ndarray:
        x, r = pair[which]
        return rand.randomize(_rows(x, n), np.full(n, r), rng)

    return Mechanism(
        f"ldp-linucb/{encoding}", "gaussian", float(ledger.ldp_epsilon or 0.0),
        float(ledger.ldp_delta or 0.0), sample, True,
        "one Gaussian report at its farthest pair; at a fixed pair the whole (ε, δ) curve is "
        "attained, but a finite sample measures rates near 1/N, not δ, so ε_lo stays below ε",
        dist / GaussianRandomizer._sensitivity(rand), planted)


# -- ldp-linucb's PrivUnit2 report ----------------------------------------------------------

PLANT_PRIVUNIT = 3.0  # the planted PrivUnit bug: (γ, p, m) calibrated for 3 ε under the claim ε


def privunit_pair(rand: Any, points: int = 720
                  ) -> tuple[tuple[np.ndarray, float], tuple[np.ndarray, float], float]:
    """The two inputs (x, y) of full norm ‖v_f‖ = r whose report directions û are the widest
    apart (contexts of norm L on a grid of a plane, y ∈ {0, 1}; the randomizer's own clean map),
    and the cosine between their directions."""
    xs = circle(rand.d, rand.L, points, rand.intercept)
    X = np.concatenate([xs, xs])
    R = np.repeat([0.0, 1.0], xs.shape[0])
    V = rand._clean(X, R)[:, rand.free]
    norms = np.linalg.norm(V, axis=1)
    full = np.flatnonzero(norms >= rand.radius * (1 - 1e-9))
    if full.size < 2:
        raise ValueError("no two inputs of the grid reach the report radius")
    U = V[full] / norms[full, None]
    cos = U @ U.T
    i, j = np.unravel_index(int(np.argmin(cos)), cos.shape)
    a, b = full[i], full[j]
    return (X[a], float(R[a])), (X[b], float(R[b])), float(cos[i, j])


def _privunit_report(rand: Any, ledger: Any, plant: bool) -> Mechanism:
    """PrivUnit2's report (``randomizers.privunit``) at its widest pair, the test the region
    where the likelihood ratio is largest.

    Claim: the exact pure ε of the shipped calibration, ``privunit_epsilon(D, γ, p)`` (★) of the
    honest randomizer (equal to its ledger's ε; the audit refuses to run if they differ). Pair:
    (★) is attained by any two inputs of full norm ‖v_f‖ = r (so that the norm rounding keeps
    û's sign: no dilution) whose caps differ: on cap(û₁) ∖ cap(û₀) the output density under
    D₁ is p/q per unit area and under D₀ (1 − p)/(1 − q), a ratio of exactly e^ε. Opposite
    directions u, −u would make that set the whole cap (disjoint caps for any γ > 0: P₁ = p),
    but no two full-norm report vectors are opposite: the Gram part's diagonal entries x_i² are
    never negative, so two reports are opposite only where their Gram parts vanish (x = 0, or
    x = c e₀ under an intercept, y = 1 vs 0), far inside the radius, where the norm rounding
    flips û's sign with probability (1 − ‖v_f‖/r)/2 and dilutes the ratio (to e^0.5 at ε = 1,
    x = c e₀ of the centered report below). So the pair is the full-norm one whose directions
    are the widest apart (``privunit_pair``: cos 0 for plain, −2/7 for the centered report with
    w = 2 at c = 1/√2). The cap half-angle is arccos γ ≈ 82° at ε = 1, so the caps overlap: the
    ratio is still exactly e^ε on the part of cap(û₁) outside cap(û₀), which only holds less
    probability than the whole cap would; ε_lo approaches ε as samples grow (0.99 at 10⁶),
    nothing is lost but power. Test statistic (post-processing of the output o): with z =
    o_f/‖o_f‖ (the point on the sphere, whatever m scaled it by), s = min(⟨z, û₁⟩ − γ,
    γ − ⟨z, û₀⟩), s ≥ 0 exactly on cap(û₁) ∖ cap(û₀) at the claim's γ; the audit picks the
    threshold on its selection half (a planted bug's smaller caps are a threshold s ≥ γ' − γ
    away)."""
    from privbandit.shared.core.randomizers.privunit import privunit_epsilon, privunit_parameters

    gamma, p, _ = rand.parameters
    claimed = privunit_epsilon(rand.D, gamma, p)
    if not math.isclose(claimed, float(ledger.ldp_epsilon or 0.0), rel_tol=1e-9):
        raise ValueError(f"the randomizer's exact ε {claimed} is not its ledger's "
                         f"{ledger.ldp_epsilon}")
    (x0, y0), (x1, y1), cos = privunit_pair(rand)
    pair = ((x0, y0), (x1, y1))
    clean = rand._clean(np.stack([x0, x1]), np.array([y0, y1]))[:, rand.free]
    u0, u1 = (clean / np.linalg.norm(clean, axis=1, keepdims=True))
    planted = None
    if plant:  # the cached calibration replaced: cap and probability for 3 ε
        rand.parameters = privunit_parameters(rand.D, PLANT_PRIVUNIT * rand.epsilon)
        planted = (f"PrivUnit2's cap and cap probability calibrated for ε = "
                   f"{PLANT_PRIVUNIT * rand.epsilon:g} under the claim ε = {rand.epsilon:g}")

    def sample(which: int, n: int, rng: np.random.Generator) -> np.ndarray:
        x, y = pair[which]
        out = rand.randomize(_rows(x, n), np.full(n, y), rng)[:, rand.free]
        z = out / np.linalg.norm(out, axis=1, keepdims=True)
        return np.minimum(z @ u1 - gamma, gamma - z @ u0)

    return Mechanism(
        f"ldp-linucb/privunit/{rand.encoding}", "privunit", claimed, 0.0, sample, True,
        "pure ε: the ratio e^ε holds exactly on cap(û₁) ∖ cap(û₀); the widest full-norm "
        f"pair's directions are at cos {round(cos, 3) + 0.0:.3f}, not opposite (no two "
        "full-norm reports are), so the caps overlap and that set holds less than the whole "
        "cap: power, not bias",
        1.0, planted)


def ldp_linucb_privunit(intercept: bool, plant: bool = False) -> Mechanism:
    """``ldp-linucb``'s report at its practical defaults (PrivUnit2, encoding ``auto``: plain
    without an intercept, centered with w = 2 at c = 1/√2 with one), d = 3, L = 1, ε = 1."""
    from privbandit.shared.core.policies import practical
    from privbandit.shared.core.policies.registry import make_config

    params: dict[str, Any] = {**practical.LDP_LINUCB, "d": 3, "epsilon": GAUSSIAN_EPSILON}
    if intercept:
        params["intercept"] = 1 / math.sqrt(2)
    return ldp_report(make_config("ldp-linucb", **params), plant)


def ldp_glb(plant: bool = False) -> Mechanism:
    """``ldp-glb``'s report (d = 2, L = 1, S = 3), anchors θ̂ on a grid of the sphere of radius
    S: the pair and anchor with the farthest clean reports."""
    from privbandit.shared.core.policies.registry import build_policy, make_config, randomizer_for
    from privbandit.shared.core.randomizers.glb import VersionedGLBRandomizer, glb_sensitivity

    config = make_config("ldp-glb", d=2, epsilon=GAUSSIAN_EPSILON, delta=GAUSSIAN_DELTA, S=3.0)
    ledger = build_policy(config, np.random.default_rng(0)).ledger()
    wrapper = randomizer_for(config)
    assert isinstance(wrapper, VersionedGLBRandomizer)
    rand = wrapper.inner
    planted = None
    if plant:
        rand.sensitivity = rand.L**2
        planted = "σ calibrated to one coordinate's sensitivity L² instead of the joint Δ"
    xs = circle(rand.d, rand.L, 240)
    best: tuple[Any, ...] = ()
    for angle in np.linspace(0.0, 2 * math.pi, 48, endpoint=False):
        anchor = rand.S * np.array([math.cos(angle), math.sin(angle)])
        rand.set_anchor(anchor)
        a, b, dist = farthest_pair(rand._clean, xs)
        if not best or dist > best[3]:
            best = (anchor, a, b, dist)
    anchor, a, b, dist = best
    rand.set_anchor(anchor)
    pair = (a, b)

    def sample(which: int, n: int, rng: np.random.Generator) -> np.ndarray:
        x, r = pair[which]
        return rand.randomize(_rows(x, n), np.full(n, r), rng)

    return Mechanism(
        "ldp-glb", "gaussian", float(ledger.ldp_epsilon or 0.0), float(ledger.ldp_delta or 0.0),
        sample, False,
        "one Gaussian report; its Δ adds the sups of three parts that no single pair attains "
        "together (the farthest pair found reaches the fraction 'attained' of Δ), so the audit "
        "measures the mechanism at that pair's smaller distance",
        dist / glb_sensitivity(rand.L, rand.S), planted)


# -- sblb: the 0/1 randomizer ------------------------------------------------------------------

SBLB_EPS0, SBLB_BATCH, SBLB_DELTA = 1.0, 2, 1e-6


def _sblb_randomizer(eps0: float, batch: int) -> Any:
    from privbandit.shared.core.policies.registry import make_config, randomizer_for
    from privbandit.shared.core.randomizers.binary import BinaryRandomizer

    config = make_config("sblb", d=1, m=1, eps0=eps0, batch_size=batch, delta=SBLB_DELTA)
    rand = randomizer_for(config)
    assert isinstance(rand, BinaryRandomizer)
    return rand


PLANT_EPS0 = 4.0  # the planted sblb bug: the flip probability of 4 ε0


def _sblb_plant(plant: bool) -> tuple[Any, str | None]:
    if not plant:
        return _sblb_randomizer(SBLB_EPS0, SBLB_BATCH), None
    return (_sblb_randomizer(PLANT_EPS0 * SBLB_EPS0, SBLB_BATCH),
            f"flip probability of ε0 = {PLANT_EPS0:g} × the claimed (ε0 read per coordinate)")


SBLB_PAIR = ((np.array([1.0]), 1.0), (np.array([-1.0]), 1.0))


def sblb_report(plant: bool = False) -> Mechanism:
    """One sblb report (d = 1, m = 1) under the LDP claim ε0."""
    from privbandit.shared.core.accounting.ledgers import ldp_binary_ledger

    rand, planted = _sblb_plant(plant)
    ledger = ldp_binary_ledger(SBLB_EPS0)

    def sample(which: int, n: int, rng: np.random.Generator) -> np.ndarray:
        x, r = SBLB_PAIR[which]
        return np.asarray(rand.randomize(_rows(x, n), np.full(n, r), rng), dtype=float)

    return Mechanism(
        "sblb/report", "binary", float(ledger.ldp_epsilon or 0.0), 0.0, sample, False,
        "Prop. 4 composes ε0 over all m·d(d+3)/2 bits as if each could flip; the encoded values "
        "of ‖x‖ ≤ L cannot all move from 0 to 1 at once (d = 1: only ỹ = rx/2 + ½ does, z̃ = "
        "x²/2 + ½ is equal at x = ±1), so the report's worst-case loss is ε0/2 and the audit "
        "stays below it: a slack of the bound, not a leak", None, planted)


def sblb_bit(plant: bool = False) -> Mechanism:
    """One bit of R_p^{0/1} (Alg. 3, ``binary.randomized_response``) at the shipped p: the
    per-bit ε that the sum-only ledger composes."""
    from privbandit.shared.core.accounting.sum_only import bit_epsilon
    from privbandit.shared.core.randomizers.binary import randomized_response

    rand, planted = _sblb_plant(plant)
    claimed = bit_epsilon(SBLB_EPS0, 1, 1)

    def sample(which: int, n: int, rng: np.random.Generator) -> np.ndarray:
        bits = np.full((n, 1), which, dtype=np.uint8)
        return randomized_response(bits, rand.p, rng)[:, 0].astype(float)

    return Mechanism("sblb/bit", "binary", claimed, 0.0, sample, True,
                     "randomised response on one bit: its ε is attained by the test 'output = 1'",
                     None, planted)


def sblb_batch_sum(plant: bool = False) -> Mechanism:
    """The batch counts of l = 2 sblb reports (the secure-sum transport's release), the other
    user at x = 1, r = 1, under the sum-only ledger's central ε."""
    from privbandit.shared.core.accounting.shuffle_schedule import central_epsilon

    rand, planted = _sblb_plant(plant)
    claimed = central_epsilon(SBLB_EPS0, SBLB_BATCH, SBLB_DELTA, 1, 1, "secure-sum")
    others = np.ones((SBLB_BATCH - 1, 1))

    def sample(which: int, n: int, rng: np.random.Generator) -> np.ndarray:
        x, r = SBLB_PAIR[which]
        X = np.concatenate([_rows(x, n), np.tile(others, (n, 1))])
        R = np.concatenate([np.full(n, r), np.ones(n * (SBLB_BATCH - 1))])
        counts = rand.counts(rand.randomize(X, R, rng))
        own, rest = counts[:n], counts[n:].reshape(n, SBLB_BATCH - 1, -1).sum(axis=1)
        return (own + rest).astype(float)

    return Mechanism(
        f"sblb/batch-sum-l{SBLB_BATCH}", "binary", claimed, SBLB_DELTA, sample, False,
        "the sum-only ledger bounds the worst case over the others' data and composes every "
        "bit position as if it could flip (see sblb/report); the audit fixes one dataset of "
        "the others, so it measures at most the report's ε0/2, less the others' noise", None,
        planted)


# -- ddp-linucb: Skellam batch sums ----------------------------------------------------------

DDP_BATCH = 4
PLANT_SHARES = 8  # the planted bug of noise = "devices": shares sized for an 8× longer batch
PLANT_DDP_EPSILON = 3.0  # the planted aggregator bug: noise of ε = 3 (a ninth of μ_a)


def ddp_linucb(encoding: str, view: str, plant: bool = False) -> Mechanism:
    """One batch sum of ``DDP_BATCH`` users (d = 2, s = 128, ``encoding``) as an observer sees it.

    ``view`` ``"public"``: the devices' exact rounded statistics (``SkellamRandomizer.
    randomize``) plus both aggregators' noise (``batch_noise``, the simulator's sampler of
    Sk(μ_a) + Sk(μ_a)), against the ledger's public ε (variance 2μ_a). ``"analyzer"``: plus
    one aggregator's noise only — what the analyzer's view is once it subtracts its own —
    against the top-level central ε (variance μ_a); drawn by ``batch_noise`` of the same
    randomizer with its rate halved (the exact CSPRNG sampler the services run takes 0.1 s per
    vector at this μ, too slow for 10⁵ samples; it draws the same law). ``"devices"``: the
    previous design (``noise = "devices"``), each device's rounded statistics plus its share."""
    from privbandit.shared.core.policies.registry import make_config, randomizer_for
    from privbandit.shared.core.randomizers.skellam import SkellamRandomizer, pair_sensitivity

    noise = "devices" if view == "devices" else "aggregators"

    def build(batch: int, epsilon: float = 1.0) -> SkellamRandomizer:
        config = make_config("ddp-linucb", d=2, epsilon=epsilon, delta=1e-6, batch_size=batch,
                             encoding=encoding, noise=noise)
        rand = randomizer_for(config)
        assert isinstance(rand, SkellamRandomizer)
        return rand

    honest = build(DDP_BATCH)
    ledger = honest.ledger()
    claimed = float(ledger.central_epsilon or 0.0)
    if view == "public":
        claimed = float((ledger.model_extra or {})["observers"]["public"]["central_epsilon"])
    rand, planted = honest, None
    if plant and view == "devices":
        rand = build(PLANT_SHARES * DDP_BATCH)
        planted = (f"shares sized for a batch of {PLANT_SHARES * DDP_BATCH} on a batch of "
                   f"{DDP_BATCH} (1/{PLANT_SHARES} of the noise variance)")
    elif plant:
        rand = build(DDP_BATCH, PLANT_DDP_EPSILON)
        planted = (f"the aggregators' noise of a task at ε = {PLANT_DDP_EPSILON:g} under the "
                   "claim ε = 1")
    noisy = rand
    if view == "analyzer":  # one aggregator's Sk(μ_a): the pair's rate halved
        noisy = build(DDP_BATCH, PLANT_DDP_EPSILON if plant else 1.0)
        noisy.lam = noisy.lam / 2
    xs = circle(rand.d, rand.L, 720)
    a, b, dist = farthest_pair(rand.statistics, xs)
    pair = (a, b)
    zero = np.zeros(rand.d)

    def sample(which: int, n: int, rng: np.random.Generator) -> np.ndarray:
        x, r = pair[which]
        X = np.concatenate([_rows(x, n), _rows(zero, n * (DDP_BATCH - 1))])
        R = np.concatenate([np.full(n, r), np.zeros(n * (DDP_BATCH - 1))])
        rows = rand.randomize(X, R, rng)
        own, rest = rows[:n], rows[n:].reshape(n, DDP_BATCH - 1, -1).sum(axis=1)
        sums = own + rest
        if noise == "aggregators":
            sums = sums + np.stack([noisy.batch_noise(rng) for _ in range(n)])
        return sums.astype(float)

    design = ("the previous device-share design (noise = 'devices'): l shares of total variance "
              "μ" if view == "devices" else
              f"issue 40's design, the {view}'s view: exact rounded statistics and "
              + ("both aggregators' noise (2μ_a)" if view == "public" else
                 "the other aggregator's noise (μ_a)"))
    loose = (" The upper encoding's Δ_v adds the two parts' sups, which no pair attains together "
             "(the farthest pair reaches the fraction 'attained')." if encoding == "upper" else "")
    return Mechanism(
        f"ddp-linucb/{encoding}/{view}", "skellam", claimed,
        float(ledger.central_delta or 0.0), sample, False,
        design + "; the ledger's sensitivities add the rounding slack 2√n to sΔ_v and its RDP "
        "conversion is not tight, so ε_lo stays below the claim." + loose,
        dist / pair_sensitivity(rand.L, rand.encoding, rand.u_weight, rand.intercept), planted)


# -- multi-armed ---------------------------------------------------------------------------------

def ldp_mab(plant: bool = False) -> Mechanism:
    """``ldp-mab``'s report y = r − ½ + N(0, σ²) at r = 0 vs 1."""
    from privbandit.shared.core.policies.registry import build_policy, make_config, randomizer_for
    from privbandit.shared.core.randomizers.arms import GaussianArmRandomizer

    config = make_config("ldp-mab", K=2, epsilon=GAUSSIAN_EPSILON, delta=GAUSSIAN_DELTA)
    ledger = build_policy(config, np.random.default_rng(0)).ledger()
    rand = randomizer_for(config)
    assert isinstance(rand, GaussianArmRandomizer)
    planted = None
    if plant:
        rand.SENSITIVITY = 0.5  # the planted bug: B instead of 2B
        planted = "σ calibrated to the loss bound B = ½ instead of the range 2B = 1"

    def sample(which: int, n: int, rng: np.random.Generator) -> np.ndarray:
        return rand.values(np.full(n, float(which)), None, rng)

    return Mechanism("ldp-mab", "gaussian", float(ledger.ldp_epsilon or 0.0),
                     float(ledger.ldp_delta or 0.0), sample, True,
                     "one Gaussian value at its attaining pair (see ldp-linucb/plain)",
                     1.0, planted)


HELDP_LEVELS = (0.5, 2.0)
PLANT_LEVEL = 3.0  # the planted HeLDP bug: noise for 3 ε_t on a report stating ε_t


def heldp(algo: str, level: float, plant: bool = False) -> Mechanism:
    """HeLDP's curator (``heldp-ucb-l``: CTL, ``heldp-ucb-b``: CTB) at a user's level ε_t, clean
    value 0 vs 1; the ledger's claim for that user is pure ε_t-LDP."""
    from privbandit.shared.core.policies.registry import make_config, randomizer_for
    from privbandit.shared.core.randomizers.heldp import HeLDPRandomizer

    config = make_config(algo, K=2, epsilon=level)
    rand = randomizer_for(config)
    assert isinstance(rand, HeLDPRandomizer)
    used = level * PLANT_LEVEL if plant else level
    planted = f"noise of level {used:g} on a report stating ε_t = {level:g}" if plant else None

    def sample(which: int, n: int, rng: np.random.Generator) -> np.ndarray:
        return rand.values(np.full(n, float(which)), np.full(n, used), rng)

    curator = "Laplace" if rand.mechanism == "laplace" else "randomised response"
    return Mechanism(f"{algo}@{level:g}", "heldp", level, 0.0, sample, True,
                     f"pure ε_t-LDP {curator} at one user's level: attained by one threshold",
                     1.0, planted)


# -- central (AdaR) ------------------------------------------------------------------------------

ADAR_EPISODE = 4
# The planted AdaR bug: the noise of a 16× larger RDP ε (σ² = α/(2ε): a quarter of σ) under
# the claim of ε = 1. Half the noise is a bug too, but the claim (an RDP conversion) is loose
# enough that 10⁵ samples do not certify it broken: the test would need 10⁶ and more.
PLANT_RDP_EPSILON = 16.0
PLANT_RDP = f"noise of RDP ε = {PLANT_RDP_EPSILON:g} under the claim of ε = 1 (σ/4)"


def _central(algo: str, plant: bool, **params: Any
             ) -> tuple[Any, Callable[[np.random.Generator], Any], str | None]:
    """(the policy's ledger, a builder of the policy that releases, the planted bug) for an AdaR
    policy at (α, ε, δ) = (2, 1, 10⁻⁶); planted: the release runs at RDP ε = 16."""
    from privbandit.shared.core.policies.registry import build_policy, make_config

    config = make_config(algo, alpha=2.0, epsilon=1.0, delta=1e-6, **params)
    run_config = config.model_copy(update={"epsilon": PLANT_RDP_EPSILON}) if plant else config
    return (build_policy(config).ledger(), functools.partial(build_policy, run_config),
            PLANT_RDP if plant else None)


def _rdp_release(name: str, ledger: Any, sample: Sampler, planted: str | None,
                 note: str) -> Mechanism:
    """A central policy's one Gaussian release at its attaining pair (distance 1.0 of the
    calibrated sensitivity), claimed through the RDP curve's conversion: never tight."""
    return Mechanism(name, "central", float(ledger.central_epsilon or 0.0),
                     float(ledger.central_delta or 0.0), sample, False, note, 1.0, planted)


def adar_ucb(plant: bool = False) -> Mechanism:
    """AdaR-UCB's release of one episode's mean of n rewards (``AdaRUCB._advance``, the policy's
    own noise), all rewards 0 vs one of them 1."""
    from privbandit.shared.core.policies.adar_ucb import AdaRUCB

    ledger, build, planted = _central("adar-ucb", plant, K=2)

    def sample(which: int, n: int, rng: np.random.Generator) -> np.ndarray:
        policy = build(rng)
        assert isinstance(policy, AdaRUCB)
        policy.episodes = policy.K  # past the initial pulls: each _advance is one episode
        out = np.empty(n)
        for i in range(n):
            policy.arm, policy.target, policy.count, policy.sum = 0, ADAR_EPISODE, 0, 0.0
            policy._advance(float(which), ADAR_EPISODE)
            out[i] = policy.released[0]
        return out

    return _rdp_release("adar-ucb", ledger, sample, planted,
        "one Gaussian release at its attaining pair, but the claim is the (α, ε)-RDP curve "
        "converted to (ε, δ), looser than the Gaussian's exact profile")


def adar_gope(plant: bool = False) -> Mechanism:
    """AdaR-GOPE's private estimate of one phase (``AdaRGOPE.private_estimate``) on the arms
    e₁, e₂: the phase's rewards all 0 vs one reward 1 at arm e₁."""
    from privbandit.shared.core.policies.adar_gope import AdaRGOPE, PhaseModel

    ledger, build, planted = _central("adar-gope", plant, d=2)
    arms = np.eye(2)

    def sample(which: int, n: int, rng: np.random.Generator) -> np.ndarray:
        policy = build(rng)
        assert isinstance(policy, AdaRGOPE)
        policy.bind_arms(arms)
        model = policy.model
        assert isinstance(model, PhaseModel)
        counts = np.zeros(2)
        counts[model.support] = model.counts
        policy.V = np.diag(counts)
        policy.u = np.array([float(which), 0.0])
        return np.stack([policy.private_estimate(model) for _ in range(n)])

    return _rdp_release("adar-gope", ledger, sample, planted,
        "one phase's Gaussian release at its attaining pair, claim from the RDP conversion "
        "(see adar-ucb)")


def adar_oful(plant: bool = False) -> Mechanism:
    """AdaR-OFUL's first episode release (``AdaROFUL._publish_exact``: θ̃ = V⁻¹(u + Y₁), the
    policy's own noise) at V = λI, u = 0 vs u = x (one reward 0 vs 1 at the context x = L e₁)."""
    from privbandit.shared.core.policies.exact import AdaROFUL

    ledger, build, planted = _central("adar-oful", plant, d=2)

    def sample(which: int, n: int, rng: np.random.Generator) -> np.ndarray:
        policy = build(rng)
        assert isinstance(policy, AdaROFUL)
        u = np.array([float(which) * policy.config.L, 0.0])
        out = np.empty((n, 2))
        for i in range(n):
            policy.u, policy.noise, policy.episodes = u, np.zeros(2), 0
            policy._publish_exact()
            out[i] = policy.model.theta
        return out

    return _rdp_release("adar-oful", ledger, sample, planted,
        "one episode's Gaussian release at its attaining pair, claim from the RDP conversion "
        "(see adar-ucb)")


# -- the list --------------------------------------------------------------------------------------

def _gaussian_encodings() -> dict[str, Callable[[bool], Mechanism]]:
    from privbandit.shared.core.randomizers.gaussian import ENCODINGS

    return {f"ldp-linucb/{e}": functools.partial(ldp_linucb, e) for e in ENCODINGS}


def mechanisms() -> dict[str, Callable[[bool], Mechanism]]:
    """Every auditable mechanism by name: a builder taking ``plant``."""
    out: dict[str, Callable[[bool], Mechanism]] = {
        **_gaussian_encodings(),
        "ldp-glb": ldp_glb,
        "sblb/report": sblb_report,
        "sblb/bit": sblb_bit,
        f"sblb/batch-sum-l{SBLB_BATCH}": sblb_batch_sum,
        "ddp-linucb/frobenius/public": functools.partial(ddp_linucb, "frobenius", "public"),
        "ddp-linucb/frobenius/analyzer": functools.partial(ddp_linucb, "frobenius", "analyzer"),
        "ddp-linucb/upper/public": functools.partial(ddp_linucb, "upper", "public"),
        "ddp-linucb/frobenius/devices": functools.partial(ddp_linucb, "frobenius", "devices"),
        "ldp-mab": ldp_mab,
    }
    for algo in ("heldp-ucb-l", "heldp-ucb-b"):
        for level in HELDP_LEVELS:
            out[f"{algo}@{level:g}"] = functools.partial(heldp, algo, level)
    out["adar-ucb"] = adar_ucb
    out["adar-gope"] = adar_gope
    out["adar-oful"] = adar_oful
    # Appended, not beside ldp-linucb's Gaussian rows: each row's stream is the seed's child at
    # its position (``run.audit``), so the rows before keep their recorded results.
    out["ldp-linucb/privunit/plain"] = functools.partial(ldp_linucb_privunit, False)
    out["ldp-linucb/privunit/centered"] = functools.partial(ldp_linucb_privunit, True)
    return out
