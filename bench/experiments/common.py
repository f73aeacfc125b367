"""Shared helpers of the multi-armed experiments (issue 8, item 7): run a policy over seeded
repetitions, keep what a figure needs, write the JSON beside the plot.

Every experiment uses the simulator's own code path (``shared.core.mab_simulator``) and the
default instance of ``--env mab`` unless it says otherwise; runs use seeds ``seed`` (the same
users for every policy of one experiment, so comparisons are paired).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.experiments.cli import experiment_parser
from privbandit.shared.core.environments.mab import MABEnvironment, default_means
from privbandit.shared.core.mab_simulator import per_user_fractions, simulate_mab
from privbandit.shared.core.policies import make_config
from privbandit.shared.core.simulator import summarize

OUT = Path("out/experiments")


def parser(doc: str, T: int, runs: int, K: int = 10) -> argparse.ArgumentParser:
    return experiment_parser(
        doc.splitlines()[0], T=T, runs=runs, K=K, seed=1, out=OUT,
        helps={"T": f"users per run (default {T})", "runs": f"repetitions (default {runs})",
               "K": f"arms of the default instance ({K})"})


def instance(K: int, reward_dist: str = "bernoulli") -> MABEnvironment:
    return MABEnvironment(default_means(K), reward_dist)


def run(algo: str, env: MABEnvironment, T: int, runs: int, seed: int, **params: Any
        ) -> dict[str, Any]:
    """Mean final regret ± s.e., the curve, per-user fractions and the seconds it took."""
    if algo == "ucb":
        params = {"reward_sigma": env.subgaussian, **params}
    config = make_config(algo, K=env.K, **params)
    t0 = time.perf_counter()
    results = simulate_mab(config, env, T, runs, seed, points=100)
    s = summarize(results)
    finals = [float(r.regret[-1]) for r in results]
    used, declined, reports = per_user_fractions(results)
    return {
        "algo": algo,
        "params": config.model_dump(),
        "finals": finals,
        "mean": s["final_regret_mean"],
        "stderr": s["final_regret_stderr"],
        "curve": s["regret_curve"],
        "curve_stderr": s["regret_curve_stderr"],
        "random": s["random_regret_mean"],
        "fraction_used": used / reports,
        "fraction_declined": declined / reports,
        "seconds": time.perf_counter() - t0,
    }


def ratio_stderr(a: dict[str, Any], b: dict[str, Any]) -> tuple[float, float]:
    """mean(a)/mean(b) and its delta-method standard error."""
    r = a["mean"] / b["mean"]
    rel = math.sqrt((a["stderr"] / a["mean"]) ** 2 + (b["stderr"] / b["mean"]) ** 2)
    return r, r * rel


def log_t_constant(env: MABEnvironment) -> float:
    """Σ_{a: Δ_a > 0} 1/Δ_a, the instance factor of every log T bound here."""
    gaps = env.gaps[env.gaps > 0]
    return float(np.sum(1.0 / gaps))


def write(out: Path, name: str, data: dict[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n")
    print(f"wrote {path}")
    return path


def regret_figure(panels: dict[str, list[dict[str, Any]]], xlabel: str, T: int, out: Path,
                  name: str, title: str, **axes: Any) -> None:
    """The experiment's figure as out/NAME.png: side by side, a panel of final regret at T (log
    scale) against ``xlabel`` per title in ``panels`` (its lines); ``axes``: more keys of every
    panel (``logx``, ``xticks``)."""
    from privbandit.plots import xy_plot

    xy_plot([{"title": t, "xlabel": xlabel, "ylabel": f"regret at T = {T:,}", "logy": True,
              **axes, "lines": lines} for t, lines in panels.items()], out / f"{name}.png", title)
    print(f"wrote {out / f'{name}.png'}")
