"""Offline Monte Carlo of ddp-linucb's first two models on ``linear`` (issue 22): how much of the
second model's error is the greedy play of its batch, and how much the equal weighting of the
batches. No bandit loop: batch 1 (l0 users) plays uniformly, its noisy sums give model 1 (ridge
estimate on the frobenius-encoded noise of one batch at σ_b per released coordinate), batch 2
(2·l0 users) plays greedily with model 1 — or, for comparison, uniformly — and adds one more
batch's noise; printed is the mean of 1 − cos φ, φ the angle between the model's non-bias part
and θ*'s, which is the per-user regret of following it divided by the random policy's (on
``linear`` the expected reward of the arm a model picks is cos φ times the best one's, above ½).

    python -m bench.experiments.ddp_information --reps 600 --seed 7
"""

from __future__ import annotations

import math

import numpy as np

from bench.experiments.cli import experiment_parser
from privbandit.shared.core.environments.linear import biased_features, unit_directions


def _ridge(G: np.ndarray, u: np.ndarray, c: float) -> np.ndarray:
    """θ̃ = eigen-clip(G + cI, 1)⁻¹ u (the ``noise`` regularizer with λ = 1)."""
    ev, U = np.linalg.eigh(G + c * np.eye(G.shape[0]))
    return np.asarray(np.linalg.solve(U @ np.diag(np.maximum(ev, 1.0)) @ U.T, u))


def _one_minus_cos(theta: np.ndarray, w: np.ndarray) -> float:
    v = theta[1:]
    return float(1.0 - v @ w / np.linalg.norm(v))


def run(reps: int, seed: int, l0: int, d: int, K: int, sigma: float) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    s_off = sigma / math.sqrt(2.0)  # frobenius: off-diagonal entries of G̃ carry σ_b/√2

    def noise() -> tuple[np.ndarray, np.ndarray]:
        A = np.triu(rng.normal(size=(d, d)) * s_off, 1)
        return A + A.T + np.diag(rng.normal(size=d) * sigma), rng.normal(size=d) * sigma

    def batch(n: int, theta: np.ndarray, model: np.ndarray | None
              ) -> tuple[np.ndarray, np.ndarray]:
        X = biased_features(unit_directions(rng, (n, K, d - 1)))
        a = rng.integers(0, K, size=n) if model is None else np.argmax(X @ model, axis=1)
        x = X[np.arange(n), a]
        return x.T @ x, x.T @ rng.binomial(1, x @ theta)

    ridge = 1.0 + 2.0 * s_off * math.sqrt(d)  # κ = 1, one batch's noise
    out: dict[str, list[float]] = {"model 1": [], "model 2, greedy batch 2": [],
                                   "model 2, uniform batch 2": [],
                                   "model 2, greedy, batch 1 weighted 1/2": []}
    for _ in range(reps):
        w = unit_directions(rng, (d - 1,))
        theta = biased_features(w)
        G1, u1 = batch(l0, theta, None)
        H1, h1 = noise()
        th1 = _ridge(G1 + H1, u1 + h1, ridge)
        out["model 1"].append(_one_minus_cos(th1, w))
        H2, h2 = noise()
        for name, model in (("model 2, greedy batch 2", th1), ("model 2, uniform batch 2", None)):
            G2, u2 = batch(2 * l0, theta, model)
            th2 = _ridge(G1 + G2 + H1 + H2, u1 + u2 + h1 + h2, 1 + (ridge - 1) * math.sqrt(2))
            out[name].append(_one_minus_cos(th2, w))
            if model is not None:
                th2w = _ridge(0.5 * (G1 + H1) + G2 + H2, 0.5 * (u1 + h1) + u2 + h2,
                              1 + (ridge - 1) * math.sqrt(1.25))
                out["model 2, greedy, batch 1 weighted 1/2"].append(_one_minus_cos(th2w, w))
    return {k: float(np.mean(v)) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    p = experiment_parser((__doc__ or "").split("\n\n")[0], seed=7, d=5, K=20)
    p.add_argument("--reps", type=int, default=600)
    p.add_argument("--l0", type=int, default=497)
    p.add_argument("--sigma", type=float, default=9.93, help="σ_b (ε = 1, δ = 1e-6, s = 128)")
    args = p.parse_args(argv)
    for name, value in run(args.reps, args.seed, args.l0, args.d, args.K, args.sigma).items():
        print(f"{name:40s} 1 - cos φ = {value:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
