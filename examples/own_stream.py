"""A private policy on your own stream: ldp-linucb decides for each user from her K feature
vectors, her reward is privatised on the spot (ε = 2 LDP), and the policy learns.

    python examples/own_stream.py
"""

from __future__ import annotations

import json

import numpy as np

import privbandit


def main(T: int = 3000, seed: int = 0) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    theta = np.array([0.5, -0.5, 0.5])  # the unknown preference, ‖θ‖ < 1
    bandit = privbandit.Bandit("ldp-linucb", d=3, epsilon=2.0, seed=seed)
    rewards = []
    for _ in range(T):
        X = rng.normal(size=(5, 3))
        X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)  # ‖x‖ ≤ 1
        choice = bandit.decide(X)
        p = 0.5 + 0.5 * float(X[choice.action] @ theta) / 2  # the user's click probability
        reward = float(rng.random() < p)
        bandit.feedback(choice, reward)
        rewards.append(reward)
    half = T // 2
    out = {"first_half": float(np.mean(rewards[:half])),
           "second_half": float(np.mean(rewards[half:])),
           "ldp_epsilon": float(bandit.ledger().ldp_epsilon or 0.0)}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
