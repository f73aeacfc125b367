"""What the device does for a bandit-convex-optimisation task (issue 12, item 3): play the point(s)
of the cached ``BCOModel`` around a direction u it draws itself, check the user's loss(es), and
build the report row ``[version, u, value]`` (``shared.core.randomizers.bco_rows``).

u is uniform on the unit sphere: a standard normal vector from the device's generator (seeded
once from the OS CSPRNG, ``DeviceRuntime.rng``) divided by its norm. The decision state kept in
the device's store is ``[version, u_1 … u_d, x_1 (, x_2)]``: the model version, u and the point(s)
played (the two-point report needs x₁ − x₂ for its clip and noise); it is erased with the
feedback like a linear task's features.
"""

from __future__ import annotations

import numpy as np

from privbandit.services.device.errors import (
    LossOutOfRange,
    MissingLosses,
    MissingReward,
    UnexpectedLosses,
    WrongLossCount,
)
from privbandit.shared.core.policies.bco_config import BCOConfig
from privbandit.shared.core.policies.bco_model import BCOModel
from privbandit.shared.core.randomizers.bco_rows import BCORowRandomizer
from privbandit.shared.settings import TaskConfig


def unit_direction(d: int, rng: np.random.Generator) -> np.ndarray:
    """u uniform on the unit sphere in d dimensions (a normalised standard normal vector)."""
    while True:
        z = rng.standard_normal(d)
        n = float(np.linalg.norm(z))
        if n > 0.0:
            return z / n


def decide_points(model: BCOModel, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(decision state, points to play) for one user."""
    u = unit_direction(model.d, rng)
    points = model.points(u)
    state = np.concatenate([[float(model.version)], u, points.ravel()])
    return state, points


def reward_of(cfg: TaskConfig, reward: float | None, losses: list[float] | None) -> float:
    """The reward of a task that takes one (every family but BCO): losses and a missing reward
    are refused."""
    if losses is not None:
        raise UnexpectedLosses(f"task {cfg.id} ({cfg.policy.algo}) takes a reward, not losses")
    if reward is None:
        raise MissingReward(f"task {cfg.id} needs the reward of the decision")
    return reward


def check_losses(cfg: TaskConfig, reward: float | None, losses: list[float] | None
                 ) -> list[float]:
    """A BCO task's losses: one per point played, each within [0, B]; a reward is refused."""
    if losses is None or reward is not None:
        raise MissingLosses(f"task {cfg.id} ({cfg.policy.algo}) takes losses (one per point "
                            "played), not a reward")
    points = cfg.bco_points
    if len(losses) != points:
        raise WrongLossCount(f"task {cfg.id} plays {points} point(s) per user; got "
                             f"{len(losses)} losses")
    policy = cfg.policy
    assert isinstance(policy, BCOConfig)  # a BCO task's
    B = float(policy.loss_bound)
    for f in losses:
        if not 0.0 <= f <= B:  # the schema already refuses NaN and ±inf
            raise LossOutOfRange(f"task {cfg.id}'s losses lie in [0, {B:g}]; got {f!r}")
    return losses


def report_row(randomizer: BCORowRandomizer, state: np.ndarray, losses: list[float],
               rng: np.random.Generator) -> np.ndarray:
    """The report row of a decision ``state`` and the user's losses (noised for LDP tasks)."""
    d = randomizer.d
    version, u = int(state[0]), state[1:1 + d]
    points = state[1 + d:].reshape(randomizer.points, d)
    value = randomizer.value(np.asarray(losses, dtype=float), points, rng)
    return randomizer.row(version, u, value)
