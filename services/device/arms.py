"""What the device does for a multi-armed (context-free) task: pick the arm locally from the
cached ``ArmModel`` with the device's own generator, and check a feedback's reward and privacy
level against the task before anything is stored.

The decision state kept in the device's store (in place of a linear task's feature vector) is the
pair ``[arm, p]``, p the probability the model the device held gave the arm (1 for index and
episode models, where the choice is deterministic). A Tsallis-INF task's report carries p, because
the analyzer's importance weight must divide by the probability the device actually sampled with
(``shared.core.policies.tsallis``).
"""

from __future__ import annotations

from typing import cast

import numpy as np

from privbandit.services.device.errors import EpsilonOutOfRange, RewardOutOfRange, UnexpectedEpsilon
from privbandit.shared.core.policies.arm_model import ArmModel
from privbandit.shared.core.policies.mab_config import HeLDPConfig
from privbandit.shared.core.randomizers.arms import ArmRandomizer
from privbandit.shared.core.randomizers.base import PerUserLevels, takes_levels
from privbandit.shared.settings import TaskConfig


def decide_arm(model: ArmModel, rng: np.random.Generator) -> np.ndarray:
    """The decision state ``[arm, p]`` for one user: the arm the model picks with a uniform
    drawn from ``rng``, and the probability the model gave it."""
    arm = int(model.decide(rng.random())[0])
    p = 1.0 if model.probabilities is None else float(model.probabilities[arm])
    return np.array([arm, p])


def check_reward(reward: float, bounded: bool) -> None:
    """Rewards of bounded tasks lie in [0, 1] (the schema already refuses NaN and ±inf)."""
    if bounded and not 0.0 <= reward <= 1.0:
        raise RewardOutOfRange(f"this task's rewards lie in [0, 1]; got {reward!r}")


def no_level(cfg: TaskConfig, epsilon: float | None) -> None:
    """A task without per-user privacy levels refuses a stated one."""
    if epsilon is not None:
        raise UnexpectedEpsilon(
            f"task {cfg.id} ({cfg.policy.algo}) has no per-user privacy levels; omit epsilon")


def user_level(cfg: TaskConfig, randomizer: object, epsilon: float | None) -> float | None:
    """The user's privacy level ε_t for this report: hers if given (checked against the task's
    range [0, ε_max]; 0 = she declines and her report carries nothing), else the task's default
    ``epsilon``; None for a task without per-user levels (where stating one is refused)."""
    if not takes_levels(randomizer):
        no_level(cfg, epsilon)
        return None
    if epsilon is None:
        policy = cfg.policy
        assert isinstance(policy, HeLDPConfig)  # per-user levels are HeLDP's
        return float(policy.epsilon)
    eps_max = float(cast(PerUserLevels, randomizer).eps_max)
    if not 0.0 <= epsilon <= eps_max:
        raise EpsilonOutOfRange(
            f"task {cfg.id} takes privacy levels epsilon in [0, {eps_max:g}] (0 = decline); "
            f"got {epsilon!r}")
    return float(epsilon)


def report_row(randomizer: ArmRandomizer, state: np.ndarray, reward: float,
               eps: float | None, rng: np.random.Generator) -> np.ndarray:
    """The randomized report row of a decision ``state`` = [arm, p] and its reward."""
    arm, p = int(state[0]), float(state[1])
    return randomizer.randomize(
        np.array([arm]), np.array([reward]), rng,
        eps=None if eps is None else np.array([eps]),
        prob=np.array([p]) if randomizer.carries_probability else None,
    )[0]
