"""privbandit as a library: a policy on your own stream, simulation on your own environment,
off-policy evaluation of logged data, and the privacy accountants (docs/api.md).

Every example below runs in the test suite (``pytest --doctest-modules privbandit/api.py``).

A policy on your own stream — construct it from a config, ask for an arm for the K feature
vectors of a user, give it the user's reward (privatised on the spot by the policy's own device
randomizer, as a device would), read its ledger:

>>> import numpy as np
>>> from privbandit import api
>>> bandit = api.Bandit("ldp-linucb", d=3, epsilon=2.0, seed=7)
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(4, 3)) / 3                  # K = 4 arms, d = 3, every ‖x‖ ≤ 1
>>> choice = bandit.decide(X)
>>> 0 <= choice.action < 4, choice.propensity        # the argmax: probability 1
(True, 1.0)
>>> bandit.feedback(choice, reward=1.0)
>>> bandit.ledger().threat_model, bandit.ledger().ldp_epsilon
('ldp', 2.0)

A simulation on an environment of your own: a subclass of ``Environment`` (``_draw`` returns n
users' features (n, K, d) and true means (n, K) in [0, 1]), registered by name or passed as an
object:

>>> from privbandit.shared.core.environments import Environment
>>> class TwoArms(Environment):
...     name, L = "two-arms", 1.0
...     def __init__(self, d, K, rng):
...         super().__init__(rng)
...         self.d, self.K = d, 2
...     def _draw(self, n):
...         x = np.zeros((n, 2, self.d)); x[:, 0, 0] = 1.0; x[:, 1, 1] = 1.0
...         return x, np.tile([0.2, 0.8], (n, 1))
...     def params(self):
...         return {"d": self.d, "K": 2}
>>> api.register_environment("two-arms", TwoArms)
>>> out = api.simulate("linucb", "two-arms", T=2000, d=2, runs=2, seed=1)
>>> out["final_regret_mean"] < 0.1 * out["random_regret_mean"]
True
>>> out = api.simulate("linucb", TwoArms(2, 2, np.random.default_rng(3)), T=500, d=2)
>>> out["runs"]
1

Logged data and off-policy evaluation — a uniform-random log of a simulation (Open Bandit
Pipeline's ``bandit_feedback``), then Li et al.'s replay of a learning policy on it:

>>> log = api.log_uniform("two-arms", T=4000, d=2, seed=2)
>>> sorted(k for k in log if k in ("action", "context", "pscore", "reward"))
['action', 'context', 'pscore', 'reward']
>>> float(log["pscore"][0])
0.5
>>> est = api.replay(log, "linucb", d=2, repeats=2)
>>> est.low <= est.value <= est.high and est.value > 0.6
True

The accountants:

>>> round(api.shuffle_epsilon(eps0=2.0, n=10_000, delta=1e-6), 3)
0.155
>>> round(api.policy_ledger("ddp-linucb", d=5, epsilon=1.0).central_epsilon, 6)
1.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from privbandit.shared.core.accounting.ledger import PrivacyLedger
from privbandit.shared.core.accounting.ledgers import rdp_epsilon_for_central
from privbandit.shared.core.accounting.shuffle import (
    shuffle_epsilon,
    shuffle_max_eps0,
    shuffle_min_batch,
)
from privbandit.shared.core.environments import Environment, register_environment
from privbandit.shared.core.logged import UniformConfig
from privbandit.shared.core.ope import Estimate, Evaluation
from privbandit.shared.core.policies import REGISTRY
from privbandit.shared.core.policies.base import Policy
from privbandit.shared.core.randomizers.base import off_intercept

__all__ = [
    "Bandit",
    "Choice",
    "Environment",
    "Estimate",
    "config",
    "evaluate",
    "log_uniform",
    "policy_ledger",
    "rdp_epsilon_for_central",
    "register_environment",
    "replay",
    "shuffle_epsilon",
    "shuffle_max_eps0",
    "shuffle_min_batch",
    "simulate",
]


def config(algo: str, *, paper: bool = False, **params: Any) -> Any:
    """The validated config of policy ``algo`` ("random": the uniform logging policy): the
    policy's practical defaults (its ``PRACTICAL``, what ``simulate`` uses) unless ``paper``,
    overridden by ``params`` (the config's fields, e.g. d, epsilon, batch_size)."""
    if algo == "random":
        return UniformConfig(**params)
    if algo not in REGISTRY:
        raise ValueError(f"unknown policy {algo!r}; known: {', '.join(REGISTRY)}, random")
    cls = REGISTRY[algo].config
    base = {} if paper else dict(getattr(cls, "PRACTICAL", {}))
    if "batch_size" in params:
        base.pop("batch_schedule", None)  # a fixed batch length replaces the default schedule
    return cls(**{**base, **params})


@dataclass(frozen=True)
class Choice:
    """One decision: the arm, the probability the deciding model took it with, the model's
    version, and the chosen arm's features (kept, as a device keeps them, for the feedback)."""

    action: int
    propensity: float
    model_version: int
    features: np.ndarray


class Bandit:
    """One policy serving your users: ``decide`` (the device's choice from the current model),
    ``feedback`` (the device's randomizer privatises (x_a, r) at once; the analyzer ingests the
    reports at the policy's cadence — a window of reports per model, full batches for a shuffle
    policy), ``ledger`` (what the policy's reports reveal).

    ``seed`` spawns the policy's and the devices' generators (SeedSequence); None draws fresh
    entropy. The features are checked: K rows of d finite numbers, each ‖x‖ ≤ L (and x[0] = c
    where the policy's encoding relies on an intercept c)."""

    def __init__(self, algo: str, *, seed: int | None = None, paper: bool = False,
                 **params: Any) -> None:
        from privbandit.shared.core.simulator import make_policy

        self.config = config(algo, paper=paper, **params)
        policy_ss, device_ss = np.random.SeedSequence(seed).spawn(2)
        self.policy: Policy[Any, Any] = make_policy(self.config,
                                                    np.random.default_rng(policy_ss))
        self.device_rng = np.random.default_rng(device_ss)
        self._pending: list[np.ndarray] = []

    def decide(self, features: np.ndarray) -> Choice:
        """The arm for one user's (K, d) features, with its propensity (1 for the argmax
        models: ties go to the lowest index)."""
        X = np.asarray(features, dtype=float)
        d, L = self.config.d, getattr(self.config, "L", 1.0)
        if X.ndim != 2 or X.shape[1] != d or X.shape[0] < 1:
            raise ValueError(f"features must have shape (K, {d})")
        if not np.isfinite(X).all() or (np.linalg.norm(X, axis=1) > L * (1 + 1e-9)).any():
            raise ValueError(f"features must be finite with every ||x|| <= L = {L}")
        c = getattr(self.config, "encoding_intercept", None)
        if c is not None and off_intercept(X[:, 0], c).any():
            raise ValueError(f"every feature vector must have the intercept x[0] = {c!r}")
        model = self.policy.model
        a = model.decide(X[None])  # type: ignore[attr-defined]  # a ContextDeciding model
        p = model.propensity(X[None], a)  # type: ignore[attr-defined]  # every such model has it
        arm = int(a[0])
        return Choice(arm, float(p[0]), int(model.version), X[arm].copy())

    def feedback(self, choice: Choice, reward: float) -> None:
        """The user's reward for ``choice``: randomised now (the device's step), ingested when
        the policy's window (or batch) is full."""
        r = float(reward)
        if not np.isfinite(r):
            raise ValueError("the reward must be a finite number")
        row = self.policy.randomizer.randomize(choice.features[None], np.array([r]),
                                               self.device_rng)[0]
        self._pending.append(row)
        while self._pending and len(self._pending) >= self.policy.window():
            used = self.policy.ingest(np.array(self._pending))
            self._pending = self._pending[used:]

    @property
    def model(self) -> Any:
        """The published model the next ``decide`` uses."""
        return self.policy.model

    def ledger(self, T: int | None = None, aggregation: str = "secure-sum") -> PrivacyLedger:
        """The policy's privacy ledger (spec §6 ``privacy``), for T users where it depends on T."""
        return self.policy.ledger(T, aggregation=aggregation)


def simulate(algo: str | Any, env: str | Environment, T: int, *, d: int = 5, K: int = 20,
             runs: int = 1, seed: int = 0, **params: Any) -> dict[str, Any]:
    """``runs`` simulations of T users; the summary of ``privbandit simulate``'s JSON
    (final regret, its standard error, the regret curve, …). ``algo``: a policy id (with
    ``params``) or a config; ``env``: a built-in or registered name, a ``package.module:Class``
    path, or an ``Environment`` object (one run on it; its own generator draws the users)."""
    from privbandit.shared.core import simulator

    cfg = config(algo, d=d, **params) if isinstance(algo, str) else algo
    if isinstance(env, Environment):
        if runs != 1:
            raise ValueError("an environment object serves one run")
        streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3)]
        policy = simulator.make_policy(cfg, streams[2])
        policy.bind_arms(env.fixed_arms)
        results = [simulator.run_once(policy, env, T, streams[0], streams[1],
                                      simulator.checkpoints_for(T))]
        env_params = env.params()
    else:
        results, env_params = simulator.simulate(cfg, env, K, T, runs, seed)
    return {"algo": cfg.algo, "T": T, "runs": runs, "seed": seed, "params": env_params,
            **simulator.summarize(results)}


