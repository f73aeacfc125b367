"""Returning users in the simulator (issue 24): N persons who each come back several times, each
bounded, as on the device, to her first k reports.

**The population.** T visits by N persons: each person makes ⌊T/N⌋ or ⌈T/N⌉ visits, in a
uniformly random order (one permutation per run). A person's reports are correlated, as real
ones are:

- linear (``linear`` environment): person u has a fixed offset o_u, uniform on the sphere of
  R^{d−1} times ``offset``; each visit draws fresh arm directions v and plays
  x = (1/√2)(1, (v + o_u)/‖v + o_u‖) — her arms lean towards her own direction, and the means
  ⟨x, θ*⟩ stay in [0, 1] (‖x‖ = 1 as in ``linear``);
- multi-armed (``mab``, Bernoulli): person u has a shift s_u ~ ``offset`` · U(−1, 1) added to
  every arm's mean (clipped to [0, 1]), so her rewards are correlated across visits while the
  gaps, and so the pseudo-regret, are those of the instance (whenever no mean is clipped); a
  task with per-user levels draws one level ε_u per person, kept on every visit.

**The bound.** A visit beyond its person's k-th report is decided and its regret counted (the
device answers it), but no report is made (``withheld``), exactly the device's first-k rule
(``services.device.persons``). The policy's windows and batches count reports, so a window is
filled with kept visits; visits a model switch leaves undecided are decided again, as in
``simulator.run_once``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privbandit.shared.core.environments import make_environment
from privbandit.shared.core.environments.linear import (
    LinearEnvironment,
    biased_features,
    unit_directions,
)
from privbandit.shared.core.environments.mab import MABEnvironment
from privbandit.shared.core.policies import Policy, PolicyConfig, build_policy
from privbandit.shared.core.simulator import ContextDeciding, RunResult, run_plan


@dataclass(frozen=True)
class Population:
    """N persons, each bounded to her first ``k`` reports (None: unbounded), with per-person
    correlation of strength ``offset``."""

    users: int
    k: int | None = None
    offset: float = 0.5

    def __post_init__(self) -> None:
        if self.users < 1:
            raise ValueError("the population needs at least one person")
        if self.k is not None and self.k < 1:
            raise ValueError("the contribution bound k must be >= 1")
        if not self.offset >= 0:
            raise ValueError("the per-person offset must be >= 0")


def visit_order(users: int, T: int, rng: np.random.Generator) -> np.ndarray:
    """The person of each of T visits: each person ⌊T/N⌋ or ⌈T/N⌉ times, in random order."""
    return rng.permutation(np.arange(T) % users)


class _Visits:
    """The visit stream of one run: persons, their contexts (linear), and visits handed back."""

    def __init__(self, env: LinearEnvironment, order: np.ndarray, offsets: np.ndarray) -> None:
        self.env, self.order, self.offsets = env, order, offsets
        self.pos = 0
        self.back: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def take(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Up to n visits: (persons, X, μ), handed-back ones first."""
        if self.back:
            return self.back.pop()
        users = self.order[self.pos:self.pos + n]
        self.pos += users.shape[0]
        env = self.env
        v = unit_directions(env.rng, (users.shape[0], env.K, env.d - 1))
        v = v + self.offsets[users][:, None, :]
        norms = np.linalg.norm(v, axis=-1, keepdims=True)
        X = biased_features(v / np.where(norms > 0, norms, 1.0))
        return users, X, env.mean(X)

    def give_back(self, users: np.ndarray, X: np.ndarray, mu: np.ndarray) -> None:
        if users.shape[0]:
            self.back.append((users, X, mu))


def _kept(users: np.ndarray, counts: np.ndarray, k: int | None) -> np.ndarray:
    """Which of these visits (in order) make a report: the person's first k, given the reports
    ``counts`` already made."""
    if k is None:
        return np.ones(users.shape[0], dtype=bool)
    rank = np.zeros(users.shape[0], dtype=np.int64)
    seen: dict[int, int] = {}
    for j, u in enumerate(users.tolist()):
        rank[j] = seen.get(u, 0)
        seen[u] = rank[j] + 1
    return counts[users] + rank < k


