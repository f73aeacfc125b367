"""The linear policies' common ground: the published model (θ̃, V, β) of ``policies.model`` and
its defaults (``LinearPolicy``), the OFUL radius, and the machinery of the policies that learn
from noisy (G̃, ũ) (``NoisyStatisticsPolicy``)."""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any, ClassVar, TypeVar

import numpy as np

from privbandit.shared.core import confidence
from privbandit.shared.core.policies.base import Policy, RandomizerT
from privbandit.shared.core.policies.config import PolicyConfig
from privbandit.shared.core.policies.model import Model
from privbandit.shared.core.randomizers.base import Randomizer

# A linear policy's config: the parameters of ``PolicyConfig`` (d, L, S, σ, δ, λ, the scale).
ConfigT = TypeVar("ConfigT", bound=PolicyConfig)

# The noisy-statistics policies debias (G̃, ũ) through the linear ``Randomizer`` interface.
StatisticsRandomizerT = TypeVar("StatisticsRandomizerT", bound=Randomizer)


class LinearPolicy(Policy[ConfigT, RandomizerT]):
    """A policy that publishes a linear ``Model``: devices choose argmax ⟨x, θ̃⟩ + β ‖x‖_{V⁻¹}
    (the ``linear`` and ``glb`` families)."""

    model: Model

    def _initial_model(self) -> Model:
        """Version 0 of the published model: θ̃ = 0, V = λI, the initial β."""
        c = self.config
        return Model.initial(c.d, c.lam, self._initial_beta())

    def _model_from_dict(self, data: dict[str, Any]) -> Model:
        return Model.from_dict(data)

    def _initial_beta(self) -> float:
        c = self.config
        return c.confidence_scale * oful_beta(c, 0, c.lam)

    def _publish(self, theta: np.ndarray, V: np.ndarray, beta: float) -> None:
        self.model = Model(
            version=self.model.version + 1,
            theta=theta,
            V=V,
            beta=self.config.confidence_scale * beta,
            reports=self.reports,
            batch_size=self.announced_batch_size,
        )

    @property
    def announced_batch_size(self) -> int | None:
        """The batch length published with the model, which its users' reports are sized for
        (``Model.batch_size``): None unless the policy follows a growing batch schedule."""
        return None

    # Rounds of a public log learned from so far (``warm_start``; at most the config's
    # ``public_warm_start``, which the ledger labels public). Part of the saved state
    # (``get_state``): a learner saved and loaded before its first private report must not take
    # the declared rounds again.
    public_reports: int = 0
    # True when a loaded state predates that count (``set_state``): the refusal says why.
    _public_unrecorded: bool = False

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "public_reports": self.public_reports}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore the state, with the public rounds taken. A state saved before that count was
        kept counts every declared round as taken (0 when none are declared, which is exact:
        ``warm_start`` then refuses every round): it cannot tell how many were, and counting 0
        could let the same public log be learned from twice. The ledger is the same either way
        (it states the declared rounds); what is lost is at most a warm start the operator can
        give again to a fresh learner."""
        super().set_state(state)
        declared = int(getattr(self.config, "public_warm_start", 0))
        self._public_unrecorded = "public_reports" not in state and declared > 0
        self.public_reports = int(state.get("public_reports", declared))

    def warm_start(self, X: np.ndarray, r: np.ndarray) -> None:
        """Learn from a log the operator declares public, before the first user (issue 44):
        rows X (n, d) played and rewards r (n,), added exactly to the statistics,
        (G, u) += (Σ x xᵀ, Σ r x), and a model published from them at once. Public data needs no
        noise and is charged nothing; the config's ``public_warm_start`` states how many rounds
        (the ledger labels them public), and no more are taken. Only before any private report:
        every later model is then post-processing of the private releases and of public data."""
        X = np.asarray(X, dtype=float)
        r = np.asarray(r, dtype=float)
        d = self.config.d
        if X.ndim != 2 or X.shape[1] != d or r.shape != (X.shape[0],):
            raise ValueError(f"a warm start takes rows (n, {d}) and rewards (n,)")
        if not (np.isfinite(X).all() and np.isfinite(r).all()):
            raise ValueError("a warm start's rows and rewards must be finite")
        declared = int(getattr(self.config, "public_warm_start", 0))
        if self.public_reports + X.shape[0] > declared:
            why = (" (loaded from a state saved before the count of public rounds was kept: "
                   "every declared round counts as taken)" if self._public_unrecorded else "")
            raise ValueError(f"{self.public_reports} public rounds taken and {X.shape[0]} more, "
                             f"but the config declares public_warm_start = {declared}{why}")
        if self.reports:
            raise ValueError("a public warm start comes before the first private report")
        self._add_public(X.T @ X, X.T @ r)
        self.public_reports += X.shape[0]

    def _add_public(self, G: np.ndarray, u: np.ndarray) -> None:
        raise ValueError(f"{self.algo} takes no public warm start")


def oful_beta(c: PolicyConfig, t: int, lam: float) -> float:
    """OFUL radius σ √(2 ln(1/δ) + d ln(1 + t L²/(d λ))) + √λ S (Abbasi-Yadkori 2011, Thm 2)."""
    radius = confidence.self_normalized(c.reward_sigma, c.d, t, c.L, lam, c.failure_prob)
    return radius + math.sqrt(lam) * c.S


class NoisyStatisticsPolicy(LinearPolicy[ConfigT, StatisticsRandomizerT]):
    """Shared machinery of the policies that learn from noisy (G̃, ũ): SBLB and LDP-LinUCB.

    Subclasses define the paper's regularizer ``paper_regularizer(t)`` and the noise bounds;
    ``regularizer = "clip"`` replaces them by Ṽ = eigen-clip(G̃ + λI, λ) and the non-private OFUL
    width — a practical setting with no coverage guarantee (post-processing; privacy unchanged).
    """

    def __init__(self, config: ConfigT, rng: np.random.Generator | None = None) -> None:
        super().__init__(config, rng)
        d = config.d
        self.G = np.zeros((d, d))
        self.u = np.zeros(d)

    def _accumulate(self, stat: np.ndarray, n: int) -> bool:
        """Add a batch's (G̃, ũ) increments; False (and nothing changed, ``skipped`` counted) if
        they would leave the state non-finite. The services refuse such reports when they decode
        them; this keeps any statistic that slips through from making the state unsolvable."""
        est = self.randomizer.estimate(stat, n)
        G, u = self.G + est.G, self.u + est.u
        if not (np.isfinite(G).all() and np.isfinite(u).all()):
            self.skipped += 1
            return False
        self.G, self.u = G, u
        self.reports += n
        return True

    @abstractmethod
    def paper_regularizer(self, t: int) -> float: ...

    def noise_bound(self, t: int) -> float:
        """Υ_t: our high-probability bound on ‖H_t‖ (1/3 of δ, uniform over update times)."""
        cfg = self.config
        dt = confidence.time_uniform(cfg.failure_prob / 3, t)
        return confidence.matrix_noise_bound(self.noise_proxy(t, "matrix"), cfg.d, dt)

    # The noise proxy that sizes the "noise" ridge: "matrix" (every entry of G̃'s noise alike)
    # or, where the off-diagonal entries carry their own (ddp-linucb's frobenius encoding),
    # "offdiag": the off-diagonal entries set the noise matrix's norm ‖H‖ ≈ 2σ_off√d.
    RIDGE_PROXY: ClassVar[str] = "matrix"

    def noise_proxy(self, t: int, kind: str) -> float:
        """Σ of the per-entry noise proxies of t reports in H_t (``kind`` "matrix", or
        "offdiag" for its off-diagonal entries where the randomizer tells them apart) or h_t
        ("vector"): t times one report's, unless a policy's noise varies by batch."""
        return t * proxy_of(self.randomizer, kind)

    def regularizer(self, t: int) -> float:
        """The paper's regularizer, raised to Υ_t + λ where it falls below our noise bound.

        The papers size c_t so that H_t + c_t I ⪰ (c_t − ‖H_t‖) I stays positive definite, but
        their bounds on ‖H_t‖ hold for one fixed direction (Garcelon Eq. 13) or hide constants
        (Zheng Alg. 5); for large d·m at the first few reports they are smaller than the operator
        norm. Raising c_t keeps ρ_min = c_t − Υ_t ≥ λ > 0 so the width stays finite and valid;
        where the paper's value is larger (the usual case, tested) it is used unchanged.
        """
        return max(self.paper_regularizer(t), self.noise_bound(t) + self.config.lam)

    def paper_beta(self, t: int, c: float) -> float:
        """β at t reports for regularizer c, with our derived noise bounds (``core.confidence``).

        ρ_min = c − Υ_t and ρ_max = c + Υ_t where Υ_t bounds ‖H_t‖, and χ_t bounds ‖h_t‖; the
        failure probability is split in three (reward noise, H, h), each uniform over update times.
        """
        cfg = self.config
        third = cfg.failure_prob / 3
        ups = self.noise_bound(t)
        chi = confidence.vector_noise_bound(self.noise_proxy(t, "vector"), cfg.d,
                                            confidence.time_uniform(third, t))
        return confidence.noisy_ridge_beta(
            t=t, d=cfg.d, L=cfg.L, S=cfg.S, sigma=cfg.reward_sigma,
            rho_min=c - ups, rho_max=c + ups, chi=chi, delta=third,
        )

    def candidate(self) -> tuple[np.ndarray, np.ndarray, float] | None:
        """(Ṽ, θ̃, β) that would be published now, or None (``skipped`` counted) if the linear
        algebra fails even after the eigenvalue repair: the update is skipped, the published
        model stays, and a later batch tries again."""
        try:
            return self._candidate()
        except (np.linalg.LinAlgError, ValueError):
            self.skipped += 1
            return None

    def _candidate(self) -> tuple[np.ndarray, np.ndarray, float]:
        cfg = self.config
        t = self.reports
        regularizer = getattr(cfg, "regularizer", "paper")
        if regularizer == "noise":
            return self._noise_candidate()
        if regularizer == "clip":
            V, clipped = confidence.clip_eigenvalues(self.G + cfg.lam * np.eye(cfg.d), cfg.lam)
            solved = confidence.ridge_solve(V, self.u, cfg.lam)
            beta = oful_beta(cfg, t, cfg.lam)
        else:
            c = self.regularizer(t)
            solved = confidence.ridge_solve(self.G + c * np.eye(cfg.d), self.u, cfg.lam)
            clipped = solved.repaired
            beta = self.paper_beta(t, c)
        if clipped:
            self.repairs += 1
        return solved.V, solved.theta, beta

    def _noise_candidate(self) -> tuple[np.ndarray, np.ndarray, float]:
        """``regularizer = "noise"`` (practical, noise-calibrated; issue 22). With σ_t² the
        per-entry noise proxy accumulated by the reports so far (``noise_proxy``: reports × one
        report's variance for LDP, batches × one batch's for the batched policies — never a
        function of T), the typical size of the symmetric noise matrix H_t is Ῡ_t = 2σ_t√d
        (semicircle law) and of the vector noise h_t is χ̄_t = σ_t√d. The ridge is
        c_t = λ + κ Ῡ_t (κ = ``noise_ridge``), Ṽ = eigen-clip(G̃ + c_t I, λ), and β is
        Shariff–Sheffet Prop. 4 (``confidence.noisy_ridge_beta``) with these typical sizes in
        place of high-probability bounds: ρ_min = max(c_t − Ῡ_t, λ), ρ_max = c_t + Ῡ_t.
        Post-processing of the private statistics; no coverage guarantee (the simulator
        measures coverage instead)."""
        cfg, t = self.config, self.reports
        sigma_t = math.sqrt(self.noise_proxy(t, self.RIDGE_PROXY))
        upsilon = 2.0 * sigma_t * math.sqrt(cfg.d)
        c = cfg.lam + getattr(cfg, "noise_ridge", 1.0) * upsilon
        V, clipped = confidence.clip_eigenvalues(self.G + c * np.eye(cfg.d), cfg.lam)
        solved = confidence.ridge_solve(V, self.u, cfg.lam)
        if clipped:
            self.repairs += 1
        chi = math.sqrt(self.noise_proxy(t, "vector") * cfg.d)
        beta = confidence.noisy_ridge_beta(
            t=t, d=cfg.d, L=cfg.L, S=cfg.S, sigma=cfg.reward_sigma,
            rho_min=max(c - upsilon, cfg.lam), rho_max=c + upsilon, chi=chi,
            delta=cfg.failure_prob,
        )
        return solved.V, solved.theta, beta

    def _extra_state(self) -> dict[str, Any]:
        return {"G": self.G.tolist(), "u": self.u.tolist()}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        self.G = np.asarray(state["G"], dtype=float)
        self.u = np.asarray(state["u"], dtype=float)


def proxy_of(randomizer: Any, kind: str) -> float:
    """One report's per-entry noise proxy of ``kind``: "matrix", "vector", or "offdiag" (the
    randomizer's ``offdiag_proxy`` where it has one, else its matrix proxy)."""
    if kind == "vector":
        return float(randomizer.vector_proxy())
    if kind == "offdiag" and hasattr(randomizer, "offdiag_proxy"):
        return float(randomizer.offdiag_proxy())
    return float(randomizer.matrix_proxy())
