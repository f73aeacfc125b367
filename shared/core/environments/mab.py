"""``mab``: K arms with given means and reward distributions (spec §6, issue 8 item 1).

Reward distributions (``reward_dist``), each with arm a's mean exactly μ_a:
- ``bernoulli`` (default): R ~ Bernoulli(μ_a).
- ``mixed``: rewards in [0, 1] that are not Bernoulli, cycling over three families by arm index
  (HeLDP §3.2 allows "arbitrary values in [0, 1]"):
    a ≡ 0 (mod 3): Beta(5μ, 5(1−μ))           (μ = 0.8 gives Beta(4, 1))
    a ≡ 1 (mod 3): uniform on {2μ−1, 1} if μ ≥ 1/2, on {0, 2μ} otherwise (μ = 0.7: {0.4, 1})
    a ≡ 2 (mod 3): uniform on [μ−h, μ+h], h = min(μ, 1−μ)          (μ = 1/2 gives U[0, 1])
- ``gaussian``: R = μ_a + N(0, 1), unbounded with i.i.d. 1-sub-Gaussian noise — the setting of
  HeLDP Lemma 12 (means in [0, 1]); only policies that accept unbounded rewards run on it (the
  sigmoid variants, and UCB with a sub-Gaussian width).

Pseudo-regret is Σ_t (μ* − μ_{a_t}), as for the linear tasks.

The default instance (``default_means``): arm 0 at 0.9 and the others evenly spaced from 0.8 down
to 0.1, so the smallest gap is 0.1 whatever K is and the best arm is unique.

The simulator draws a window of users at once: ``reward_grid`` returns every arm's reward for each
user (an n × K array), and the policy's play reads the entry of the arm it chose. Entries of arms
not chosen are never looked at, so this is the same law as drawing only the chosen reward.
"""

from __future__ import annotations

from typing import Any

import numpy as np

REWARD_DISTS = ("bernoulli", "mixed", "gaussian")
GAUSSIAN_NOISE_SD = 1.0
BETA_CONCENTRATION = 5.0


def default_means(K: int) -> np.ndarray:
    """μ = (0.9, 0.8, …, 0.1): the best arm 0.1 above the others, which are evenly spaced."""
    if K < 2:
        raise ValueError("need at least K = 2 arms")
    return np.concatenate([[0.9], np.linspace(0.8, 0.1, K - 1)])


class MABEnvironment:
    """Stochastic K-armed bandit with fixed means and per-arm reward laws."""

    name = "mab"

    def __init__(self, means: np.ndarray | list[float], reward_dist: str = "bernoulli") -> None:
        mu = np.asarray(means, dtype=float)
        if mu.ndim != 1 or mu.shape[0] < 2:
            raise ValueError("need at least two arm means")
        if not np.isfinite(mu).all():
            raise ValueError("arm means must be finite")
        if reward_dist not in REWARD_DISTS:
            raise ValueError(f"unknown reward distribution {reward_dist!r}; "
                             f"known: {', '.join(REWARD_DISTS)}")
        inside = (mu > 0) & (mu < 1) if reward_dist == "mixed" else (mu >= 0) & (mu <= 1)
        if not inside.all():
            raise ValueError("arm means must lie in [0, 1] (in (0, 1) for mixed rewards)")
        self.means = mu
        self.K = int(mu.shape[0])
        self.reward_dist = reward_dist
        self.best = float(mu.max())
        self.gaps = self.best - mu

    @property
    def bounded(self) -> bool:
        """Rewards lie in [0, 1] (every distribution but ``gaussian``)."""
        return self.reward_dist != "gaussian"

    @property
    def subgaussian(self) -> float:
        """σ with R − μ σ-sub-Gaussian: 1/2 for rewards in [0, 1] (Hoeffding), else the noise sd."""
        return 0.5 if self.bounded else GAUSSIAN_NOISE_SD

    def reward_grid(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Rewards of every arm for n users, shape (n, K)."""
        mu = self.means
        if self.reward_dist == "bernoulli":
            return (rng.random((n, self.K)) < mu).astype(float)
        if self.reward_dist == "gaussian":
            return mu + GAUSSIAN_NOISE_SD * rng.standard_normal((n, self.K))
        out = np.empty((n, self.K))
        fam = np.arange(self.K) % 3
        beta = np.flatnonzero(fam == 0)
        if beta.size:
            out[:, beta] = rng.beta(BETA_CONCENTRATION * mu[beta],
                                    BETA_CONCENTRATION * (1 - mu[beta]), size=(n, beta.size))
        two = np.flatnonzero(fam == 1)
        if two.size:
            m = mu[two]
            low = np.where(m >= 0.5, 2 * m - 1, 0.0)
            high = np.where(m >= 0.5, 1.0, 2 * m)
            out[:, two] = np.where(rng.random((n, two.size)) < 0.5, low, high)
        uni = np.flatnonzero(fam == 2)
        if uni.size:
            m = mu[uni]
            h = np.minimum(m, 1 - m)
            out[:, uni] = m - h + 2 * h * rng.random((n, uni.size))
        return out

    def params(self) -> dict[str, Any]:
        return {"K": self.K, "means": self.means.tolist(), "reward_dist": self.reward_dist}
