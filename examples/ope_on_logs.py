"""Off-policy evaluation before deploying: a uniform-random log on ``digits`` (what
``privbandit simulate --algo random --env digits --log u.npz`` writes), then Li et al.'s replay
estimates of ddp-linucb's (private: its noise drawn as on devices) and linucb's average reward,
next to their average reward run online for as many users on the same environment.

    python examples/ope_on_logs.py
"""

from __future__ import annotations

import json

import numpy as np

import privbandit


def main(T_log: int = 40_000, repeats: int = 4, online_runs: int = 8,
         seed: int = 0) -> dict[str, dict[str, float]]:
    log = privbandit.log_uniform("digits", T=T_log, d=40, seed=seed)
    out = {}
    for algo in ("linucb", "ddp-linucb"):
        est = privbandit.replay(log, algo, d=40, repeats=repeats, seed=seed + 1)
        M = est.n  # the matched events: one online run of M users
        online = privbandit.simulate(algo, "digits", T=M, d=40, runs=online_runs,
                                     seed=seed + 2)
        # digits: the best arm's mean is 1, so the average reward is 1 − regret / M
        value = 1.0 - online["final_regret_mean"] / M
        out[algo] = {"replay": est.value, "low": est.low, "high": est.high, "users": M,
                     "online": value,
                     "online_stderr": online["final_regret_stderr"] / M,
                     "covered": bool(est.low <= value <= est.high)}
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
