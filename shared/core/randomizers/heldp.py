"""The HeLDP curators (file 003, §3): Convert-to-Laplace (Curator 1) and Convert-to-Bernoulli
(Curator 3), each at the user's own level ε_t, with the Sigmoid preprocessing of §3.3.

Report row: ``[arm, ε_t, x_t]`` — the curators "return ε, M(r; ε)" and the analyzer needs ε_t.

CTL:  x = r + L,  L ~ Laplace(1/ε)   (Lemma 5: ε-LDP on [0, 1], Dwork et al. 2006 Prop. 3.3:
      the density ratio at any x is exp(ε(|x − r'| − |x − r|)) ≤ e^{ε|r − r'|} ≤ e^ε).
CTB:  x ~ Bernoulli((r e^ε + 1 − r)/(1 + e^ε)) = Bernoulli(1/(1+e^ε) + r·tanh(ε/2))
      (Lemma 9: P(x=1 | r) ranges over [1/(1+e^ε), e^ε/(1+e^ε)], ratio ≤ e^ε; the response mean
      is 1/2 + (2μ − 1)(e^ε − 1)/(2(e^ε + 1)) for a reward of mean μ).
Sigmoid (CTL-S, CTB-S; Corollary 13): the curator first maps the reward through s(r) = 1/(1+e^{−r})
∈ (0, 1), so unbounded rewards enter the [0, 1] mechanisms; the analyzer then learns E[s(R_a)],
which orders the arms as their means when the noise is i.i.d. across arms (Lemma 12).

ε_t = 0 (the user declines): the report carries x = 0 — nothing informative, independent of r.
The analyzer discards it like any response with ε_t < ε_min.

Admissible CTL values: the clean value is in [0, 1] and P(|Laplace(1/ε)| > τ/ε) = e^{−τ}, so with
τ = 40 ln 2 an honest report falls outside [−τ/ε, 1 + τ/ε] with probability 2⁻⁴⁰ (refused).
"""

from __future__ import annotations

import math

import numpy as np

from privbandit.shared.core.privacy_levels import EPS_MAX
from privbandit.shared.core.randomizers.arms import (
    HONEST_REFUSAL,
    ArmRandomizer,
    check_rewards,
    user_axis,
)

LAPLACE_TAIL = -math.log(HONEST_REFUSAL)  # τ = 40 ln 2


def sigmoid(r: np.ndarray) -> np.ndarray:
    """s(r) = 1/(1 + e^{−r}) (HeLDP §3.3)."""
    from scipy.special import expit  # here: services load this module, need no scipy

    return expit(r)


def check_levels(eps: np.ndarray | None, n: int, eps_max: float = EPS_MAX) -> np.ndarray:
    """Per-user levels: n finite values in [0, eps_max]."""
    if eps is None:
        raise ValueError("per-user privacy levels ε_t are required")
    eps = np.asarray(eps, dtype=float)
    if eps.shape != (n,):
        raise ValueError(f"need one privacy level per user, shape ({n},), got {eps.shape}")
    if not np.isfinite(eps).all() or ((eps < 0) | (eps > eps_max)).any():
        raise ValueError(f"privacy levels must lie in [0, {eps_max:g}]")
    return eps