def log_uniform(env: str, T: int, *, d: int = 5, K: int = 20, seed: int = 0
                ) -> dict[str, Any]:
    """T users of ``env`` served by the uniform-random policy, as a ``bandit_feedback``
    (``privbandit simulate --algo random --log``)."""
    from privbandit.shared.core import simulator
    from privbandit.shared.core.environments import environment_dimensions

    d, K = environment_dimensions(env, d, K)
    logs: list[Any] = []
    simulator.simulate(UniformConfig(d=d), env, K, T, 1, seed, logs=logs)
    return logs[0].bandit_feedback()


def replay(feedback: dict[str, Any], algo: str, *, repeats: int = 5, seed: int = 0,
           level: float = 0.95, **params: Any) -> Estimate:
    """Li et al.'s replay estimate of policy ``algo``'s online average reward on a uniform log
    (``shared.core.ope.replay``: each replay with its own policy and device noise)."""
    from privbandit.shared.core import ope
    from privbandit.shared.core.simulator import make_policy

    cfg = config(algo, **params)
    return ope.replay(feedback, lambda rng: make_policy(cfg, rng), repeats, seed, level).estimate


def evaluate(feedback: dict[str, Any], algo: str, *, train_fraction: float = 0.5,
             seed: int = 0, level: float = 0.95, **params: Any) -> Evaluation:
    """IPS, SNIPS and DR of policy ``algo`` trained (with its device noise) on the first
    ``train_fraction`` of the log and frozen, on the rest (``shared.core.ope``): an
    ``ope.Evaluation``, a mapping of estimator to ``Estimate`` with the overlap diagnostic
    (``.overlap``), the refused estimators (``.refused``) and the estimand."""
    from privbandit.shared.core import ope

    n = int(feedback["n_rounds"])
    policy, cut = ope.train_prefix(feedback, config(algo, **params), train_fraction, seed)
    q = ope.RidgeRewardModel.fit(feedback, slice(0, cut))
    return ope.evaluate_frozen(feedback, policy, slice(cut, n), q, level=level,
                               train=slice(0, cut))


def policy_ledger(algo: str, T: int | None = None, aggregation: str = "secure-sum", *,
                  paper: bool = False, **params: Any) -> PrivacyLedger:
    """The privacy ledger of policy ``algo`` with ``params``, nothing run (spec §6)."""
    from privbandit.shared.core.simulator import make_policy

    return make_policy(config(algo, paper=paper, **params)).ledger(T, aggregation=aggregation)
