"""``adar-ucb``: AdaR-UCB (Azize & Basu 2023, Alg. 2) — (α, ε)-RDP with a trusted analyzer.

Episodes. After one pull of each arm (line 3; each is its own episode of length 1), episode ℓ
starts at t_ℓ and plays A_ℓ = argmax_a I_a for N_{A_ℓ}(t_ℓ − 1) rounds, doubling the arm's count
(line 7). When an episode of arm a with n rewards ends, the analyzer releases its noisy mean
    μ̃_a = (1/n) Σ r + Z,  Z ~ N(0, σ²),  σ² = α / (2ε n²)
(the mean has sensitivity 1/n for rewards in [0, 1]; Thm 2 / Mironov), and forgets older episodes
of a. The index of Eq. (6) is
    I_a = μ̃_a + B_a,   B_a = √((1/(2n_a) + α/(ε n_a²)) β ln t_ℓ),
n_a the length of a's last episode: Lemma 12 (App. B.1) shows μ̂ + Z − μ is
√(1/(4n) + α/(2εn²))-sub-Gaussian, and P(· ≥ B_a) ≤ t_ℓ^{−β}.

Derivations and corrections:
- The noise is drawn once per episode, when its mean is released, and reused by every later index:
  a fresh N(0, σ²) at each index computation (Eq. (6) read literally) would release the same
  episode's data again and compose. Theorem 4's proof releases each episode's mean once
  (mechanism 𝓜 per episode, Lemma 11), which is what is done here.
- The paper writes n_a = ½ N_a(t_ℓ − 1). That equals the last episode's length once an arm has
  doubled, but after the initial pull it gives ½ for an episode of 1 reward; we use the actual
  length (1 after initialisation), which is what the sensitivity and Lemma 12 require.
- β = 4 by default (β > 3 is required by Thm 5): its t^{−4} failure level is the one of UCB1 and
  the HeLDP agents here, so at α/ε → 0 the width is UCB1's √(2 ln t / n).

The device plays the current episode's arm from the broadcast model; reports of another arm (a
stale model in the services) are counted but not learned from.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger, SecureSum
from privbandit.shared.core.accounting.mab_ledgers import adar_ucb_ledger
from privbandit.shared.core.policies.arm_model import ArmModel
from privbandit.shared.core.policies.mab_base import MABPolicy
from privbandit.shared.core.policies.mab_config import AdaRUCBConfig
from privbandit.shared.core.randomizers.arms import IdentityArmRandomizer


class AdaRUCB(MABPolicy):
    algo = "adar-ucb"
    threat_model = "central"
    config: AdaRUCBConfig

    def __init__(self, config: AdaRUCBConfig, rng: np.random.Generator | None = None) -> None:
        super().__init__(config, rng)
        K = config.K
        self.t = 0
        self.pulls = [0] * K
        self.last_n = [0] * K
        self.released = [0.0] * K
        self.arm, self.target, self.count, self.sum = 0, 1, 0, 0.0
        self.episodes = 0
        self.stale = 0
        self.closed_at = 0  # reports counted when the current episode's model was published
        self.model = self._current_model(0)

    def _make_randomizer(self) -> IdentityArmRandomizer:
        return IdentityArmRandomizer(self.config.K, bounded=True)

    def noise_sd(self, n: int) -> float:
        """σ = √(α / (2ε n²)): (α, ε)-RDP for the mean of n rewards in [0, 1]."""
        c = self.config
        return math.sqrt(c.alpha / (2.0 * c.epsilon * n * n))

    def bonus(self, n: int, t: int) -> float:
        """B = c·√((1/(2n) + α/(ε n²)) β ln t) (Eq. (6))."""
        c = self.config
        return c.confidence_scale * math.sqrt(
            (1.0 / (2 * n) + c.alpha / (c.epsilon * n * n)) * c.beta * math.log(t))

    def indices(self, t: int) -> np.ndarray:
        """I_a at the start of an episode at round t (+∞ for arms never released)."""
        return np.array([self.released[a] + self.bonus(n, t) if n else math.inf
                         for a, n in enumerate(self.last_n)])

    def window(self) -> int:
        return self.target - self.count

    def _advance(self, total: float, k: int) -> bool:
        """k reports of the episode's arm with reward sum ``total``; True if the episode ended."""
        self.sum += total
        self.count += k
        self.t += k
        if self.count < self.target:
            return False
        a, n = self.arm, self.count
        self.released[a] = self.sum / n + self.rng.normal(0.0, self.noise_sd(n))
        self.last_n[a] = n
        self.pulls[a] += n
        self.episodes += 1
        self.closed_at = self.t
        if self.episodes < self.K:  # line 3: each arm once, in order
            nxt, target = self.episodes, 1
        else:
            nxt = int(np.argmax(self.indices(self.t + 1)))
            target = self.pulls[nxt]
        self.arm, self.target, self.count, self.sum = nxt, target, 0, 0.0
        return True

    def ingest(self, rows: np.ndarray) -> int:
        """Consume rows up to the end of the current episode; publish if it ended."""
        rows = np.atleast_2d(np.asarray(rows, dtype=float))
        for row in rows:
            self.randomizer.check_row(row)
        mine = rows[:, 0] == self.arm
        done = np.cumsum(mine)
        k = int(np.searchsorted(done, self.target - self.count)) + 1
        k = min(k, rows.shape[0])
        use = mine[:k]
        self.stale += int(k - use.sum())
        self.reports += k
        self.used += int(use.sum())
        self.t += k - int(use.sum())
        if self._advance(float(rows[:k, 1][use].sum()), int(use.sum())):
            self._publish_current()
        return k

    def _observe(self, arm: int, value: float, eps: np.ndarray | None,
                 prob: float | None = None) -> None:  # pragma: no cover
        raise NotImplementedError("adar-ucb ingests whole windows")

    def _play(self, values: np.ndarray, eps: np.ndarray | None, u: np.ndarray
              ) -> tuple[np.ndarray, int]:
        n = u.shape[0]
        arms = np.empty(n, dtype=np.int64)
        i = published = 0
        while i < n:
            k = min(self.target - self.count, n - i)
            arms[i:i + k] = self.arm
            total = float(values[i:i + k, self.arm].sum())
            i += k
            published += self._advance(total, k)
        return arms, published

    def _current_model(self, version: int) -> ArmModel:
        return ArmModel(version=version, reports=self.closed_at, arm=self.arm)

    def ledger(self, T: int | None = None, aggregation: Aggregation = "reports",
               secure_sum: SecureSum | None = None) -> PrivacyLedger:
        c = self.config
        return adar_ucb_ledger(c.alpha, c.epsilon, c.delta)

    def _extra_state(self) -> dict[str, Any]:
        return {"t": self.t, "pulls": self.pulls, "last_n": self.last_n,
                "released": self.released, "arm": self.arm, "target": self.target,
                "count": self.count, "sum": self.sum, "episodes": self.episodes,
                "stale": self.stale, "closed_at": self.closed_at}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        for key in ("t", "arm", "target", "count", "episodes", "stale", "closed_at"):
            setattr(self, key, int(state[key]))
        self.sum = float(state["sum"])
        self.pulls = [int(v) for v in state["pulls"]]
        self.last_n = [int(v) for v in state["last_n"]]
        self.released = [float(v) for v in state["released"]]