class HeLDPRandomizer(ArmRandomizer):
    """Common part of CTL and CTB: per-user ε_t, optional sigmoid, declined users."""

    per_user_epsilon = True
    mechanism = ""

    def __init__(self, K: int, sigmoid: bool = False, eps_max: float = EPS_MAX) -> None:
        super().__init__(K, bounded=not sigmoid)
        self.sigmoid = bool(sigmoid)
        self.eps_max = float(eps_max)

    def clean(self, r: np.ndarray) -> np.ndarray:
        """What the curator privatises: r ∈ [0, 1], or s(r) with the sigmoid."""
        r = check_rewards(r, self.bounded)
        return sigmoid(r) if self.sigmoid else r

    def values(self, r: np.ndarray, eps: np.ndarray | None, rng: np.random.Generator
               ) -> np.ndarray:
        r = np.asarray(r, dtype=float)
        eps = check_levels(eps, r.shape[0], self.eps_max)
        v = self._mechanism(self.clean(r), eps, rng)
        return np.where(user_axis(eps, r) > 0, v, 0.0)

    def _mechanism(self, s: np.ndarray, eps: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def _check_value(self, row: np.ndarray) -> None:
        eps, x = row[1], row[2]
        if not 0 <= eps <= self.eps_max:
            raise ValueError(f"privacy level must lie in [0, {self.eps_max:g}]")
        if eps == 0 and x != 0:
            raise ValueError("a declined report (ε = 0) carries the value 0")
        self._check_response(eps, x)

    def _check_response(self, eps: float, x: float) -> None:
        raise NotImplementedError


class CTLRandomizer(HeLDPRandomizer):
    """Curator 1 (Convert-to-Laplace), or CTL-S with ``sigmoid``: x = s + Laplace(1/ε)."""

    mechanism = "laplace"

    def _mechanism(self, s: np.ndarray, eps: np.ndarray, rng: np.random.Generator
                   ) -> np.ndarray:
        lap = rng.laplace(0.0, 1.0, size=eps.shape[0])
        with np.errstate(divide="ignore"):
            scale = np.where(eps > 0, 1.0 / np.where(eps > 0, eps, 1.0), 0.0)
        return s + user_axis(lap * scale, s)

    def _check_response(self, eps: float, x: float) -> None:
        if eps > 0 and not -LAPLACE_TAIL / eps <= x <= 1 + LAPLACE_TAIL / eps:
            raise ValueError("report outside what the mechanism produces "
                             f"(x beyond [0, 1] ± {LAPLACE_TAIL:.1f}/ε)")

    @staticmethod
    def density(x: np.ndarray, s: np.ndarray, eps: float) -> np.ndarray:
        """Exact output density at x for clean value s: (ε/2) e^{−ε|x − s|}."""
        return 0.5 * eps * np.exp(-eps * np.abs(np.asarray(x) - np.asarray(s)))


class CTBRandomizer(HeLDPRandomizer):
    """Curator 3 (Convert-to-Bernoulli), or CTB-S with ``sigmoid``: one bit per report."""

    mechanism = "bernoulli"
    value_code = "B"

    @staticmethod
    def one_probability(s: np.ndarray, eps: np.ndarray | float) -> np.ndarray:
        """P(x = 1 | s) = (s e^ε + 1 − s)/(1 + e^ε) = 1/(1 + e^ε) + s tanh(ε/2)."""
        eps = np.asarray(eps, dtype=float)
        return sigmoid(-eps) + np.asarray(s) * np.tanh(eps / 2.0)

    @staticmethod
    def response_mean(mu: np.ndarray | float, eps: np.ndarray | float) -> np.ndarray:
        """Lemma 9: E[x] = 1/2 + (2μ − 1)(e^ε − 1)/(2(e^ε + 1)) for a clean value of mean μ."""
        eps = np.asarray(eps, dtype=float)
        return 0.5 + (2 * np.asarray(mu) - 1) * np.tanh(eps / 2.0) / 2.0

    def _mechanism(self, s: np.ndarray, eps: np.ndarray, rng: np.random.Generator
                   ) -> np.ndarray:
        n: int = eps.shape[0]  # typed, so that numpy's stubs pick the array-valued overload
        u = rng.random(n)
        p = self.one_probability(s, user_axis(eps, s))
        return (user_axis(u, s) < p).astype(float)

    def _check_response(self, eps: float, x: float) -> None:
        if x not in (0.0, 1.0):
            raise ValueError("a CTB response is one bit in {0, 1}")


def debias_bernoulli(x: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """g(x; ε) = 1/2 (1 ± (e^ε + 1)/(e^ε − 1)) for x = 1 / 0 (HeLDP §3.2): E[g] = E[s].

    Written as 1/2 + (x − 1/2) coth(ε/2); requires ε > 0.
    """
    return 0.5 + (np.asarray(x) - 0.5) / np.tanh(np.asarray(eps) / 2.0)
