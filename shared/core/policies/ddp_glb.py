"""``ddp-glb``: a generalized linear (logistic) contextual bandit under distributed DP — the
secure sum and aggregators' Skellam noise of ``ddp-linucb`` over the GLM statistics of
``randomizers.glm_skellam``.

Anchor: Sarmasarkar, *Shuffle and Joint Differential Privacy for Generalized Linear Contextual
Bandits* (arXiv 2602.00417). Its private algorithms keep two private statistics — the Gram
matrix V of warm-up rounds and the Hessian-weighted Gram matrix H = Σ g'(⟨x, θ_w⟩) x xᵀ/e — by
tree aggregation, switch rarely (re-fit when H outgrows the last fit's H by a constant factor),
and fit the MLE by private convex optimisation (DP-SGD) over the curator's raw data; the arm
maximises ⟨x, θ̂⟩ + β ‖x‖_{H⁻¹} with β = O(√(d log T)) free of κ.

What a secure sum can carry, and how this adapts it. Here nobody holds raw data: a device
reports once, and only batch sums of fixed-size integer vectors, with noise, reach the analyzer
(the ``ddp-linucb`` transport, central (ε, δ)-DP per batch). An MLE iteration needs every user's
gradient at the current iterate, so the paper's DP-SGD cannot run; what can be summed is each
user's local quadratic surrogate of her log-likelihood at the anchor θ̂ she was served
(H_i = g'(z) x xᵀ, b_i = (g'(z) z + y − g(z)) x, z = ⟨x, θ̂⟩). So:

- statistics: per batch, the noisy sums (G̃, ũ) of (upper(4H_i), b_i) (``glm_skellam``); the
  estimate solves (G̃_tot + c_t I) θ̃ = 4 ũ_tot — one Fisher-scoring (IRLS) step per user at her
  anchor, accumulated: an online Newton fit of the MLE (each new model re-anchors the next
  users). G̃_tot/4 is the paper's H with the served anchors in place of the warm-up θ_w (no
  separate warm-up stage and no V: the first batch, anchored at θ̂ = 0, is the warm-up);
- privacy: the batch sums (tree aggregation is unnecessary: each user is in one batch, and the
  batches compose in parallel). Under ``"upper"`` the statistics obey that encoding's exact
  bounds, so the ledger is ``ddp-linucb``'s at the same (d, s, L, ε, δ); under ``"frobenius"``
  (the practical default) they have their own joint bound (both proved in ``glm_skellam``);
- the model: (θ̃, Ṽ = G̃_tot + c_t I, β) with the index ⟨x, θ̃⟩ + β ‖x‖_{Ṽ⁻¹} — Ṽ = 4H, so a
  width β_H in the paper's ‖·‖_{H⁻¹} units is β = 2β_H here — and the anchor θ̂ = Π_S(θ̃)
  published with it (``GLBModel.theta_hat``; the ``glb`` family carries it to devices, which
  seal it with their decision and report at it). Privacy needs no bound on θ̂; the projection
  keeps the devices' ``glb`` checks.
- switching: determinant-based rare switching on Ṽ (``BatchedNoisyPolicy``), the analogue of
  the paper's "H outgrew the last fit's H" test.

Widths: ``regularizer = "paper"`` keeps ``ddp-linucb``'s noise-matched ridge and Shariff–Sheffet
width with reward_sigma = 2, the sub-Gaussian constant of the weighted working response; it is
a heuristic here (the linearisation error of early anchors is not in it), as are ``"noise"``
and ``"clip"``, whose coverage the simulator measures.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from privbandit.shared.core.policies.config import DDPGLBConfig
from privbandit.shared.core.policies.ddp_linucb import DDPLinUCB
from privbandit.shared.core.policies.model import GLBModel
from privbandit.shared.core.randomizers.glm_skellam import GLMSkellamRandomizer


class DDPGLB(DDPLinUCB):
    algo = "ddp-glb"
    threat_model = "shuffle"
    config: DDPGLBConfig
    model: GLBModel

    def _randomizer_of_size(self, size: int) -> GLMSkellamRandomizer:
        """Shares sized for a batch of ``size`` reports, anchored where the policy is."""
        c = self.config
        r = GLMSkellamRandomizer(c.d, c.epsilon, c.delta, size, c.honest_fraction, c.scale, c.L,
                                 c.u_weight, c.noise, c.encoding)
        model = getattr(self, "model", None)
        if isinstance(model, GLBModel):
            r.set_anchor(model.theta_hat)
        return r

    def anchor_of(self, theta: np.ndarray) -> np.ndarray:
        """θ̂ = Π_S(θ̃): the estimate, projected on the ball the devices check."""
        norm = float(np.linalg.norm(theta))
        S = self.config.S
        return theta * (S / norm) if norm > S else theta.copy()

    def _initial_model(self) -> GLBModel:
        base = super()._initial_model()
        return GLBModel(version=0, theta=base.theta, V=base.V, beta=base.beta, reports=0,
                        theta_hat=np.zeros(self.config.d), batch_size=base.batch_size)

    def _model_from_dict(self, data: dict[str, Any]) -> GLBModel:
        return GLBModel.from_dict(data)

    def _publish(self, theta: np.ndarray, V: np.ndarray, beta: float) -> None:
        super()._publish(theta, V, beta)
        m = self.model
        self.model = GLBModel(version=m.version, theta=m.theta, V=m.V, beta=m.beta,
                              reports=m.reports, batch_size=m.batch_size,
                              theta_hat=self.anchor_of(m.theta))
        self._set_anchors()

    def _set_anchors(self) -> None:
        """Every device randomizer of the simulator anchors at the published θ̂."""
        for r in self._randomizers.values():
            assert isinstance(r, GLMSkellamRandomizer)
            r.set_anchor(self.model.theta_hat)

    def _add_public(self, G: np.ndarray, u: np.ndarray) -> None:
        raise ValueError("ddp-glb takes no public warm start (its statistics are the GLM's)")

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        super()._load_extra_state(state)
        self._set_anchors()

