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

from typing import Any

from privbandit.bandit import Bandit, Choice, DecisionClosed
from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger, SecureSum
from privbandit.shared.core.accounting.ledgers import rdp_epsilon_for_central
from privbandit.shared.core.accounting.shuffle import (
    shuffle_epsilon,
    shuffle_max_eps0,
    shuffle_min_batch,
)
from privbandit.shared.core.environments import Environment, register_environment
from privbandit.shared.core.logged import UniformConfig
from privbandit.shared.core.ope import Estimate, Evaluation
from privbandit.simulation import SimulationError, resolve_config

__all__ = [
    "Bandit",
    "Choice",
    "DecisionClosed",
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
    "SimulationError",
    "simulate",
]


def config(algo: str, *, paper: bool = False, aggregation: Aggregation = "secure-sum",
           T: int | None = None, **params: Any) -> Any:
    """The validated config of policy ``algo`` ("random": the uniform logging policy), resolved
    as ``privbandit simulate`` resolves it (``simulation.resolve_config``): the policy's
    practical defaults (its registry entry's ``practical``) unless ``paper``, for
    ``aggregation`` (sblb's ε0 is sized for what the shuffler releases), the horizon T where a
    parameter depends on it, overridden by ``params`` (the config's fields, e.g. d, epsilon,
    batch_size); a field the policy does not have is an error."""
    cfg, ignored = resolve_config(algo, T=T, paper=paper, aggregation=aggregation,
                                  params=params)
    if ignored:
        raise SimulationError(f"{algo} has no parameter(s) {', '.join(ignored)}")
    return cfg


def simulate(algo: str | Any, env: str | Environment, T: int, *, d: int | None = None,
             K: int | None = None, runs: int = 1, seed: int = 0, paper: bool = False,
             aggregation: Aggregation = "secure-sum", central_epsilon: float | None = None,
             **params: Any) -> dict[str, Any]:
    """``runs`` simulations of T users: the JSON of ``privbandit simulate`` with the same
    arguments (the same function runs both, ``simulation.run``: final regret, its standard
    error, the regret curve, …, and ``privacy``, the policy's ledger). ``algo``: a policy id,
    or a config (``config(...)``: its every field as it is); ``params``: the config fields
    (``epsilon``, ``batch_size``, …, the command line's flags without ``--``); ``env``: a
    built-in or registered name, a ``package.module:Class`` path, or an ``Environment`` object
    (one run on it; its own generator draws the users). The environment's options are keyword
    arguments too: ``means``, ``reward_dist`` (``mab``), ``users``, ``contributions``,
    ``user_offset`` (returning users), ``radius``, ``loss_bound``, ``loss_noise``,
    ``drift_period`` (BCO). A parameter the policy does not use is an error; the command line's
    other remarks are warnings."""
    import warnings

    from privbandit import simulation

    options = {k: params.pop(k) for k in list(params) if k in ENV_OPTIONS}
    if not isinstance(algo, str):  # a config: its fields as given, no practical default over them
        fields = algo.model_dump()
        algo = fields.pop("algo")
        aggregation = fields.pop("accountant", aggregation)
        d = fields.get("d") if d is None else d
        params, paper = {**fields, **params}, True
    req = simulation.Request(
        algo=algo, env=env, T=T, runs=runs, seed=seed, d=d, K=K, params=params, paper=paper,
        aggregation=aggregation, central_epsilon=central_epsilon, strict=True,
        note=lambda text: warnings.warn(text, stacklevel=3), **options)
    return simulation.run(req).summary


# ``simulate``'s keyword arguments that describe the environment, not the policy.
ENV_OPTIONS = ("means", "reward_dist", "users", "contributions", "user_offset", "radius",
               "loss_bound", "loss_noise", "drift_period")


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


def policy_ledger(algo: str, T: int | None = None, aggregation: Aggregation = "secure-sum", *,
                  paper: bool = False, secure_sum: SecureSum | None = None,
                  **params: Any) -> PrivacyLedger:
    """The privacy ledger of policy ``algo`` with ``params``, nothing run (spec §6): the config
    resolved for T and ``aggregation`` as ``simulate`` resolves it, so the ledger is the one a
    simulation of T users states (``secure_sum``: a services task's transport, whose view of
    the parties the ledger then states, as the analyzer's does)."""
    from privbandit.shared.core.simulator import make_policy

    cfg = config(algo, paper=paper, aggregation=aggregation, T=T, **params)
    return make_policy(cfg).ledger(T, aggregation=aggregation, secure_sum=secure_sum)
