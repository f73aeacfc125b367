"""Device side of distributed DP (``ddp-linucb``): clip, scale, round, add a Skellam share.

A user with feature x (‖x‖ ≤ L) and reward r ∈ [0, 1] holds the statistics
v = (upper(x xᵀ), r x) ∈ ℝⁿ, n = d(d+3)/2, and releases it weighted coordinate by coordinate,
v_w (*Encodings* below; the original ``"upper"`` encoding has all weights 1). The device

1. clips: x to ‖x‖ ≤ L, r to [0, 1], then v_w to ‖v_w‖₂ ≤ C = √(L⁴ + w²h²L²) (the matrix part
   has norm at most ‖x xᵀ‖_F = ‖x‖² in every encoding and the reward part at most whL, h = 1,
   or ½ for ``"centered"``; so valid inputs are never changed);
2. scales by s and rounds each coordinate of y = s v to ⌊y_i⌋ + Bernoulli(y_i − ⌊y_i⌋): unbiased,
   E z = y. Norm after rounding (Kairouz–Liu–Steinke 2021, the deterministic bound of §4 / their
   ``bound_1``): every coordinate moves by less than 1, so ‖z − y‖₂ < √n and
   ‖z‖₂ ≤ B = s C + √n, always — no conditional resampling, so rounding stays exactly unbiased;
3. adds to every coordinate an independent Skellam share Sk(σ_s²) = Poisson(λ) − Poisson(λ),
   λ = σ_s²/2 a dyadic rational (``exact_poisson.rational_rate``, never below the requested rate).

**Where the noise is added** (``noise``, issue 40). ``"aggregators"`` (the default): step 3 is
skipped — the device sends its exact rounded statistics z, each entry within its *honest range*
[lo_i, hi_i] (``entry_ranges``: what clip-and-round can produce, nothing more), proved valid by
the Prio3 validity proof; each of the two aggregators (shuffler and analyzer, who do not
collude) adds its own exact Skellam noise Sk(μ_a) per coordinate to its aggregate share before
unsharding, μ_a ≥ μ the accountant's variance for (ε, δ). Each single observer is covered by the
noise it did not add (the analyzer by the shuffler's, the shuffler — which sees the published
models — by the analyzer's, the public by both: 2μ_a), whatever any device sends: a device that
adds nothing, sends garbage or stays silent changes neither the noise nor anyone else's
guarantee (``accounting.skellam.aggregator_ledger``). The cost: the models carry 2μ_a where the
device design carried μ. ``"devices"`` (the design of issue 10): step 3 as written; the
guarantee then holds only while ⌈γ l⌉ devices of each batch add their share, and the range a
device may claim must include its share's tail (±O, ``offset``), which lets one report move
every coordinate by far more than an honest one can.

The analyzer learns S = Σ_i z_i + Σ_i (shares) for the l users of a batch and estimates
Σ v_i by S / (s · weights) (unbiased: rounding and noise have mean zero). Sensitivity for the
accountant (``accounting.skellam``): replacing one user moves S by z − z' with ‖z − z'‖₂ ≤
min(2B, s Δ_v + 2√n), Δ_v the pair bound of the weighted clean statistics (``pair_sensitivity``:
√(2L⁴ + 4L²) for ``"upper"``, as ``randomizers.gaussian.report_sensitivity``);
Δ₁ = min(√n Δ₂, Δ₂²).

Two samplers, one distribution: the simulator draws rounding and shares from an injected
``numpy.random.Generator`` (``randomize``: numpy's Poisson sampler, a floating-point
approximation, fine for measuring regret); a device uses ``device_report``, which draws every bit
from the OS CSPRNG and samples Poisson exactly (``exact_poisson``) — the only form whose output
distribution the ledger's guarantee covers.

Encodings (``encoding``, ``u_weight`` w). The device releases the weighted vector
v_w = (diag(x xᵀ), b · offdiag_{i<j}(x xᵀ), w · r x) and the analyzer divides the weights out:

- ``"upper"`` (b = 1, w = 1: the original design): Δ_v = √(2L⁴ + 4w²L²), the sum of the two
  parts' separate bounds (‖upper(x xᵀ) − upper(y yᵀ)‖ ≤ ‖x xᵀ − y yᵀ‖_F ≤ √2 L², ‖r x − r'y‖ ≤ 2L).
- ``"frobenius"`` (b = √2, so ‖v_G‖ = ‖x xᵀ‖_F = ‖x‖², and any w > 0): the two parts' worst
  cases cannot happen together, and the joint bound is exact. With A = L⁴, U = w²L², p = ‖x‖,
  q = ‖y‖ ≤ L and t = ⟨x, y⟩ (|t| ≤ pq):

      ‖v_w(x, r) − v_w(y, r')‖² = ‖x xᵀ − y yᵀ‖_F² + w²‖r x − r'y‖²
                                 = (p⁴ + q⁴ − 2t²) + w²‖r x − r'y‖²
                                 ≤ A(2 − 2τ²) + U·max(1, 2 − 2τ),        τ = t/L² ∈ [−1, 1],

  since p⁴ + q⁴ ≤ 2L⁴, and ‖r x − r'y‖² = r²p² + r'²q² − 2rr't is a convex quadratic form in
  (r, r') ∈ [0, 1]² (its matrix [[p², −t], [−t, q²]] is PSD), so it is at most its largest vertex
  value, max(0, p², q², p² + q² − 2t) ≤ L² max(1, 2 − 2τ). For τ ≤ 1/2 the bound is
  h(τ) = 2A(1 − τ²) + 2U(1 − τ), concave, maximal at τ* = −U/(2A) when U ≤ 2A; for τ > 1/2 it is
  below 1.5A + U < h(0). Hence

      Δ_v² = 2A + 2U + U²/(2A)   if U ≤ 2A,        Δ_v² = 4U   otherwise,          (joint bound)

  attained at ‖x‖ = ‖y‖ = L, r = r' = 1, ⟨x, y⟩ = τ* L² (``pair_sensitivity``; tested against a
  search over inputs). At L = 1, w = 1: Δ_v² = 4.5 against 6 for ``"upper"``.

  The noise the analyzer is left with, per entry and in real units, is σ² on the diagonal of G̃,
  σ²/2 off it and σ²/w² on ũ, with σ ∝ Δ_v (one μ for the whole vector). The estimate's error is
  driven by h − Hθ (the ridge solution θ̃ − θ ≈ Ṽ⁻¹(h − Hθ)), whose expected squared norm is
  σ²(d/w² + ‖θ‖²(1 + (d − 1)/2)) for these variances; times Δ_v² ∝ 2 + 2w² + w⁴/2 (L = 1), this is
  minimal near w = 1 for d = 5, ‖θ‖ ≤ 1 ((2 + 2w² + w⁴/2)(5/w² + 3): 40.6, 36.0, 44.0 at
  w² = 0.5, 1, 2), and 36 is 40% below the ``"upper"`` encoding's 6 · (5 + 5) = 60. The off-diagonal
  noise is also what sets the noise matrix's norm (≈ 2σ_off√d, semicircle): √2 smaller.

- ``"centered"`` (b = √2, weight w, for contexts with an intercept: x₀ = c for every context, a
  constant feature, ``intercept``): the device releases (diag(x xᵀ), √2 · offdiag(x xᵀ),
  w · (r − ½) x). The reward factor a = r − ½ lies in [−h, h], h = ½, a quarter of the range
  that r x's worst case (opposite x, y) uses. With p, q ≤ L and t = ⟨x, y⟩,
  ‖a x − a'y‖² = a²p² + a'²q² − 2aa't is convex in (a, a') on [−h, h]², so at most its vertex
  maximum h²(p² + q² + 2|t|) ≤ 2h²(L² + |t|), and

      ‖v(x, r) − v(y, r')‖² ≤ 2L⁴ − 2t² + 2w²h²(L² + |t|),

  concave in |t|, maximal at |t| = t* = w²h²/2 = w²/8, clamped to the |t| the contexts allow:
  x₀ = y₀ = c gives t = c² + ⟨x₁:, y₁:⟩ ≥ c² − (L² − c²) = 2c² − L², so |t| ∈
  [max(0, 2c² − L²), L²]. The bound is attained at ‖x‖ = ‖y‖ = L, ⟨x, y⟩ = the clamped t*,
  r = 1, r' = 0 (``centered_pair_bound``; tested against a search over inputs). At L = w = 1,
  c = 1/√2: Δ_v² = 2 + ½ + 1/32 = 2.53 against 4.5 for ``"frobenius"`` (σ_b 7.53 against 9.93
  per coordinate at (1, 10⁻⁶)); at the practical w = 1.5, 3.28 (σ_b 8.53, with ũ's noise σ/w).
  The analyzer knows the batch's count n, so Σ x₀² = n c² exactly, and Σ x = G e₀ / c; it
  rebuilds Σ r x = Σ (r − ½) x + ½ G̃ e₀ / c (unbiased; ``estimate``), whose noise adds
  (½/c)² × σ²/2 per entry (``vector_proxy``). Where θ*₀ = ½/c (the ``linear`` environment's
  case) that added noise cancels against the intercept column's noise in h − Hθ. A device
  refuses a context with x₀ ≠ c (``check``; the services: ``feature_intercept``), and
  ``clean_statistics`` projects onto {x₀ = c, ‖x‖ ≤ L} as a last guard, so the bound covers
  every release.

- ``"centered"`` with several intercept coordinates (``intercept_coords`` E, |E| = k ≥ 2; per-arm
  (disjoint) features x = e_a ⊗ c_t whose every block starts with the intercept c, as
  ``shared.core.logged.arm_features`` builds them: E = {0, p, 2p, …}). The condition becomes
  ⟨e, x⟩ = c for every context, e = Σ_{i∈E} e_i (disjoint features: c at the active arm's block
  start, 0 at the others'); k = 1, E = {0} is the case above. The derivation above used only
  p, q ≤ L and the feasible t = ⟨x, y⟩, so only the feasible |t| changes. Disjoint contexts in
  different blocks are orthogonal (t = 0) and in the same block have t ≥ 2c² − L² as before;
  the device accepts the whole set {⟨e, x⟩ = c, ‖x‖ ≤ L}, whose points x = (c/k) e + a,
  y = (c/k) e + b (a, b ⊥ e, ‖a‖², ‖b‖² ≤ L² − c²/k) have t = c²/k + ⟨a, b⟩ anywhere in
  [2c²/k − L², L²] ∋ 0 (k ≥ 2, c ≤ L), so every |t| ∈ [0, L²] is feasible and

      Δ_v² = 2L⁴ − 2s² + 2w²h²(L² + s),   s = min(w²h²/2, L²) = min(w²/8, L²),

  whatever c, attained on that set (``centered_pair_bound`` with k ≥ 2; tested against a
  search over inputs, pairs across and within blocks; disjoint contexts alone would allow only
  |t| ∈ {0} ∪ [2c² − L², L²], a smaller bound where 2c² − L² > w²/8, which the check does not
  enforce). At L = w = 1: 2.53, the single intercept's at c = 1/√2 (whose
  clamp 2c² − L² = 0 does not bind either); at w = 1.5: 3.28. Summing x = x ⟨e, x⟩ / c gives
  Σ x = G e / c, so Σ r x = Σ (r − ½) x + ½ G̃ e / c is still unbiased (``estimate``); but no
  single diagonal entry of G is known (x_i² for i ∈ E is c² or 0, block by block), so the
  released diagonal is kept, and the correction adds to each entry of ũ at most (½/c)² × one
  diagonal and k − 1 off-diagonal entries' noise, (½/c)² (k + 1) σ²/2 (``vector_proxy``). The
  device refuses a context with ⟨e, x⟩ ≠ c (``check``), and ``clean_statistics`` projects onto
  {⟨e, x⟩ = c, ‖x‖ ≤ L}, the ball of radius √(L² − c²/k) about (c/k) e in that hyperplane:
  x's component along e is set to (c/k) e and the rest clipped to that radius (for k = 1 the
  projection above). The honest entry ranges (``entry_ranges``) are the ``"frobenius"`` ones
  with h = ½: valid for every ‖x‖ ≤ L, so every honest report lies in them (tighter ones,
  e.g. x_m² ≤ L² − c²/k for m ∉ E, are possible and not used).

Noise proxies (for the confidence widths of the ``paper`` regularizer): per report and entry of
(G, u) in real units, rounding is bounded in an interval of length 1/s (Hoeffding proxy 1/(4s²)),
and a Skellam share of variance σ² has E e^{tX} = exp(σ²(cosh t − 1)) ≤ exp(c σ² t²/2) for
|t| ≤ 1 with c = 2(cosh 1 − 1) ≈ 1.086 — a sub-Gaussian proxy c σ² for deviations up to c σ²,
which is where the widths' deviations lie for the variances used (σ² ≫ log terms).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from functools import cached_property, lru_cache

import numpy as np

from privbandit.shared.core.accounting.ledger import SECURE_SUM_OBSERVERS_GENERIC, PrivacyLedger
from privbandit.shared.core.accounting.skellam import (
    LedgerWords,
    aggregator_ledger,
    ddp_ledger,
    honest_shares,
    replacement_sensitivities,
    skellam_mu,
)
from privbandit.shared.core.randomizers.base import (
    Estimate,
    SumEncoding,
    check_centered_inputs,
    symmetric_from_upper,
    upper_indices,
)
from privbandit.shared.core.randomizers.exact_poisson import ExactSkellam, rational_rate

# Sub-Gaussian factor of a Skellam share for |t| ≤ 1 (module docstring).
SKELLAM_SUBGAUSSIAN = 2.0 * (math.cosh(1.0) - 1.0)
# Relative slack on the norm bounds for floating-point error in computing s·v.
FLOAT_SLACK = 1e-9


ENCODINGS = ("upper", "frobenius", "centered")
# Where the noise is added (module docstring, *Where the noise is added*).
NOISE_MODES = ("aggregators", "devices")
# The reward range is [0, 1]; the ``"centered"`` encoding releases (r − R0)·x, |r − R0| ≤ R_HALF.
R0, R_HALF = 0.5, 0.5


def reward_half_range(encoding: str) -> float:
    """h with |released reward factor| ≤ h: 1 for r ∈ [0, 1], ½ for r − ½ (``"centered"``)."""
    return R_HALF if encoding == "centered" else 1.0


def check_intercept(encoding: str, intercept: float | None, L: float) -> None:
    """``"centered"`` needs the intercept c (x₀ = c for every context, 0 < c ≤ L); the other
    encodings take none."""
    if encoding == "centered":
        if intercept is None or not (0 < intercept <= L and math.isfinite(intercept)):
            raise ValueError(
                f"the centered encoding needs an intercept c with 0 < c <= L={L:g} (x[0] = c "
                f"for every context), got {intercept!r}")
    elif intercept is not None:
        raise ValueError(f"only the centered encoding takes an intercept (encoding {encoding!r})")


def check_intercept_coords(coords: tuple[int, ...], d: int) -> tuple[int, ...]:
    """The intercept coordinates E (module docstring, *Encodings*) as a sorted tuple: at least
    one, distinct, each in [0, d) (ValueError otherwise)."""
    out = tuple(sorted(int(i) for i in coords))
    if not out or len(set(out)) != len(out) or out[0] < 0 or out[-1] >= d:
        raise ValueError(f"intercept coordinates must be distinct indices in [0, {d}), at least "
                         f"one; got {list(coords)}")
    return out


def n_coords(d: int) -> int:
    """n = d(d+1)/2 + d = d(d+3)/2 coordinates of (upper(x xᵀ), r x)."""
    return d * (d + 3) // 2


def coordinate_weights(d: int, encoding: str = "upper", u_weight: float = 1.0) -> np.ndarray:
    """The weight of each released coordinate (module docstring, *Encodings*): 1 on the diagonal
    of x xᵀ, b on its upper off-diagonal entries (b = 1 for ``"upper"``, √2 for
    ``"frobenius"``), w = ``u_weight`` on r x."""
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding must be one of {ENCODINGS}, got {encoding!r}")
    if not (u_weight > 0 and math.isfinite(u_weight)):
        raise ValueError(f"u_weight must be positive and finite, got {u_weight}")
    iu = upper_indices(d)
    off = 1.0 if encoding == "upper" else math.sqrt(2.0)
    return np.concatenate([np.where(iu[0] == iu[1], 1.0, off), np.full(d, float(u_weight))])


def pair_sensitivity(L: float, encoding: str = "upper", u_weight: float = 1.0,
                     intercept: float | None = None, coords: tuple[int, ...] = (0,)) -> float:
    """Δ_v ≥ ‖v_w(x, r) − v_w(y, r')‖₂ for every ‖x‖, ‖y‖ ≤ L and r, r' ∈ [0, 1] (module
    docstring, *Encodings*): √(2L⁴ + 4w²L²) for ``"upper"``; the exact joint bound
    √(2A + 2U + U²/(2A)) (U ≤ 2A) or 2√U (U > 2A), A = L⁴, U = w²L², for ``"frobenius"``;
    ``centered_pair_bound`` for ``"centered"`` (its intercept coordinates ``coords``)."""
    coordinate_weights(1, encoding, u_weight)  # validates
    check_intercept(encoding, intercept, L)
    if encoding == "upper":
        return math.sqrt(2 * L**4 + 4 * u_weight**2 * L**2)
    if encoding == "centered":
        assert intercept is not None
        return math.sqrt(centered_pair_bound(L, u_weight, intercept, len(coords)))
    A, U = L**4, (u_weight * L) ** 2
    if U <= 2 * A:
        return math.sqrt(2 * A + 2 * U + U * U / (2 * A))
    return 2.0 * math.sqrt(U)


def centered_pair_bound(L: float, w: float, c: float, k: int = 1) -> float:
    """Δ_v² of the ``"centered"`` encoding (module docstring, *Encodings*): with h = ½, s = |t|,
    Δ_v² = max over feasible s of 2L⁴ − 2s² + 2w²h²(L² + s); the concave term peaks at
    s* = w²h²/2, clamped to the |⟨x, y⟩| the contexts allow: t ≥ 2c² − L² when the one
    intercept coordinate has x₀ = y₀ = c (k = 1); every s ∈ [0, L²] with k ≥ 2 intercept
    coordinates (contexts in different blocks are orthogonal)."""
    h2 = R_HALF**2
    low = 2 * c * c - L * L
    s_low = max(low, 0.0) if k == 1 else 0.0
    s = min(max(w * w * h2 / 2, s_low), L * L)
    return 2 * L**4 - 2 * s * s + 2 * w * w * h2 * (L * L + s)


def onto_intercept(x: np.ndarray, intercept: float, L: float,
                   coords: tuple[int, ...] = (0,)) -> np.ndarray:
    """The rows of x projected onto {x₀ = c, ‖x‖ ≤ L}: x₀ set to c, the rest clipped to norm
    √(L² − c²) (the centered encodings' last guard; a checked context is unchanged). With the
    intercept coordinates ``coords`` E (k = |E| ≥ 2): onto {⟨e, x⟩ = c, ‖x‖ ≤ L}, the component
    along e set to (c/k) e and the rest clipped to √(L² − c²/k) (module docstring)."""
    if tuple(coords) != (0,):
        return onto_intercept_direction(x, intercept, L, coords)
    rest = np.asarray(x, dtype=float)[:, 1:]
    norms = np.linalg.norm(rest, axis=1, keepdims=True)
    room = math.sqrt(max(L * L - intercept * intercept, 0.0))
    rest = rest * np.minimum(1.0, room / np.maximum(norms, 1e-300))
    return np.concatenate([np.full((rest.shape[0], 1), float(intercept)), rest], axis=1)


def onto_intercept_direction(x: np.ndarray, intercept: float, L: float,
                             coords: tuple[int, ...]) -> np.ndarray:
    """``onto_intercept`` for any intercept coordinates E: the rows of x projected onto
    {⟨e, x⟩ = c, ‖x‖ ≤ L} (e the indicator of E, k = |E|), a ball of radius √(L² − c²/k)
    about (c/k) e in that hyperplane: x − (⟨e, x⟩/k) e clipped to the radius, plus (c/k) e."""
    x = np.asarray(x, dtype=float)
    e = np.zeros(x.shape[1])
    e[list(coords)] = 1.0
    k = len(coords)
    rest = x - np.outer(x @ e, e) / k
    norms = np.linalg.norm(rest, axis=1, keepdims=True)
    room = math.sqrt(max(L * L - intercept * intercept / k, 0.0))
    rest = rest * np.minimum(1.0, room / np.maximum(norms, 1e-300))
    return rest + (float(intercept) / k) * e


def unweighted_estimate(values: np.ndarray, d: int, n: int,
                        intercept: float | None = None,
                        coords: tuple[int, ...] = (0,)) -> Estimate:
    """(G, u) from the summed statistics of n reports with the weights divided out: the upper
    triangle mirrored, then the rest; under a centered encoding (``intercept`` c) Σ x₀² = n c²
    is known exactly and Σ x = G e₀ / c (x₀ = c), so Σ r x = Σ (r − ½) x + ½ G e₀ / c. With
    several intercept coordinates ``coords`` (⟨e, x⟩ = c): Σ x = G e / c and the released
    diagonal is kept (no entry of it is known; module docstring)."""
    n_upper = d * (d + 1) // 2
    G = symmetric_from_upper(values[:n_upper], d)
    u = values[n_upper:]
    if intercept is not None:
        if len(coords) == 1:
            i = coords[0]
            G[i, i] = n * intercept * intercept
            u = u + (R0 / intercept) * G[i]
        else:
            u = u + (R0 / intercept) * G[:, list(coords)].sum(axis=1)
    return Estimate(n=n, G=G, u=u)


def statistics_clip(L: float, u_weight: float = 1.0, encoding: str = "upper") -> float:
    """C ≥ ‖v_w‖: √(L⁴ + w²h²L²), h the reward factor's half range (``reward_half_range``)."""
    h = reward_half_range(encoding)
    return math.sqrt(L**4 + (u_weight * h * L) ** 2)


def clean_statistics(
    x: np.ndarray, r: np.ndarray, L: float, weights: np.ndarray | None = None,
    intercept: float | None = None, coords: tuple[int, ...] = (0,),
) -> np.ndarray:
    """Rows v_w = weights ⊙ (upper(x xᵀ), r x) after clipping x to ‖x‖ ≤ L, r to [0, 1], v_w
    to √(L⁴ + w²L²) (both encodings have ‖v_G‖ ≤ ‖x‖² ≤ L², so valid inputs are never changed).
    ``weights`` None: all ones (the ``"upper"`` encoding, w = 1); ``intercept``: the centered
    encoding's projection onto its intercept coordinates ``coords`` and (r − ½) x."""
    x = np.asarray(x, dtype=float)
    if intercept is None:
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        x = x * np.minimum(1.0, L / np.maximum(norms, 1e-300))
    else:
        x = onto_intercept(x, intercept, L, coords)
    r = np.clip(np.asarray(r, dtype=float), 0.0, 1.0)
    if intercept is not None:
        r = r - R0
    d = x.shape[1]
    iu = upper_indices(d)
    v = np.concatenate([x[:, iu[0]] * x[:, iu[1]], r[:, None] * x], axis=1)
    u_weight = 1.0
    if weights is not None:
        v = v * weights
        u_weight = float(weights[-1])
    clip = statistics_clip(L, u_weight, "centered" if intercept is not None else "upper")
    vn = np.linalg.norm(v, axis=1, keepdims=True)
    return v * np.minimum(1.0, clip / np.maximum(vn, 1e-300))


def skellam_tail_bound(variance: float, prob: float) -> float:
    """t with P(|X| ≥ t) ≤ prob for X a symmetric Skellam (or a sum of independent ones) of total
    variance V: Bernstein's inequality for Poisson variables, log E e^{t(P−λ)} ≤ λt²/(2(1 − t/3)),
    applied to both Poisson parts gives P(|X| ≥ t) ≤ 2 exp(−t²/(2(V + t/3))); solved for t."""
    if not (variance > 0 and 0 < prob < 1):
        raise ValueError("need variance > 0 and prob in (0, 1)")
    a = math.log(2.0 / prob)
    return a / 3.0 + math.sqrt(a * a / 9.0 + 2.0 * a * variance)


def exact_bernoulli(p: float, randbelow: Callable[[int], int] = secrets.randbelow) -> int:
    """1 with probability exactly p (a float in [0, 1), a dyadic rational num/2^k)."""
    num, den = p.as_integer_ratio()
    return int(randbelow(den) < num)


def batch_noise_sd(d: int, epsilon: float, delta: float, scale: float = 128.0,
                   L: float = 1.0, encoding: str = "upper", u_weight: float = 1.0,
                   intercept: float | None = None, noise: str = "devices",
                   coords: tuple[int, ...] = (0,)) -> float:
    """σ_b: the standard deviation, in the statistics' real units, of the central Skellam noise
    one batch's released sum carries per coordinate at (ε, δ): √μ / s when the devices add it
    (μ does not depend on the batch length; only its split into shares does), √(2μ) / s when
    each of the two aggregators adds μ (``noise = "aggregators"``). After the weights are
    divided out, an entry of weight b carries σ_b / b (``"frobenius"``: σ_b/√2 off the
    diagonal). ``coords``: the centered encoding's intercept coordinates."""
    _, l1, l2 = rounded_sensitivities(d, scale, L, encoding, u_weight, intercept,
                                      coords=coords)
    copies = 2.0 if noise == "aggregators" else 1.0
    return math.sqrt(copies * central_mu(epsilon, delta, l1, l2)) / scale


@lru_cache(maxsize=256)
def central_mu(epsilon: float, delta: float, l1: float, l2: float) -> float:
    """``accounting.skellam.skellam_mu``, remembered: a batch schedule builds one randomizer per
    batch length, all with the same target μ (a bisection over the accountant each time)."""
    return skellam_mu(epsilon, delta, l1, l2)


def rounded_sensitivities(
    d: int, scale: float, L: float, encoding: str = "upper", u_weight: float = 1.0,
    intercept: float | None = None, pair_bound: float | None = None,
    coords: tuple[int, ...] = (0,),
) -> tuple[float, float, float]:
    """(B, Δ₁, Δ₂): the norm bound of one user's rounded statistics and the replacement
    sensitivities of their sum (module docstring): B = s√(L⁴ + w²L²) + √n, Δ₂ = min(2B,
    s Δ_v + 2√n) with Δ_v = ``pair_sensitivity`` (or ``pair_bound``, a release of other
    statistics in the same encoding: ``randomizers.glm_skellam``)."""
    n = n_coords(d)
    root_n = math.sqrt(n)
    norm_bound = scale * statistics_clip(L, u_weight, encoding) * (1 + FLOAT_SLACK) + root_n
    if pair_bound is None:
        pair_bound = pair_sensitivity(L, encoding, u_weight, intercept, coords)
    pair = scale * pair_bound * (1 + FLOAT_SLACK) + 2 * root_n
    l1, l2 = replacement_sensitivities(norm_bound, n, pair)
    return norm_bound, l1, l2


def entry_ranges(
    d: int, scale: float, L: float, encoding: str = "upper", u_weight: float = 1.0,
    intercept: float | None = None, coords: tuple[int, ...] = (0,),
) -> tuple[list[int], list[int]]:
    """(lo, hi): the integers each released coordinate of an honest report lies in, after
    clipping, scaling by s and rounding (``rounded``). In real units, for ‖x‖ ≤ L and the
    reward factor a ∈ [0, 1] (or [−½, ½] centered):

    - diagonal x_i² ∈ [0, L²]; off-diagonal b x_i x_j ∈ ±b L²/2 (x_i² + x_j² ≤ L²);
      reward part w a x_i ∈ ±w h L;
    - with the intercept c (x₀ = c, the rest of norm ≤ ρ = √(L² − c²)): x₀² = c², x_i² ≤ ρ²,
      b x₀ x_j ∈ ±b c ρ, b x_i x_j ∈ ±b ρ²/2 (i, j ≥ 1), w a x₀ ∈ ±w h c, w a x_i ∈ ±w h ρ
      (the one intercept coordinate i₀ = ``coords[0]`` in place of 0);
    - with k ≥ 2 intercept coordinates (⟨e, x⟩ = c): the ranges without an intercept, h = ½.

    Scaled by s, a real interval [a, b] becomes the integers [⌊s a⌋, ⌈s b⌉] that unbiased
    rounding can reach. These are the ranges the Prio3 validity proof enforces (issue 40): a
    report can move each coordinate of G̃ and ũ by at most what an honest one can."""
    coordinate_weights(d, encoding, u_weight)  # validates
    iu = upper_indices(d)
    off = 1.0 if encoding == "upper" else math.sqrt(2.0)
    a_max = reward_half_range(encoding)  # |a| ≤ 1, or ½ centered
    c = intercept if encoding == "centered" and len(coords) == 1 else None
    i0 = coords[0]
    rho = math.sqrt(max(L * L - c * c, 0.0)) if c is not None else L
    lo_real: list[float] = []
    hi_real: list[float] = []
    for i, j in zip(iu[0].tolist(), iu[1].tolist(), strict=True):
        if i == j:
            if c is not None and i == i0:
                lo_real.append(c * c)
                hi_real.append(c * c)
            else:
                lo_real.append(0.0)
                hi_real.append(rho * rho if c is not None else L * L)
        else:
            if c is not None and i0 in (i, j):
                bound = off * c * rho
            else:
                bound = off * (rho * rho if c is not None else L * L) / 2.0
            lo_real.append(-bound)
            hi_real.append(bound)
    for i in range(d):
        norm = (c if i == i0 else rho) if c is not None else L
        lo_real.append(-u_weight * a_max * norm)
        hi_real.append(u_weight * a_max * norm)
    # No float slack: ``rounded`` clips s·v into [lo, hi] before rounding, so a value a
    # rounding error pushed past s·hi stays in range (and moves by ~1e-13 at most).
    lo = [math.floor(scale * v) for v in lo_real]
    hi = [math.ceil(scale * v) for v in hi_real]
    return lo, hi


class SkellamRandomizer:
    """Clip, scale by s, round unbiasedly; the Skellam noise added by the aggregators or by the
    devices (module docstring, *Where the noise is added*).

    μ is the smallest central Skellam variance giving (ε, δ) for the rounded statistics'
    sensitivities (``accounting.skellam.skellam_mu``). ``noise = "aggregators"``: each aggregator
    adds Sk(μ_a), μ_a = 2λ_a ≥ μ (``aggregator_variance``); reports carry no noise and lie in
    ``entry_ranges``. ``noise = "devices"``: each device adds Sk(σ_s²), σ_s² = μ / ⌈γ l⌉.
    """

    exact = False

    def __init__(
        self,
        d: int,
        epsilon: float,
        delta: float,
        batch_size: int,
        honest_fraction: float = 1.0,
        scale: float = 128.0,
        L: float = 1.0,
        encoding: str = "upper",
        u_weight: float = 1.0,
        intercept: float | None = None,
        noise: str = "aggregators",
        intercept_coords: tuple[int, ...] = (0,),
    ) -> None:
        if d < 1 or not L > 0 or not (scale >= 1 and math.isfinite(scale)):
            raise ValueError("need d >= 1, L > 0, scale >= 1")
        if noise not in NOISE_MODES:
            raise ValueError(f"noise must be one of {NOISE_MODES}, got {noise!r}")
        self.d, self.L, self.scale = d, float(L), float(scale)
        self.epsilon, self.delta = float(epsilon), float(delta)
        self.batch_size, self.honest_fraction = int(batch_size), float(honest_fraction)
        self.encoding, self.u_weight = encoding, float(u_weight)
        self.noise = noise
        self.weights = coordinate_weights(d, encoding, self.u_weight)
        check_intercept(encoding, intercept, self.L)
        self.intercept = None if intercept is None else float(intercept)
        # E: ⟨e, x⟩ = c under "centered" (module docstring, *Encodings*); (0,) is x[0] = c.
        self.intercept_coords = check_intercept_coords(intercept_coords, d)
        self.n = n_coords(d)
        self._iu = upper_indices(d)
        self.n_upper = d * (d + 1) // 2
        self.clip = statistics_clip(self.L, self.u_weight, encoding)
        self.norm_bound, self.l1, self.l2 = rounded_sensitivities(
            d, self.scale, self.L, encoding, self.u_weight, self.intercept, self.pair_bound(),
            self.intercept_coords)
        self.mu_target = central_mu(epsilon, delta, self.l1, self.l2)
        lo, hi = entry_ranges(d, self.scale, self.L, encoding, self.u_weight, self.intercept,
                              self.intercept_coords)
        self.range_lo, self.range_hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
        self.honest: int | None
        if noise == "aggregators":
            self.honest = None
            # λ_a: each aggregator's Poisson rate, Sk(2λ_a) with 2λ_a ≥ μ (rounded up).
            self.lam = rational_rate(self.mu_target / 2.0)
            self.aggregator_variance = float(2 * self.lam)
            self.share_variance = 0.0
            # What the two aggregators' noise adds to one batch sum, per coordinate.
            self.batch_noise_variance = 2.0 * self.aggregator_variance
            self.offset = int(max(np.abs(self.range_lo).max(), np.abs(self.range_hi).max()))
        else:
            self.honest = honest_shares(self.honest_fraction, self.batch_size)
            self.lam = rational_rate(self.mu_target / (2.0 * self.honest))
            self.aggregator_variance = 0.0
            self.share_variance = float(2 * self.lam)
            self.batch_noise_variance = 0.0
            # Packing offset O (``shared.crypto.slots``): an honest value |z_i + share| exceeds O
            # with probability below 2⁻⁶⁴ per report (|z_i| ≤ B; Bernstein tail of the share,
            # union over the n coordinates).
            self.offset = math.ceil(
                self.norm_bound + skellam_tail_bound(self.share_variance, 2.0**-64 / self.n)
            )

    def pair_bound(self) -> float:
        """Δ_v of the released statistics (``pair_sensitivity``; a subclass releasing other
        statistics in the same encoding states its own)."""
        return pair_sensitivity(self.L, self.encoding, self.u_weight, self.intercept,
                                self.intercept_coords)

    @property
    def aggregated_noise(self) -> bool:
        """True when the aggregators add the noise (reports carry none)."""
        return self.noise == "aggregators"

    def batch_noise(self, rng: np.random.Generator) -> np.ndarray:
        """The simulator's stand-in for the two aggregators' noise on one batch sum:
        Sk(2λ_a) + Sk(2λ_a) = Poisson(2λ_a) − Poisson(2λ_a) per coordinate (zero when the
        devices add the noise: it is in their rows)."""
        if not self.aggregated_noise:
            return np.zeros(self.n, dtype=np.int64)
        lam = 2.0 * float(self.lam)
        return (rng.poisson(lam, size=self.n) - rng.poisson(lam, size=self.n)).astype(np.int64)

    def aggregator_sampler(self, randbits: Callable[[int], int] = secrets.randbits
                           ) -> ExactSkellam:
        """An aggregator's exact sampler of Sk(μ_a) (``exact_poisson``), drawing its bits from
        ``randbits`` (the OS CSPRNG by default; the shuffler passes a keyed stream so that a
        batch delivered twice carries the same noise)."""
        if not self.aggregated_noise:
            raise ValueError("the devices add this task's noise (noise = 'devices')")
        return ExactSkellam(self.aggregator_variance, randbits)

    def sum_encoding(self) -> SumEncoding:
        """The c = d(d+3)/2 signed values of a report, each as v + O ∈ [0, 2O]; with the noise
        added by the aggregators also each entry's honest range [lo_i, hi_i] (v − lo_i ∈
        [0, hi_i − lo_i], at least 1 wide) and the aggregators' variance
        (``base.Summable``)."""
        o = int(self.offset)
        if not self.aggregated_noise:
            return SumEncoding(int(self.n), 2 * o, o)
        lo = [int(v) for v in self.range_lo]
        widths = tuple(max(1, int(h) - v) for v, h in zip(lo, self.range_hi, strict=True))
        return SumEncoding(int(self.n), 2 * o, o, maxima=widths, offsets=tuple(-v for v in lo),
                           noise_variance=float(self.aggregator_variance))

    def summand(self, row: np.ndarray) -> np.ndarray:
        """A report's signed integers are what it adds to the batch sum (``base.Summable``)."""
        return np.asarray(row)

    def sum_bound(self, count: int) -> float:
        """|S_j| an honest sum of ``count`` reports exceeds with probability below 2⁻⁶⁴ (per
        batch, union over coordinates): count·B plus the tail of the batch's noise. The analyzer
        refuses a decoded sum beyond it (``slots.unpack_signed``)."""
        variance = count * self.share_variance + self.batch_noise_variance
        return count * self.norm_bound + skellam_tail_bound(variance, 2.0**-64 / self.n)

    @property
    def width(self) -> int:
        return self.n

    def ledger(self, observers: str = SECURE_SUM_OBSERVERS_GENERIC) -> PrivacyLedger:
        """The mechanism's ledger; ``observers``: what the secure sum's parties see
        (``accounting.ledger.observers_sentence`` of the task's transport)."""
        words = LedgerWords(self.scale, self._encoding_words(), observers)
        if self.aggregated_noise:
            return aggregator_ledger(self.aggregator_variance, self.l1, self.l2, self.delta, words)
        return ddp_ledger(self.share_variance, self.honest_fraction, self.batch_size, self.l1,
                          self.l2, self.delta, words)

    def _encoding_words(self) -> str | None:
        encoding = None
        if self.encoding != "upper":
            pair = pair_sensitivity(self.L, self.encoding, self.u_weight, self.intercept,
                                    self.intercept_coords)
            where = ("x₀" if self.intercept_coords == (0,) else
                     f"Σ x_i over i in {list(self.intercept_coords)}")
            reward = "r x" if self.intercept is None else (
                f"(r − ½) x with {where} = {self.intercept:g}")
            encoding = (f"{self.encoding} (off-diagonals of x xᵀ × √2, {reward} × "
                        f"{self.u_weight:g}; "
                        f"joint pair bound Δ_v={pair:.6g})")
        return encoding

    def statistics(self, x: np.ndarray, r: np.ndarray) -> np.ndarray:
        """The weighted clean statistics v_w of this encoding (``clean_statistics``)."""
        return clean_statistics(x, r, self.L, self.weights, self.intercept,
                                self.intercept_coords)

    # -- simulator path (injected numpy Generator) ------------------------------------------
    def round_rows(self, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Unbiased randomized rounding of every entry of y to an adjacent integer."""
        low = np.floor(y)
        return (low + (rng.random(y.shape) < (y - low))).astype(np.int64)

    def check(self, x: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``check_centered_inputs`` (the statistics then use c exactly)."""
        return check_centered_inputs(x, r, self.d, self.L, self.intercept, "centered",
                                     self.intercept_coords)

    def scaled(self, x: np.ndarray, r: np.ndarray) -> np.ndarray:
        """s · v_w, each entry clipped into its honest range [lo_i, hi_i] (``entry_ranges``):
        a no-op but for float rounding at the edges, so the rounded value stays in range."""
        y = self.scale * self.statistics(x, r)
        return np.clip(y, self.range_lo, self.range_hi)

    def randomize(self, x: np.ndarray, r: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x, r = self.check(x, r)
        z = self.round_rows(self.scaled(x, r), rng)
        if self.aggregated_noise:
            return z
        lam = float(self.lam)
        return z + rng.poisson(lam, size=z.shape) - rng.poisson(lam, size=z.shape)

    # -- device path (OS CSPRNG, exact sampling) ---------------------------------------------
    @cached_property
    def exact_noise(self) -> ExactSkellam | None:
        """The exact share sampler (its CDF table is built once, on first use); None when the
        aggregators add the noise (no share)."""
        return ExactSkellam(self.share_variance) if not self.aggregated_noise else None

    def rounded(
        self, x: np.ndarray, r: float, randbelow: Callable[[int], int] = secrets.randbelow
    ) -> list[int]:
        """One user's rounded statistics z (no noise), every coin from the CSPRNG."""
        xs, rs = self.check(np.asarray(x, dtype=float)[None, :], np.array([r]))
        y = self.scaled(xs, rs)[0]
        out = []
        for value in y.tolist():
            low = math.floor(value)
            out.append(low + exact_bernoulli(value - low, randbelow))
        if math.sqrt(sum(v * v for v in out)) > self.norm_bound:
            raise AssertionError("rounded statistics exceed the stated norm bound")
        return out

    def device_report(self, x: np.ndarray, r: float) -> list[int]:
        """What a device packs and encrypts: its rounded statistics, each in its honest range
        (``noise = "aggregators"``), or those plus an exact Skellam share per coordinate
        (``"devices"``). There, a value beyond the packing offset ±O (probability below 2⁻⁶⁴ per
        report) gets its share drawn again: the share's law is then Skellam truncated at total
        variation below 2⁻⁶⁴ per report, which adds at most l·2⁻⁶⁴ (< 10⁻¹⁵) to the central
        δ."""
        z = self.rounded(x, r)
        noise = self.exact_noise
        if noise is None:  # the aggregators add the noise
            return z
        out = []
        for v in z:
            value = v + noise.sample()
            while abs(value) > self.offset:
                value = v + noise.sample()
            out.append(value)
        return out

    # -- analyzer side -------------------------------------------------------------------------
    def sufficient(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray(rows, dtype=np.int64).sum(axis=0)

    def estimate(self, stat: np.ndarray, n: int) -> Estimate:
        """(G, u) ≈ (Σ x xᵀ, Σ r x) from the decoded batch sum S: S / (s · weights), upper
        triangle mirrored."""
        values = np.asarray(stat, dtype=float)
        if values.shape != (self.n,):
            raise ValueError(f"expected a statistic of length {self.n}, got {values.shape}")
        return unweighted_estimate(values / (self.scale * self.weights), self.d, n,
                                   self.intercept, self.intercept_coords)

    def _proxy(self) -> float:
        """Per report and released coordinate, in real units before the weights are divided out:
        rounding, plus the report's share of its batch's noise (its own share, or the
        aggregators' noise spread over the batch's l reports)."""
        per_report = self.share_variance + self.batch_noise_variance / self.batch_size
        return (0.25 + SKELLAM_SUBGAUSSIAN * per_report) / self.scale**2

    def matrix_proxy(self) -> float:
        """The largest per-entry proxy of G̃'s noise (the diagonal's: weight 1)."""
        return self._proxy()

    def offdiag_proxy(self) -> float:
        """The per-entry proxy of G̃'s off-diagonal noise (what sets ‖H‖ ≈ 2σ_off√d)."""
        return self._proxy() / float(self.weights[1]) ** 2 if self.d > 1 else self._proxy()

    def vector_proxy(self) -> float:
        """ũ's per-entry proxy: σ²/w², plus (½/c)² × the off-diagonal proxy σ²/2 that the
        centered encoding's reconstruction ½ G̃ e₀ / c brings; with k ≥ 2 intercept
        coordinates ½ G̃ e / c sums one diagonal and k − 1 off-diagonal entries at most:
        (½/c)² (k + 1) σ²/2."""
        base = self._proxy() / self.u_weight**2
        if self.intercept is None:
            return base
        k = len(self.intercept_coords)
        entries = 0.5 if k == 1 else (k + 1) / 2
        return base + (R0 / self.intercept) ** 2 * self._proxy() * entries

    def to_bytes(self, row: np.ndarray) -> bytes:
        row = np.asarray(row)
        if row.shape != (self.n,) or row.dtype.kind not in "iu":
            raise ValueError(f"a report is {self.n} integers")
        return row.astype("<i8").tobytes()

    def from_bytes(self, data: bytes) -> np.ndarray:
        """Decode and refuse entries an honest report reaches with probability below 2⁻⁴⁰:
        |z_i| ≤ B plus the share's Bernstein tail (refusing is post-processing)."""
        if len(data) != 8 * self.n:
            raise ValueError(f"a report is {8 * self.n} bytes, got {len(data)}")
        row = np.frombuffer(data, dtype="<i8").astype(np.int64)
        if self.aggregated_noise:
            if ((row < self.range_lo) | (row > self.range_hi)).any():
                raise ValueError("report entry outside its honest range (entry_ranges)")
            return row
        limit = self.norm_bound + skellam_tail_bound(self.share_variance, 2.0**-40 / self.n)
        if (np.abs(row) > limit).any():
            raise ValueError(f"report entry beyond what the mechanism produces (|z| ≤ {limit:.0f})")
        return row
