"""Bandit convex optimisation with one- and two-point feedback, private and not (issue 12).

Zheng, Cai, Huang, Li, Wang, "Locally Differentially Private (Contextual) Bandits Learning"
(NeurIPS 2020), §3: Algorithm 1 (one point) and Algorithm 2 (two points) are black-box reductions —
the non-private algorithm 𝒜 runs unchanged on the noisy feedback. Each class holds ``runs``
independent copies as arrays (the simulator vectorises over runs); the loops are compiled
(``bco_kernels``). Decision set: the ball K = R·𝔹; ℛ(x) = −ln(R² − ‖x‖²), a ν = 1 barrier.

One point (``bco``, ``ldp-bco``), the black boxes of Corollary 4:
- μ > 0 (strongly convex + smooth): Hazan & Levy, "Bandit Convex Optimization: Towards Tight
  Bounds" (NeurIPS 2014), Algorithm 1: A_t = (∇²ℛ(y_t) + ημt I)^{-1/2}, play x_t = y_t + A_t u_t,
  g_t = d f̃_t A_t^{-1} u_t, y_{t+1} = argmin_x Σ_{τ≤t} (g_τᵀx + μ/2 ‖x − y_τ‖²) + ℛ(x)/η, with
  η = √((ν + 2β/μ) ln T / (2 d² B̃² T)) (their Theorem's tuning).
- μ = 0 (convex + smooth): Saha & Tewari, "Improved Regret Guarantees for Online Smooth Convex
  Optimization with Bandit Feedback" (AISTATS 2011), Algorithm 1: A_t = ∇²ℛ(y_t)^{-1/2}, play
  x_t = y_t + δ A_t u_t, g_t = (d/δ) f̃_t A_t^{-1} u_t, y_{t+1} = argmin_x η Σ g_τᵀx + ℛ(x). Their
  bound is ν ln T/η + η d²B̃²T/δ² + βR²δ²T up to constants; balancing the three terms gives
  η = (ν² ln²T / (d²B̃²βR²T²))^{1/3} ∝ T^{-2/3} and δ = min(1, (η d²B̃²/(βR²))^{1/4}) ∝ T^{-1/6}·…,
  i.e. regret Õ(T^{2/3}).
Neither paper is in the project's papers folder and no copy was reachable while writing this:
the algorithms are as published (ellipsoidal sampling, FTRL with a barrier); Hazan–Levy's η is
their theorem's tuning as recalled, not checked against the text; Saha–Tewari's η, δ are derived
above from the shape of their bound. Both are right in their T-dependence, constants may differ
(``step_scale`` rescales η).

f̃_t is what 𝒜 receives: f_t(x_t) for the baseline, f_t(x_t) + Z_t for Alg. 1, whose losses lie in
[−B̃, B̃] with B̃ = B + σ√(2 ln 2T²) for all t ≤ T w.p. ≥ 1 − 1/T (Eqs. 14–15), so 𝒜 is tuned for
the range B̃ (Theorem 3, Eq. 18: (B + σ√(2 ln 2T²)) · Reg_𝒜).

Two points (``bco2``, ``ldp-bco2``): Agarwal, Dekel & Xiao (COLT 2010), Zheng et al. Algorithm 4
(Appendix C): play y_t ± ρu_t, g̃_t = (d/(2ρ))(f̃_{t,1} − f̃_{t,2})u_t, y_{t+1} = Π_{(1−ξ)K}(y_t −
η_t g̃_t), with Algorithm 2's parameters: ρ = ln T / T, ξ = ρ/r (r = R for the ball, so both points
stay in K), η_t = 1/√T (convex, Eq. 3) or 1/(μt) (μ-strongly convex, Eq. 4). Alg. 2 adds
n_tᵀ(x_{t,1} − x_{t,2}) to the difference.

Noise σ: ``shared.core.randomizers.bco`` (analytic by default, the paper's with
``calibration="paper"``); the ledger says which.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from privbandit.shared.core.accounting.bco_ledgers import ldp_bco_ledger
from privbandit.shared.core.accounting.ledger import PrivacyLedger
from privbandit.shared.core.accounting.ledgers import none_ledger
from privbandit.shared.core.environments.bco import BCOEnvironment, KernelParams
from privbandit.shared.core.policies.bco_config import (
    BCOConfig,
    LDPBCO2Config,
    LDPBCOConfig,
    PrivateBCO,
)
from privbandit.shared.core.randomizers.bco import one_point_sigma, two_point_sigma

BARRIER_NU = 1.0  # ν of −ln(R² − ‖x‖²)


def kernels() -> Any:
    """``bco_kernels``, imported on first use: numba compiles its loops when it is imported
    (start-up that a service serving no BCO task, or the shuffler, need not pay)."""
    from privbandit.shared.core.policies import bco_kernels

    return bco_kernels


class BCOPolicy:
    """``runs`` independent copies of one BCO policy (state arrays of shape (runs, d))."""

    algo: str
    points_per_user: int

    def __init__(self, config: BCOConfig, runs: int = 1) -> None:
        if runs < 1:
            raise ValueError("runs must be >= 1")
        self.config = config
        self.algo = config.algo  # type: ignore[attr-defined]  # each concrete config's literal
        self.runs, self.d = int(runs), config.d
        self.y = np.zeros((self.runs, self.d))  # y_1 = argmin ℛ = 0
        self.t = 0
        self.maxnorm = np.zeros(self.runs)  # largest ‖point played‖ per run
        self.private = self.is_private(config)

    @staticmethod
    def is_private(config: BCOConfig) -> bool:
        """Whether a config's policy adds noise (its config states an ε)."""
        return hasattr(config, "epsilon")

    @functools.cached_property
    def sigma(self) -> float:
        """The report noise's σ (0 without privacy), calibrated on first use: the analytic
        calibration imports scipy, which a service that only needs a row's width skips."""
        return self._sigma() if self.private else 0.0

    def _sigma(self) -> float:
        raise NotImplementedError

    def privacy(self) -> PrivateBCO:
        """The config's (ε, δ, calibration); only a private policy (``self.private``) asks."""
        # the concrete classes: mypy deems a BCOConfig & PrivateBCO intersection impossible
        # (their generated __init__ differ) and would skip what follows
        assert isinstance(self.config, LDPBCOConfig | LDPBCO2Config), "a private BCO config"
        return self.config

    def _sensitivity(self) -> float:
        raise NotImplementedError

    def check(self, env: BCOEnvironment) -> None:
        c = self.config
        if env.d != c.d or env.R != c.radius:
            raise ValueError(f"environment has d={env.d}, R={env.R}; policy expects d={c.d}, "
                             f"R={c.radius}")
        if env.B > c.loss_bound or env.lipschitz > c.lipschitz * (1 + 1e-12):
            raise ValueError("the environment's losses exceed the policy's bound B or constant G")

    def play(self, env: BCOEnvironment, U: np.ndarray, zeta: np.ndarray, z: np.ndarray
             ) -> np.ndarray:
        """Serve n users per run: directions U (n, runs, d) on the unit sphere, the users'
        offsets ζ (n, runs), the devices' standard normals z (n, runs). Returns the expected loss
        of what was played, (n, runs)."""
        inst = np.empty((U.shape[0], self.runs))
        self._loop(env.kernel_params(), U, zeta, z, inst)
        self.t += U.shape[0]
        return inst

    def _loop(self, env_params: KernelParams, U: np.ndarray, zeta: np.ndarray, z: np.ndarray,
              inst: np.ndarray) -> None:
        raise NotImplementedError

    def ledger(self) -> PrivacyLedger:
        if not self.private:
            return none_ledger()
        p = self.privacy()
        return ldp_bco_ledger(self.algo, p.epsilon, p.delta, self.sigma / self._sensitivity(),
                              p.calibration)

    def params(self) -> dict[str, Any]:
        """The step sizes and noise in use (for the JSON)."""
        return {"sigma": self.sigma}


