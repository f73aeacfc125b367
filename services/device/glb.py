"""What the device does for an ``ldp-glb`` task (Zheng et al. Alg. 3): choose with the cached
model's (θ̃, V, β) like any linear task, and keep, with the chosen arm's features, the version and
θ̂ of that model, so the report is anchored at the θ̂ the user was served with and names its
version (``shared.core.randomizers.glb.VersionedGLBRandomizer``) even if a newer model arrives
before her feedback. The decision state is ``[x_1 … x_d, v, θ̂_1 … θ̂_d]``, erased with the
feedback like a linear task's features.
"""

from __future__ import annotations

import numpy as np

from privbandit.shared.core.policies.model import GLBModel
from privbandit.shared.core.randomizers.glb import VersionedGLBRandomizer


def decision_state(model: GLBModel, x: np.ndarray) -> np.ndarray:
    """The stored state of a decision: the chosen features, the model's version and θ̂."""
    return np.concatenate([x, [float(model.version)], model.theta_hat])


def anchored_context(state: np.ndarray) -> np.ndarray:
    """[x, θ̂] of a decision ``state`` [x, v, θ̂] (2d + 1 entries; ``ddp-glb``'s report input:
    the version is not needed, the secure sum is anchored per report)."""
    d = (state.shape[0] - 1) // 2
    return np.concatenate([state[:d], state[d + 1:]])


def report_row(randomizer: VersionedGLBRandomizer, state: np.ndarray, reward: float,
               rng: np.random.Generator) -> np.ndarray:
    """``[v, upper(x xᵀ) + B, z x + ξ, ∇ℓ(θ̂_v) + ρ]`` for a decision ``state`` and its reward."""
    d = randomizer.d
    x, version, theta_hat = state[:d], int(state[d]), state[d + 1:]
    return randomizer.randomize_at(theta_hat, version, x[None, :], np.array([reward]), rng)[0]
