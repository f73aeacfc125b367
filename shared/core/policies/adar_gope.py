"""AdaR-GOPE — Azize & Basu (AAAI 2023), Algorithm 3: G-optimal-design phased elimination over a
fixed arm set, (α, ε)-RDP against the trusted analyzer's outputs (``central`` threat model).

Phase ℓ = 1, 2, … (Alg. 3 lines 4–12), on the active arms A_ℓ (A_1 = all K arms):
1. β_ℓ = 2^{−ℓ}; π_ℓ a G-optimal design of A_ℓ to tolerance ``design_tol``
   (``shared.core.design``: g(π_ℓ) ≤ r(1 + tol), r = dim span A_ℓ; the paper's g = d);
2. each support arm a is played T_ℓ(a) = ⌈π_ℓ(a) c_ℓ⌉ times (Eq. 8), with
       c_ℓ = 8 g Λ_ℓ / β_ℓ² + 2 g σ_N √(2 s Λ_ℓ) / β_ℓ,   Λ_ℓ = ln(4 K ℓ(ℓ+1)/δ),
   g = g(π_ℓ), s = |Supp π_ℓ| and σ_N the noise below. With g = d, s = d(d+1)/2 (Kiefer–Wolfowitz's
   support bound) and σ_N² = 2α/ε this is Eq. 8 verbatim; we use the values of the design actually
   computed, which is what Corollary 16's proof needs (V_ℓ ⪰ c_ℓ V(π_ℓ) gives g_t² ≤ g/c_ℓ, and Z is
   g_t² σ_N √s-sub-Gaussian because |aᵀV⁻¹b| ≤ g_t² for each of the s noise terms);
3. θ̃_ℓ = V_ℓ⁺ (Σ_t A_t R_t + Σ_{b ∈ Supp π_ℓ} b N_b), V_ℓ = Σ_t A_t A_tᵀ over the phase,
   N_b i.i.d. N(0, σ_N²) (Step 3–4; V_ℓ⁺ the pseudo-inverse when A_ℓ does not span R^d);
4. A_{ℓ+1} = {a ∈ A_ℓ : max_{b ∈ A_ℓ} ⟨θ̃_ℓ, b − a⟩ ≤ 2β_ℓ} (line 12). One arm left: it is
   played for ever.
By Corollary 16 every |⟨θ̃_ℓ − θ*, a⟩| ≤ β_ℓ with probability 1 − δ/(K ℓ(ℓ+1)), so with
probability 1 − δ the best arm is never eliminated (App. C.3, Step 2).

Privacy (Thm 7, App. A). Σ_t A_t R_t = Σ_b b S_b with S_b the sum of the phase's rewards of arm
b; one user's reward in [0, 1] moves the vector (S_b)_b by at most Δ = 1 in ℓ2, so releasing
(S_b + N_b)_b with σ_N² = α Δ²/(2ε) is (α, ε)-RDP (Mironov 2017, Prop. 7; the paper's
σ² = 2α/ε is the same for rewards in [−1, 1], Δ = 2). θ̃_ℓ, the eliminations, the next design
and every action are post-processing; each user's reward enters one phase (parallel
composition), so the whole run is (α, ε)-RDP. The ledger converts it to (ε, δ) like AdaR-OFUL's.

``confidence_scale`` multiplies c_ℓ by its square: the phases shrink and the confidence width
they guarantee becomes β_ℓ / scale while the elimination threshold stays 2β_ℓ — the analogue of
scaling β in the optimistic policies (1 = the paper; post-processing, privacy unchanged).

Schedule. The phase's plays are the multiset {a repeated T_ℓ(a) times} in an order fixed when
the phase starts (``PhaseModel.decide``; independent of the rewards, so the fixed-design
analysis holds); the published ``PhaseModel`` hands the n next users their arms. Through the
services a device samples its arm from π_ℓ instead (``gope_service``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger, SecureSum
from privbandit.shared.core.accounting.rdp import gaussian_rdp_sigma
from privbandit.shared.core.design import g_optimal_design
from privbandit.shared.core.policies.base import Policy
from privbandit.shared.core.policies.config import AdaRGOPEConfig
from privbandit.shared.core.randomizers.identity import IdentityRandomizer

MAX_WINDOW = 8192
REWARD_SENSITIVITY = 1.0  # one reward in [0, 1] moves one per-arm sum by at most 1


@dataclass(frozen=True)
class PhaseModel:
    """What AdaR-GOPE publishes for a phase: the active arms, the design's support and play
    counts, the play order's seed and how far into the phase the next user is."""

    version: int
    phase: int
    beta: float
    active: np.ndarray
    support: np.ndarray
    counts: np.ndarray
    order_seed: int
    offset: int = 0
    reports: int = 0
    # π_ℓ on ``support`` (the design's weights, renormalised); None in states saved before it.
    weights: np.ndarray | None = None

    @property
    def length(self) -> float:
        """Users in the phase (infinite once a single arm is left)."""
        return math.inf if self.active.size == 1 else int(self.counts.sum())

    def decide(self, X: np.ndarray) -> np.ndarray:
        """The arms of the next n = X.shape[0] users (X's arms are the bound arm set).

        Position i of the phase plays the support arm whose block of the concatenated play
        counts holds j = (P i + s) mod T_ℓ: a stride permutation (P coprime to T_ℓ, near the
        golden-ratio point 0.618 T_ℓ, so the arms are spread evenly over the phase; s from the
        analyzer's generator), computed per user without materialising the phase.
        """
        total = int(self.counts.sum())
        stride = coprime_stride(total)
        i = (self.offset + np.arange(X.shape[0], dtype=np.int64)) % total
        j = (stride * i + self.order_seed % total) % total
        return self.support[np.searchsorted(np.cumsum(self.counts), j, side="right")]

    def propensity(self, X: np.ndarray, a: np.ndarray) -> np.ndarray:
        """P(a_i) of ``decide``'s arms over the phase's random start s (``order_seed``, drawn
        uniformly from [0, 2⁶³) by the analyzer): j = (P i + s) mod T_ℓ is uniform on
        {0, …, T_ℓ − 1} for every position i, so arm b is played with probability
        T_ℓ(b) / T_ℓ (its share of the rounded play counts ⌈π_ℓ(b) c_ℓ⌉; 0 off the support).
        (Uniform up to T_ℓ / 2⁶³ from s mod T_ℓ.) The services' devices draw from π_ℓ instead:
        ``probability``."""
        a = np.asarray(a, dtype=np.int64)
        share = np.zeros(int(max(self.support.max(), a.max(initial=0))) + 1)
        share[self.support] = self.counts / float(self.counts.sum())
        return share[a]

    def distribution(self, X: np.ndarray) -> np.ndarray:
        """(n, K): every user's law of ``decide``'s arm, ``propensity`` of each of the K arms."""
        K = X.shape[1]
        return np.broadcast_to(self.propensity(X, np.arange(K)), X.shape[:2]).copy()

    def probability(self, arm: int) -> float:
        """π_ℓ(arm): the probability with which ``sample`` (the services' devices) draws
        ``arm`` (0 off the design's support)."""
        weights = self.weights if self.weights is not None else self.counts.astype(float)
        hit = np.flatnonzero(self.support == arm)
        return float(weights[hit[0]] / weights.sum()) if hit.size else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "phase": self.phase, "beta": self.beta,
                "active": self.active.tolist(), "support": self.support.tolist(),
                "counts": self.counts.tolist(), "order_seed": self.order_seed,
                "offset": self.offset, "reports": self.reports,
                "weights": None if self.weights is None else self.weights.tolist()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PhaseModel:
        return cls(version=int(data["version"]), phase=int(data["phase"]),
                   beta=float(data["beta"]), active=np.asarray(data["active"], dtype=np.int64),
                   support=np.asarray(data["support"], dtype=np.int64),
                   counts=np.asarray(data["counts"], dtype=np.int64),
                   order_seed=int(data["order_seed"]), offset=int(data["offset"]),
                   reports=int(data["reports"]),
                   weights=None if data.get("weights") is None
                   else np.asarray(data["weights"], dtype=float))

    def sample(self, u: float) -> int:
        """The arm a device draws from π_ℓ with its own uniform u ∈ [0, 1) (inverse CDF over
        ``support``: the first arm with u·Σπ < Σ_{b ≤ a} π_b; the services' rule)."""
        weights = self.weights if self.weights is not None else self.counts.astype(float)
        cum = np.cumsum(weights)
        pick = int(np.searchsorted(cum, u * cum[-1], side="right"))
        return int(self.support[min(pick, cum.shape[0] - 1)])


