"""The demo's users for a bandit-convex-optimisation task (issue 12): the ``bco-quadratic``
environment in the task's dimension, on the task's ball (R) and loss range (B), seeded from the
demo's seed (``user_streams``: the environment stream draws x*, the reward stream each user's
offset ζ_t). A user sends ``{}`` to decide, suffers f_t at the point(s) the device answers and
sends them as ``losses``; her regret is F_t(played) − min_x F_t(x) (Zheng et al. §3.1; the mean of
the two points' expected losses for a two-point task, their Eq. 2), the uniformly random point's
regret is the environment's Monte Carlo estimate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from privbandit.shared.core.environments.bco import BCOEnvironment
from privbandit.shared.core.policies.families import BCO_FAMILY
from privbandit.shared.core.policies.registry import family_of
from privbandit.shared.protocol.messages import TaskInfo

DEMO_ENV = BCO_FAMILY.demo_env


def is_bco_task(task: TaskInfo) -> bool:
    return family_of(task.algo) is BCO_FAMILY


def demo_environment(task: TaskInfo, env_rng: np.random.Generator) -> BCOEnvironment:
    env: BCOEnvironment = BCO_FAMILY.demo_users(task.policy, int(task.policy["d"]), task.K,
                                                env_rng)
    return env


class BCOUsers:
    """The users of a BCO demo run, in user order."""

    def __init__(self, task: TaskInfo, env_rng: np.random.Generator,
                 user_rng: np.random.Generator) -> None:
        self.env = demo_environment(task, env_rng)
        self._user_rng = user_rng
        self._zeta: list[float] = []
        self.best = self.env.best_fixed_loss(1)  # min_x F(x) (fixed optimum)
        self.random = float(self.env.uniform_regret(np.array([1]))[0])

    def offset(self, i: int) -> float:
        """ζ_i of user i (drawn in user order, so a run's users do not depend on concurrency)."""
        while len(self._zeta) <= i:
            self._zeta.extend(self.env.user_offsets(256, self._user_rng).tolist())
        return self._zeta[i]

    def respond(self, i: int, points: list[list[float]]) -> tuple[dict[str, Any], float]:
        """User i's feedback fields (her losses at the points) and her regret."""
        X = np.asarray(points, dtype=float)
        t = np.zeros(X.shape[0], dtype=np.int64)
        losses = self.env.loss(X, t, np.full(X.shape[0], self.offset(i)))
        regret = float(np.mean(self.env.mean_loss(X, t))) - self.best
        return {"losses": [float(v) for v in losses]}, regret
