"""LDP-GLB — Zheng et al. (NeurIPS 2020), Algorithm 3: GLOC (Jun et al. 2017) with locally
private online gradient descent, for generalized linear (here logistic) rewards.

Device (lines 5–9): play x_t = argmax ⟨x, θ̃⟩ + β ‖x‖_{Ṽ⁻¹} from the broadcast model, observe
y_t, and send (upper(x xᵀ) + B, z x + ξ, ∇ℓ_t(θ̂) + ρ) with z = ⟨x, θ̂⟩ (``randomizers.glb``,
(ε, δ)-LDP per report).
Analyzer (line 11):
    Ṽ_t = Σ (x xᵀ + B) + c_t I,  ũ_t = Σ (z x + ξ),  θ̃_t = Ṽ_t⁻¹ ũ_t  (relabelled ridge),
    θ̂ ← Π_W(θ̂ − ζ Σ (∇ℓ + ρ))  (noisy OGD on W = S-ball),
with c_t = 2Υ_t, Υ_t = σ√t (4√d + 2 ln(2T/α)) (line 3, as in Alg. 5: inherited from
``ldp_linucb``). Publication cadence: every ``update_every`` reports (paper: 1); the OGD step then
takes the summed gradients of those reports, all computed at the same broadcast θ̂ (a mini-batch
step; cadence is post-processing and changes no report's privacy).

Versions (the services). θ̂ is published with (θ̃, V, β) in one ``GLBModel``; a report row is
``[v, …]`` with v the version whose θ̂_v the device used (``VersionedGLBRandomizer``; in the
simulator every row names the current version). A report made under an older θ̂_v is still
summed, z x and gradient alike: GLOC's online-to-confidence-set conversion only needs z_t and
the gradient of loss t to use the same iterate, which the device guarantees; the analyzer's
learner is then OGD with delayed gradients (counted in ``stale``). A version never published
is refused (``admit_row``).

Step size: ζ = Θ(1/√T) (line 2). We use OGD's standard ζ = D/(G√T) with D = 2S the diameter of
W and G = L + σ√d the norm of a noisy gradient (Lemma 1's Lipschitz constant C + σ√d with the
gradient bound C = L); ``ogd_step`` overrides it.

Width: line 3 gives β_t² = Õ((Cσ/μ)√(d t)) with C ≥ |g| (= 1 for the logistic g) and μ the
smallest slope g' on the reachable logits, μ = g'(L S); Lemma 2 hides its constants and
logarithms, so we take β_t² = (Cσ/μ)√(d t) · ln(T/α) — constant 1 — which has no proved coverage;
``confidence_scale`` scales it like every width (post-processing). ``regularizer = "clip"``
replaces c_t and β by the practical eigenvalue clipping and the OFUL width, as for Alg. 5.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from privbandit.shared.core.policies.config import LDPGLBConfig
from privbandit.shared.core.policies.ldp_linucb import LDPLinUCB
from privbandit.shared.core.policies.model import GLBModel, Model
from privbandit.shared.core.randomizers.glb import VersionedGLBRandomizer

LINK_BOUND = 1.0  # C: |g| ≤ 1 for the logistic link


def logistic_slope(z: float) -> float:
    """g'(z) = g(z)(1 − g(z)) for the logistic g; its minimum on |z| ≤ a is g'(a)."""
    e = math.exp(-abs(z))
    return e / (1 + e) ** 2


class LDPGLB(LDPLinUCB):
    algo = "ldp-glb"
    threat_model = "ldp"
    config: LDPGLBConfig
    randomizer: VersionedGLBRandomizer  # type: ignore[assignment]  # wraps, not subclasses
    model: GLBModel

    def __init__(self, config: LDPGLBConfig, rng: np.random.Generator | None = None) -> None:
        super().__init__(config, rng)
        self.grad_pending = np.zeros(config.d)
        # Reports whose θ̂ was older than the one current when they were fed (delayed OGD).
        self.stale = 0

    def _make_randomizer(self) -> VersionedGLBRandomizer:  # type: ignore[override]  # as above
        return self.randomizer_of(self.config)

    @classmethod
    def randomizer_of(  # type: ignore[override]  # as above (and its config is LDPGLBConfig)
        cls, config: LDPGLBConfig
    ) -> VersionedGLBRandomizer:
        # Without the policy, as ``LDPLinUCB.randomizer_of``.
        c = config
        return VersionedGLBRandomizer(c.d, c.epsilon, c.delta, c.L, c.S)

    def _initial_model(self) -> GLBModel:
        base = super()._initial_model()
        return GLBModel(version=0, theta=base.theta, V=base.V, beta=base.beta, reports=0,
                        theta_hat=np.zeros(self.config.d))

    def _model_from_dict(self, data: dict[str, Any]) -> GLBModel:
        return GLBModel.from_dict(data)

    def _publish(self, theta: np.ndarray, V: np.ndarray, beta: float) -> None:
        super()._publish(theta, V, beta)
        self._with_anchor(self.model)

    def _with_anchor(self, model: Model) -> None:
        """Publish ``model``'s (θ̃, V, β) with the current θ̂ under ``model.version``, and tag
        the rows made from now on (simulator) with that version."""
        self.model = GLBModel(version=model.version, theta=model.theta, V=model.V,
                              beta=model.beta, reports=self.reports,
                              theta_hat=self.theta_hat.copy(), chol=model.chol)
        self.randomizer.set_anchor(self.theta_hat, model.version)

    def admit_row(self, row: np.ndarray) -> None:
        """Refuse a report naming a model version this analyzer never published (its θ̂ is
        unknown to anyone honest); older versions are fine (module doc: delayed OGD)."""
        v = int(row[0])
        if v > self.model.version:
            raise ValueError(f"model version {v} was never published (latest "
                             f"{self.model.version})")

    @property
    def theta_hat(self) -> np.ndarray:
        """The OGD iterate θ̂ that devices use for z and the gradient."""
        return self.randomizer.anchor

    @property
    def step(self) -> float:
        """ζ (module doc)."""
        c = self.config
        if c.ogd_step is not None:
            return c.ogd_step
        G = c.L + self.randomizer.sigma * math.sqrt(c.d)
        return 2 * c.S / (G * math.sqrt(c.horizon))

    def ingest(self, rows: np.ndarray) -> int:
        rows = np.asarray(rows, dtype=float)
        k = min(rows.shape[0], self.window())
        stale = int((rows[:k, 0] < self.model.version).sum())
        consumed = super().ingest(rows)
        self.stale += stale
        return consumed

    def _accumulate(self, stat: np.ndarray, n: int) -> bool:
        if not super()._accumulate(stat, n):
            return False
        self.grad_pending += self.randomizer.estimate(stat, n).grad
        return True

    def ogd_step(self) -> None:
        """θ̂ ← Π_W(θ̂ − ζ Σ (∇ℓ + ρ)) over the reports since the last step (line 11)."""
        theta = self.theta_hat - self.step * self.grad_pending
        norm = float(np.linalg.norm(theta))
        if norm > self.config.S:
            theta *= self.config.S / norm
        self.randomizer.set_anchor(theta)
        self.grad_pending = np.zeros(self.config.d)

    def candidate(self) -> tuple[np.ndarray, np.ndarray, float] | None:
        """The OGD step, then (Ṽ, θ̃, β) as for Alg. 5 (θ̂ and the model are published together).
        If (Ṽ, θ̃, β) cannot be computed (``skipped``), θ̂ has moved all the same: it is
        published with the previous (θ̃, V, β) under a new version, so devices always hold the
        θ̂ the analyzer's next step starts from."""
        self.ogd_step()
        cand = super().candidate()
        if cand is None:
            self._with_anchor(replace(self.model, version=self.model.version + 1))
        return cand

    def paper_beta(self, t: int, c: float) -> float:
        """β_t = √((Cσ/μ) √(d t) ln(T/α)) (line 3 with constant 1; module doc)."""
        cfg = self.config
        mu = logistic_slope(cfg.L * cfg.S)
        log_term = math.log(cfg.horizon / cfg.failure_prob)
        return math.sqrt(LINK_BOUND * self.randomizer.sigma / mu * math.sqrt(cfg.d * t)
                         * log_term)

    def report_accounting(self) -> str:
        return ("report (upper(x xᵀ), z x, ∇ℓ(θ̂)) as one Gaussian mechanism (Zheng et al. "
                f"Alg. 3), Δ = {self.randomizer.sensitivity:.4g}, "
                f"σ = {self.randomizer.sigma:.4g}; ")

    def _extra_state(self) -> dict[str, Any]:
        return {**super()._extra_state(), "theta_hat": self.theta_hat.tolist(),
                "grad_pending": self.grad_pending.tolist(), "stale": self.stale}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        super()._load_extra_state(state)
        self.randomizer.set_anchor(np.asarray(state["theta_hat"], dtype=float),
                                   self.model.version)
        self.grad_pending = np.asarray(state["grad_pending"], dtype=float)
        self.stale = int(state.get("stale", 0))