def coprime_stride(n: int) -> int:
    """The smallest P ≥ 0.618 n with gcd(P, n) = 1 (1 for n ≤ 2)."""
    p = max(1, int(0.6180339887 * n))
    while math.gcd(p, n) != 1:
        p += 1
    return p


class UnboundModel:
    """Version 0 before the arm set is known: deciding is an error."""

    version = 0

    def decide(self, X: np.ndarray) -> np.ndarray:
        raise ValueError("adar-gope plays a fixed arm set: use --env fixed-linear")

    def to_dict(self) -> dict[str, Any]:
        return {"version": 0}


class AdaRGOPE(Policy[AdaRGOPEConfig, IdentityRandomizer]):
    algo = "adar-gope"
    threat_model = "central"

    def __init__(self, config: AdaRGOPEConfig, rng: np.random.Generator | None = None) -> None:
        if config.confidence_scale <= 0:
            raise ValueError("adar-gope needs confidence_scale > 0 (it scales phase lengths)")
        super().__init__(config, rng)
        self.arms: np.ndarray | None = None
        self._reset_phase_sums()
        self.eliminated: list[int] = []

    def _make_randomizer(self) -> IdentityRandomizer:
        return IdentityRandomizer(self.config.d, self.config.L)

    def _initial_model(self) -> Any:
        return UnboundModel()

    def _model_from_dict(self, data: dict[str, Any]) -> Any:
        return PhaseModel.from_dict(data) if "phase" in data else UnboundModel()

    @property
    def noise_sigma(self) -> float:
        """σ_N = √(α Δ² / (2ε)), Δ = 1: each phase's per-arm reward sums are (α, ε)-RDP."""
        c = self.config
        return gaussian_rdp_sigma(c.alpha, c.epsilon, REWARD_SENSITIVITY)

    def bind_arms(self, arms: np.ndarray | None) -> None:
        if arms is None:
            raise ValueError("adar-gope plays a fixed arm set: use --env fixed-linear")
        arms = np.asarray(arms, dtype=float)
        if arms.ndim != 2 or arms.shape[1] != self.config.d or arms.shape[0] < 1:
            raise ValueError(f"arms must have shape (K, {self.config.d})")
        if (np.linalg.norm(arms, axis=1) > self.config.L * (1 + 1e-9)).any():
            raise ValueError(f"arms must satisfy ||a|| <= L = {self.config.L}")
        self.arms = arms
        self.model = self._phase_model(1, np.arange(arms.shape[0]), version=0)

    def phase_factor(self, phase: int, g: float, support: int) -> float:
        """c_ℓ of Eq. 8 with the design's g and support size (module doc), times scale²."""
        c = self.config
        assert self.arms is not None
        beta = 2.0**-phase
        lam = math.log(4 * self.arms.shape[0] * phase * (phase + 1) / c.failure_prob)
        factor = 8 * g * lam / beta**2 + 2 * g * self.noise_sigma * math.sqrt(
            2 * support * lam) / beta
        return c.confidence_scale**2 * factor

    def _phase_model(self, phase: int, active: np.ndarray, version: int) -> PhaseModel:
        assert self.arms is not None
        if active.size == 1:
            support, counts = active, np.ones(1, dtype=np.int64)
            weights = np.ones(1)
        else:
            design = g_optimal_design(self.arms[active], self.config.design_tol)
            keep = design.support
            support = active[keep]
            c = self.phase_factor(phase, design.g, keep.size)
            counts = np.ceil(design.weights[keep] * c).astype(np.int64)
            weights = design.weights[keep] / design.weights[keep].sum()
        return PhaseModel(version=version, phase=phase, beta=2.0**-phase, active=active,
                          support=support, counts=counts,
                          order_seed=int(self.rng.integers(2**63)), reports=self.reports,
                          weights=weights)

    def _reset_phase_sums(self) -> None:
        d = self.config.d
        self.V = np.zeros((d, d))
        self.u = np.zeros(d)
        self.pos = 0

    def window(self) -> int:
        model = self.model
        if not isinstance(model, PhaseModel):
            return MAX_WINDOW
        return int(min(MAX_WINDOW, model.length - self.pos))

    def ingest(self, rows: np.ndarray) -> int:
        model = self.model
        if not isinstance(model, PhaseModel):
            raise ValueError("adar-gope: no arm set bound")
        rows = np.asarray(rows, dtype=float)
        d = self.config.d
        k = int(min(rows.shape[0], model.length - self.pos))
        x, r = rows[:k, :d], rows[:k, d]
        self.V += x.T @ x
        self.u += x.T @ r
        self.pos += k
        self.reports += k
        if self.pos >= model.length:
            self._end_phase(model)
        else:
            self.model = replace(model, offset=self.pos, reports=self.reports)
        return k

    def private_estimate(self, model: PhaseModel) -> np.ndarray:
        """θ̃_ℓ = V_ℓ⁺ (Σ A_t R_t + Σ_{b ∈ Supp} b N_b) (Alg. 3 Steps 3–4)."""
        assert self.arms is not None
        noise = self.rng.normal(0.0, self.noise_sigma, size=model.support.size)
        return np.linalg.pinv(self.V, hermitian=True) @ (self.u + self.arms[model.support].T
                                                         @ noise)

    def _end_phase(self, model: PhaseModel) -> None:
        assert self.arms is not None
        theta = self.private_estimate(model)
        values = self.arms[model.active] @ theta
        keep = values.max() - values <= 2 * model.beta
        self.eliminated.extend(model.active[~keep].tolist())
        self._reset_phase_sums()
        self.model = self._phase_model(model.phase + 1, model.active[keep],
                                       version=model.version + 1)

    def ledger(self, T: int | None = None, aggregation: Aggregation = "reports",
               secure_sum: SecureSum | None = None) -> PrivacyLedger:
        from privbandit.shared.core.accounting import ledgers

        c = self.config
        ledger = ledgers.central_ledger(c.alpha, c.epsilon, c.delta)
        single_order = ledger.single_order_epsilon  # central_ledger states it
        assert single_order is not None
        return ledger.model_copy(update={"accounting": (
            f"(α, ε)-RDP of the Gaussian mechanism on each phase's per-arm reward sums "
            f"(Azize–Basu Alg. 3, Thm 7), α={c.alpha:g}, ε={c.epsilon:g}, "
            f"σ_N={self.noise_sigma:.4g} (Δ = 1, rewards in [0, 1]); (ε, δ) from the full RDP "
            f"curve by dp-accounting "
            f"(single-order conversion at α: {single_order:.4g}); "
            f"trusted analyzer, no local guarantee; each reward enters one phase (parallel "
            f"composition); active arms, designs and actions are post-processing")})

    def _extra_state(self) -> dict[str, Any]:
        return {"arms": None if self.arms is None else self.arms.tolist(), "V": self.V.tolist(),
                "u": self.u.tolist(), "pos": self.pos, "eliminated": list(self.eliminated)}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        self.arms = None if state["arms"] is None else np.asarray(state["arms"], dtype=float)
        self.V = np.asarray(state["V"], dtype=float)
        self.u = np.asarray(state["u"], dtype=float)
        self.pos = int(state["pos"])
        self.eliminated = [int(a) for a in state["eliminated"]]