class OnePointBCO(BCOPolicy):
    """``bco`` / ``ldp-bco``: Hazan–Levy (μ > 0) or Saha–Tewari (μ = 0) Algorithm 1, noisy
    feedback for Zheng Alg. 1 (module doc)."""

    algo = "bco"
    points_per_user = 1

    def __init__(self, config: BCOConfig, runs: int = 1) -> None:
        super().__init__(config, runs)
        c = config
        T, d, R = c.horizon, c.d, c.radius
        self.loss_range = c.loss_bound + self.sigma * math.sqrt(2 * math.log(2.0 * T**2))
        B2 = self.loss_range**2
        if c.strong_convexity > 0:
            self.eta = c.step_scale * math.sqrt(
                (BARRIER_NU + 2 * c.smoothness / c.strong_convexity) * math.log(T)
                / (2 * d**2 * B2 * T))
            self.delta = 1.0
        else:
            self.eta = c.step_scale * (BARRIER_NU**2 * math.log(T) ** 2
                                       / (d**2 * B2 * c.smoothness * R**2 * T**2)) ** (1 / 3)
            self.delta = min(1.0, (self.eta * d**2 * B2 / (c.smoothness * R**2)) ** 0.25)
        self.c = np.zeros((self.runs, self.d))  # Σ_τ (g_τ − μ y_τ)

    def _sigma(self) -> float:
        p = self.privacy()
        return one_point_sigma(p.epsilon, p.delta, self.config.loss_bound, p.calibration)

    def _sensitivity(self) -> float:
        return self.config.loss_bound

    def _loop(self, env_params: KernelParams, U: np.ndarray, zeta: np.ndarray, z: np.ndarray,
              inst: np.ndarray) -> None:
        # Imported here: the kernels import numba (~0.3 s of CPU), which a process that never
        # runs a BCO loop (a service, the command line) must not pay at start-up.

        kind, scale, bnoise, kappa, denom, points, period = env_params
        c = self.config
        kernels().one_point_loop(self.y, self.c, self.t, U, zeta, z, self.sigma, kind, scale,
                                 bnoise, kappa, denom, points, period, c.radius, c.loss_bound,
                                 self.eta, c.strong_convexity, self.delta, inst, self.maxnorm)

    def params(self) -> dict[str, Any]:
        black_box = "hazan-levy" if self.config.strong_convexity > 0 else "saha-tewari"
        return {"sigma": self.sigma, "eta": self.eta, "exploration_delta": self.delta,
                "loss_range": self.loss_range, "black_box": black_box}