def run_returning_linear(
    policy: Policy, env: LinearEnvironment, T: int, population: Population,
    streams: tuple[np.random.Generator, ...], checkpoints: np.ndarray,
    on_progress: Callable[[int], None] | None = None,
) -> RunResult:
    """One run of T visits of ``population`` on a linear environment (module docstring)."""
    start = time.perf_counter()
    reward_rng, device_rng, people_rng = streams
    offsets = population.offset * unit_directions(people_rng, (population.users, env.d - 1))
    visits = _Visits(env, visit_order(population.users, T, people_rng), offsets)
    counts = np.zeros(population.users, dtype=np.int64)
    inst = np.empty(T)
    inst_random = np.empty(T)
    t = ingested = withheld = 0
    while t < T:
        model = policy.model
        if not isinstance(model, ContextDeciding):
            raise TypeError(f"{policy.algo}'s model does not decide from contexts")
        want = policy.window()
        # Visits until `want` reports (or the horizon): the model is fixed until they are in.
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        kept_total, seen = 0, 0
        trial = counts.copy()
        while kept_total < want and t + seen < T:
            users, X, mu = visits.take(min(want - kept_total, T - t - seen))
            keep = _kept(users, trial, population.k)
            cut = users.shape[0]
            if kept_total + int(keep.sum()) > want:  # stop at the want-th report
                cut = int(np.flatnonzero(keep)[want - kept_total - 1]) + 1
                visits.give_back(users[cut:], X[cut:], mu[cut:])
            users, X, mu, keep = users[:cut], X[:cut], mu[:cut], keep[:cut]
            np.add.at(trial, users[keep], 1)
            parts.append((users, X, mu, keep))
            kept_total += int(keep.sum())
            seen += cut
        users = np.concatenate([p[0] for p in parts])
        X = np.concatenate([p[1] for p in parts])
        mu = np.concatenate([p[2] for p in parts])
        keep = np.concatenate([p[3] for p in parts])
        n = users.shape[0]
        a = model.decide(X)
        mu_a = mu[np.arange(n), a]
        r = env.rewards(mu_a, reward_rng)
        final = n
        if kept_total:
            rows = policy.randomizer.randomize(X[keep, a[keep]], r[keep], device_rng)
            if policy.batch_size > 1 and kept_total < want:
                pass  # the horizon ends inside a batch: the shuffler never releases it
            else:
                used = policy.ingest(rows)
                ingested += used
                if used < kept_total:  # a model switch: the visits after the used-th report
                    final = int(np.flatnonzero(keep)[used - 1]) + 1
                    visits.give_back(users[final:], X[final:], mu[final:])
        np.add.at(counts, users[:final][keep[:final]], 1)
        withheld += int((~keep[:final]).sum())
        inst[t:t + final] = mu.max(axis=1)[:final] - mu_a[:final]
        inst_random[t:t + final] = mu.max(axis=1)[:final] - mu.mean(axis=1)[:final]
        t += final
        if on_progress is not None:
            on_progress(final)
    return _result(checkpoints, inst, inst_random, policy, ingested, withheld, counts, start)


def _result(checkpoints: np.ndarray, inst: np.ndarray, inst_random: np.ndarray, policy: Any,
            ingested: int, withheld: int, counts: np.ndarray, start: float) -> RunResult:
    result = RunResult.of_users(
        checkpoints, inst, np.cumsum(inst_random)[checkpoints - 1], policy.model.version,
        ingested, start, extra={"withheld": withheld,
                                "max_reports_per_person": int(counts.max(initial=0))})
    result.repairs = int(getattr(policy, "repairs", 0))
    return result


