"""Logged data in and off-policy evaluation of any action distribution (issue 42), re-exported
from ``privbandit``: ``read_log`` (an .npz ``bandit_feedback``, the Open Bandit Dataset's CSV
files, or the plain CSV / Parquet layout of ``shared.core.logfiles``), ``read_obd``,
``evaluate_distribution`` (IPS, SNIPS and DR of any π_e with the overlap diagnostic; "gain",
its IPS difference from the logging policy), ``frozen_distribution`` (a policy's action
distribution after training on part of a log) and ``log_exploring`` (a simulated log of a
learning policy with ε-greedy or softmax exploration).

>>> import numpy as np, privbandit
>>> log = privbandit.log_exploring("linucb", "linear", T=3000, d=3, K=4,
...                                explore="epsilon-greedy:0.3", seed=1)
>>> bool(log["pscore"].min() >= 0.3 / 4), log["pi_b"].shape
(True, (3000, 4))
>>> uniform = np.full((3000, 4), 0.25)
>>> ev = privbandit.evaluate_distribution(log, uniform)
>>> sorted(ev), ev.refused, ev.overlap.unsupported
(['dr', 'ips', 'snips'], {}, 0.0)
>>> ev.estimand.startswith("frozen value")
True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from privbandit.shared.core import ope
from privbandit.shared.core.logfiles import LogFormatError, read_any, read_obd
from privbandit.shared.core.logged import feature_dimension
from privbandit.shared.core.overlap import MAX_UNSUPPORTED

__all__ = ["LogFormatError", "evaluate_distribution", "feature_dimension", "frozen_distribution",
           "log_exploring", "read_log", "read_obd"]


def read_log(path: Path | str, **options: Any) -> dict[str, Any]:
    """A log as a ``bandit_feedback``: ``fmt`` ("auto" by default: .npz, an OBD directory or
    CSV, Parquet, else the plain CSV), ``action_context``, ``positions`` ("feature", "pool" or
    a position), ``encoding`` ("shared" or "disjoint"), ``user_columns``, ``item_columns``,
    ``affinity``, ``n_actions`` (``shared.core.logfiles.read_any``). A ``LogFormatError``
    names the file, row or column that is wrong."""
    return read_any(path, **options)


def evaluate_distribution(feedback: dict[str, Any], action_dist: np.ndarray, *,
                          estimated_rewards: np.ndarray | None = None,
                          rows: slice | None = None, level: float = 0.95,
                          estimators: tuple[str, ...] = ope.ESTIMATORS,
                          max_unsupported: float = MAX_UNSUPPORTED) -> ope.Evaluation:
    """IPS, SNIPS and DR of the action distribution π_e (``action_dist``: (n, K) rows for the
    logged rounds ``rows``, all by default; or obp's (n, K, 1)) with normal intervals and the
    overlap diagnostic (``.overlap``); IPS and SNIPS refused (``.refused``) where more than
    ``max_unsupported`` of π_e's mass falls on actions the logger never takes.

    DR's reward model: ``estimated_rewards`` q̂ (n, K) if given, else the ridge regression of
    the rewards on the logged actions' features over the rounds before ``rows`` (those after
    them if ``rows`` starts the log; ``rows`` themselves, in-sample, if they are the whole log)
    — for the rounds after a training prefix, the model ``privbandit.evaluate`` fits."""
    n_all = int(feedback["n_rounds"])
    rows = slice(0, n_all) if rows is None else rows
    start, stop, _ = rows.indices(n_all)
    idx = np.arange(start, stop)
    if estimated_rewards is None and "dr" in estimators:
        fit = slice(0, start) if start > 0 else slice(stop, n_all) if stop < n_all else rows
        q_model = ope.RidgeRewardModel.fit(feedback, fit)
        estimated_rewards = np.concatenate([q_model.predict(X) for X, _ in
                                            ope.chunks(feedback, rows)])
    pi_b = feedback.get("pi_b")
    return ope.evaluate_distribution(
        np.asarray(feedback["reward"], dtype=float)[idx],
        np.asarray(feedback["action"], dtype=np.int64)[idx],
        np.asarray(feedback["pscore"], dtype=float)[idx], action_dist, estimated_rewards,
        estimators=estimators, level=level,
        pi_b=None if pi_b is None else np.asarray(pi_b)[idx],
        estimand=("frozen value: the expected reward per user of the given action "
                  f"distribution over the logged users of rounds [{start}, {stop})"),
        max_unsupported=max_unsupported)


class Frozen(NamedTuple):
    """A policy trained on part of a log and frozen: its action distribution on the other
    rounds, those rounds, and the version of its model (0: it never published one)."""

    action_dist: np.ndarray
    rows: slice
    model_version: int


def frozen_distribution(feedback: dict[str, Any], algo: str, *, train_fraction: float = 0.5,
                        seed: int = 0, **params: Any) -> Frozen:
    """π_e (n_eval, K) on the logged rounds after the first ``train_fraction`` of the log, of
    policy ``algo`` (with ``params``: its practical defaults otherwise) trained on those first
    rounds with its device noise and then frozen — the policy ``privbandit.evaluate`` values,
    the same seeds giving the same model."""
    from privbandit.api import config

    policy, cut = ope.train_prefix(feedback, config(algo, **params), train_fraction, seed)
    rows = slice(cut, int(feedback["n_rounds"]))
    pi = np.concatenate([ope.action_distribution(policy.model, X)
                         for X, _ in ope.chunks(feedback, rows)])
    return Frozen(pi, rows, int(policy.model.version))


def log_exploring(algo: str, env: str, T: int, *, explore: str, d: int = 5, K: int = 20,
                  seed: int = 0, **params: Any) -> dict[str, Any]:
    """T users of ``env`` served by policy ``algo`` (learning as it goes) deciding with
    ``explore`` ("epsilon-greedy:EPS" or "softmax:TAU"), as a ``bandit_feedback`` whose pscore
    and pi_b are the exact exploring probabilities (``simulate --explore ... --log``)."""
    from privbandit.api import config  # the policy's practical defaults, as api.simulate's
    from privbandit.shared.core import simulator
    from privbandit.shared.core.environments import environment_dimensions
    from privbandit.shared.core.exploration import Exploration

    d, K = environment_dimensions(env, d, K)
    logs: list[Any] = []
    simulator.simulate(config(algo, d=d, **params), env, K, T, 1, seed, logs=logs,
                       exploration=Exploration.parse(explore))
    return logs[0].bandit_feedback()