class TwoPointBCO(BCOPolicy):
    """``bco2`` / ``ldp-bco2``: Agarwal–Dekel–Xiao (Zheng Alg. 4), noisy difference for Alg. 2."""

    algo = "bco2"
    points_per_user = 2

    def __init__(self, config: BCOConfig, runs: int = 1) -> None:
        super().__init__(config, runs)
        c = config
        T = c.horizon
        self.rho = math.log(T) / T
        self.xi = self.rho / c.radius  # ξ = ρ/r with r = R
        self.shrink = (1.0 - self.xi) * c.radius
        self.eta0 = c.step_scale if c.strong_convexity > 0 else c.step_scale / math.sqrt(T)

    def _sigma(self) -> float:
        p = self.privacy()
        return two_point_sigma(p.epsilon, p.delta, self.config.lipschitz, p.calibration)

    def _sensitivity(self) -> float:
        return 2.0 * self.config.lipschitz

    def _loop(self, env_params: KernelParams, U: np.ndarray, zeta: np.ndarray, z: np.ndarray,
              inst: np.ndarray) -> None:

        kind, scale, bnoise, kappa, denom, points, period = env_params
        c = self.config
        kernels().two_point_loop(self.y, self.t, U, z, self.sigma, kind, scale, kappa, denom,
                                 bnoise, points, period, c.radius, c.lipschitz, self.eta0,
                                 c.strong_convexity, self.rho, self.shrink, inst, self.maxnorm)

    def params(self) -> dict[str, Any]:
        schedule = "1/(μt)" if self.config.strong_convexity > 0 else "1/√T"
        return {"sigma": self.sigma, "eta0": self.eta0, "eta_schedule": schedule,
                "rho": self.rho, "xi": self.xi}


BCO_POLICIES: dict[str, type[BCOPolicy]] = {
    "bco": OnePointBCO,
    "ldp-bco": OnePointBCO,
    "bco2": TwoPointBCO,
    "ldp-bco2": TwoPointBCO,
}


def build_bco_policy(config: BCOConfig, runs: int = 1) -> BCOPolicy:
    algo = getattr(config, "algo", None)
    if algo not in BCO_POLICIES:
        raise ValueError(f"unknown BCO policy {algo!r}; known: {', '.join(BCO_POLICIES)}")
    return BCO_POLICIES[algo](config, runs)