def run_returning_mab(
    policy: Any, env: MABEnvironment, T: int, population: Population,
    streams: tuple[np.random.Generator, ...], checkpoints: np.ndarray,
    on_progress: Callable[[int], None] | None = None,
) -> RunResult:
    """One run of T visits of ``population`` on a Bernoulli multi-armed instance (module
    docstring), through the services' path: decide from the published model, one report row
    ingested at a time (``mab_simulator.play_by_rows``)."""
    from privbandit.shared.core.mab_simulator import check_compatible, levels_of

    start = time.perf_counter()
    if env.reward_dist != "bernoulli":
        raise ValueError("returning users on mab: Bernoulli rewards only")
    check_compatible(policy, env)
    reward_rng, device_rng, people_rng = streams
    levels = levels_of(policy)
    order = visit_order(population.users, T, people_rng)
    shift = population.offset * people_rng.uniform(-1.0, 1.0, population.users)
    person_eps = None if levels is None else levels.sample(population.users, people_rng)
    counts = np.zeros(population.users, dtype=np.int64)
    inst = np.empty(T)
    withheld = 0
    rand = policy.randomizer
    for t, u in enumerate(order.tolist()):
        means = np.clip(env.means + shift[u], 0.0, 1.0)
        R = (reward_rng.random((1, env.K)) < means).astype(float)
        eps = None if person_eps is None else person_eps[u:u + 1]
        values = rand.values(R, eps, device_rng)
        arm = int(policy.model.decide(device_rng.random())[0])
        inst[t] = env.gaps[arm]
        if population.k is not None and counts[u] >= population.k:
            withheld += 1
            continue
        counts[u] += 1
        cols = [float(arm)]
        if rand.per_user_epsilon:
            cols.append(float(eps[0]))  # type: ignore[index]  # per-user levels: drawn above
        if rand.carries_probability:
            cols.append(float(policy.model.probabilities[arm]))
        row = np.array([[*cols, float(values[0, arm])]])
        policy.ingest(row)
        if on_progress is not None and (t + 1) % 1024 == 0:
            on_progress(1024)
    random_inst = np.full(T, float(env.gaps.mean()))
    result = _result(checkpoints, inst, random_inst, policy, int(counts.sum()), withheld, counts,
                     start)
    result.extra.update(used=policy.used, declined=policy.declined, reports=policy.reports)
    return result


def simulate_returning(
    config: PolicyConfig | Any, env_name: str, K: int, T: int, runs: int, seed: int,
    population: Population, on_progress: Callable[[int], None] | None = None,
    points: int = 200, mab_env: MABEnvironment | None = None,
) -> tuple[list[RunResult], dict[str, Any]]:
    """``runs`` runs of T visits of ``population`` (``linear``, or ``mab`` with ``mab_env``);
    each run spawns its own streams (environment, rewards, devices, policy, persons)."""
    if env_name not in ("linear", "mab"):
        raise ValueError("returning users run on the linear and mab environments")
    checkpoints, children = run_plan(T, runs, seed, points)
    results: list[RunResult] = []
    params: dict[str, Any] = {}
    for child in children:
        env_rng, reward_rng, device_rng, policy_rng, people_rng = (
            np.random.default_rng(s) for s in child.spawn(5))
        policy = build_policy(config, policy_rng)
        streams = (reward_rng, device_rng, people_rng)
        if env_name == "mab":
            assert mab_env is not None
            params = mab_env.params()
            results.append(run_returning_mab(policy, mab_env, T, population, streams,
                                             checkpoints, on_progress))
            continue
        env = make_environment(env_name, config.d, K, env_rng)
        assert isinstance(env, LinearEnvironment)
        params = env.params()
        results.append(run_returning_linear(policy, env, T, population, streams, checkpoints,
                                            on_progress))
    params.update(users=population.users, contributions=population.k,
                  user_offset=population.offset)
    return results, params
