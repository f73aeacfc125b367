"""One simulation, one code path (issue 46): ``privbandit simulate`` (``simulate_cmd``) and the
library's ``privbandit.simulate`` (``api``) both describe a run as a ``Request`` and call ``run``,
which resolves the policy's config (``resolve_config``: practical defaults, the aggregation, the
batch schedule, the horizon-dependent parameters), runs the simulator of the policy's family and
summarises the runs with the privacy ledger (spec §6's JSON). So the command line and the library
give the same answer for the same request, and the library's result always holds ``privacy``.

A user mistake is a ``SimulationError`` (a ``ValueError``) with a one-line message (the command
line prints it as ``error: …`` and exits 2); a remark (a parameter the policy does not use, an
environment that fixes its own dimensions) goes to the request's ``note`` callback.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from privbandit.shared.core.accounting.ledger import Aggregation
from privbandit.shared.core.environments import BCO_ENVIRONMENTS, Environment
from privbandit.shared.core.logged import UniformConfig
from privbandit.shared.core.policies.families import BCO_FAMILY, LINEAR, PHASE
from privbandit.shared.core.policies.registry import REGISTRY

if TYPE_CHECKING:  # imported where used (the command line starts without loading them)
    from privbandit.shared.core.simulator import RunResult

# ``algo = "random"``: the uniform-random logging policy (not a registered policy: it learns
# nothing; the logging policy of a uniform log for replay).
RANDOM = "random"
BCO_ALGOS = [algo for algo, e in REGISTRY.items() if e.family is BCO_FAMILY]
AGGREGATIONS = ("reports", "secure-sum")
# Config fields a request's ``params`` may not set: ``algo`` is the request's, and sblb's
# ``accountant`` follows ``aggregation`` (its ε0 is sized for what the shuffler releases).
DERIVED_FIELDS = {"algo": "the policy id", "accountant": "aggregation"}

Progress = Callable[[int, str], AbstractContextManager[Callable[[int], None]]]


class SimulationError(ValueError):
    """A request that cannot run (one line, for people: no traceback)."""


def config_class(algo: str) -> Any:
    """The config class of policy ``algo`` (``random``: the uniform logging policy's)."""
    if algo == RANDOM:
        return UniformConfig
    if algo not in REGISTRY:
        raise SimulationError(f"unknown policy {algo!r}; known: {', '.join(REGISTRY)}, {RANDOM}")
    return REGISTRY[algo].config


def practical_defaults(algo: str, *, paper: bool = False, aggregation: Aggregation | None = None,
                       fixed_batches: bool = False, fixed_eps0: bool = False
                       ) -> dict[str, Any]:
    """The measured practical settings of policy ``algo`` (its registry entry's, with those for
    ``aggregation``), none with ``paper`` or for the uniform logging policy. A fixed batch length
    replaces the default schedule (it is a schedule itself); sblb's fixed ε0 replaces its
    central target."""
    if paper or algo not in REGISTRY:
        return {}
    practical = REGISTRY[algo].practical_for(aggregation)
    if fixed_batches:
        practical.pop("batch_schedule", None)
    if fixed_eps0:
        practical.pop("epsilon", None)
    return practical


def resolve_config(algo: str, *, d: int | None = None, K: int | None = None,
                   env: str | Environment | None = None, T: int | None = None,
                   paper: bool = False, aggregation: Aggregation = "secure-sum",
                   params: dict[str, Any] | None = None, central_epsilon: float | None = None,
                   extra: dict[str, Any] | None = None, env_K: int | None = None,
                   ) -> tuple[Any, list[str]]:
    """The validated config of policy ``algo`` and the names of the given ``params`` it does not
    use. In order, later ones winning: the dimensions (``d``, or ``K`` for a multi-armed
    policy), the environment's intercept (where the config has one; and the coordinates that
    hold it, at the environment's d and ``env_K`` arms, where the config has those), ``extra``
    (what the environment fixes, e.g. a BCO loss class), the practical defaults (not with
    ``paper``), the user's ``params`` (None values are not given), the RDP ε of a
    ``central_epsilon`` target, the horizon (T run, unless ``params`` fix it), and sblb's
    accountant (``aggregation``).
    ``SimulationError`` for invalid values."""
    from pydantic import ValidationError

    cls = config_class(algo)
    fields = cls.model_fields
    given = {k: v for k, v in (params or {}).items() if v is not None}
    for name, source in DERIVED_FIELDS.items():
        if name in given:
            raise SimulationError(f"{name} is set by the {source}, not as a parameter")
    if aggregation not in AGGREGATIONS:
        raise SimulationError(f"aggregation must be one of {', '.join(AGGREGATIONS)}")
    if "batch_size" in given and "batch_schedule" in given:
        raise SimulationError("give batch_size L (fixed batches) or batch_schedule, not both")
    out: dict[str, Any] = {"d": d} if d is not None else ({"K": K} if K is not None else {})
    if "intercept" in fields and env is not None:
        out["intercept"] = environment_intercept(env)
        coords = environment_intercept_coords(env, d, env_K)
        if "intercept_coords" in fields and out["intercept"] is not None and coords is not None:
            out["intercept_coords"] = coords
    out.update(extra or {})
    out.update(practical_defaults(algo, paper=paper, aggregation=aggregation,
                                  fixed_batches="batch_size" in given,
                                  fixed_eps0="eps0" in given))
    ignored = [k for k in given if k not in fields]
    out.update({k: v for k, v in given.items() if k in fields})
    if central_epsilon is not None:
        if "alpha" not in fields:
            ignored.append("central_epsilon")
        elif "epsilon" in given:
            raise SimulationError("give epsilon (RDP) or central_epsilon, not both")
        else:
            from privbandit.shared.core.accounting.ledgers import rdp_epsilon_for_central

            alpha = float(out.get("alpha", fields["alpha"].default))
            delta = float(out.get("delta", fields["delta"].default))
            out["epsilon"] = rdp_epsilon_for_central(alpha, central_epsilon, delta)
    if "horizon" in fields and "horizon" not in given and T is not None:
        out["horizon"] = T  # ldp-linucb/ldp-glb/ldp-mab/BCO: sized for the T actually run
    if "accountant" in fields:
        out["accountant"] = aggregation
    try:
        return cls(**out), ignored
    except (ValidationError, ValueError) as exc:
        raise SimulationError(f"invalid parameters for {algo}:\n{exc}") from exc


def environment_intercept(env: str | Environment) -> float | None:
    """c if every context of ``env`` (a name or an object) has x[0] = c, else None."""
    if isinstance(env, Environment):
        value = getattr(env, "intercept", None)
        return None if value is None else float(value)
    from privbandit.shared.core.environments import environment_intercept as by_name

    return by_name(env)


def environment_intercept_coords(env: str | Environment, d: int | None,
                                 K: int | None) -> tuple[int, ...] | None:
    """The coordinates whose sum is ``env``'s intercept (``Environment.intercept_coordinates``),
    None where the dimensions are not known."""
    if isinstance(env, Environment):
        return tuple(type(env).intercept_coordinates(env.d, env.K))
    if d is None or K is None:
        return None
    from privbandit.shared.core.environments import environment_intercept_coords as by_name

    return by_name(env, d, K)


def check_intercept(algo: str, config: Any, env: str | Environment | None,
                    K: int | None = None) -> None:
    """``SimulationError`` if the config's encoding relies on an intercept c that the
    environment's contexts do not have (x[0] = c for every context, or the sum over the
    config's ``intercept_coords``: the encoding's noise is sized for it, and the randomizer
    refuses any other context). ``K``: the environment's arms (its intercept coordinates may
    depend on them)."""
    c = getattr(config, "encoding_intercept", None)
    if c is None or env is None:
        return
    from privbandit.shared.core.randomizers.base import intercept_rule, off_intercept

    coords = tuple(getattr(config, "intercept_coords", (0,)))
    declared = environment_intercept(env)
    where = environment_intercept_coords(env, getattr(config, "d", None), K)
    if declared is not None and not off_intercept(declared, c) and where in (None, coords):
        return
    has = ("declare no intercept (an Environment subclass states it as its `intercept`)"
           if declared is None else f"have {intercept_rule(declared, where or (0,), True)}")
    name = env.name if isinstance(env, Environment) else env
    flags = "--intercept, --intercept-coords" if hasattr(config, "intercept_coords") else (
        "--intercept")
    raise SimulationError(
        f"{algo}'s {config.encoding} encoding needs every context to have "
        f"{intercept_rule(c, coords, True)} ({flags}), but the {name} environment's contexts "
        f"{has}; give the environment's intercept or another --encoding")


@dataclass
class Request:
    """One simulation: ``runs`` runs of T users of policy ``algo`` on environment ``env`` (a
    built-in or registered name, a ``package.module:Class`` path, or an ``Environment`` object
    serving one run). ``params``: config fields the user gives (None: not given)."""

    algo: str
    env: str | Environment = "linear"
    T: int = 100_000
    runs: int = 1
    seed: int = 0
    d: int | None = None
    K: int | None = None
    params: dict[str, Any] = field(default_factory=dict)
    paper: bool = False
    aggregation: Aggregation = "secure-sum"
    central_epsilon: float | None = None
    # multi-armed environment (``mab``): the arm means and reward laws
    means: Sequence[float] | None = None
    reward_dist: str = "bernoulli"
    # returning users (linear and mab, issue 24)
    users: int | None = None
    contributions: int | None = None
    user_offset: float = 0.5
    # BCO environments: the decision set's radius, the loss bound, noise and drift
    radius: float = 1.0
    loss_bound: float = 1.0
    loss_noise: float = 0.2
    drift_period: int = 0
    # keep every decision as a bandit_feedback (contextual environments, one run)
    log: bool = False
    # decide with exploration: "epsilon-greedy:EPS" or "softmax:TAU" (``core.exploration``;
    # contextual policies, not lplr or returning users)
    explore: str | None = None
    # unused parameters are an error (the library) or a note (the command line)
    strict: bool = False
    note: Callable[[str], None] = field(default=lambda text: None)

    @property
    def env_name(self) -> str:
        return self.env.name if isinstance(self.env, Environment) else self.env


@dataclass
class Outcome:
    """The summary (spec §6's JSON of ``privbandit simulate``, ``privacy`` included) and, with
    ``Request.log``, the logged decisions as Open Bandit Pipeline's ``bandit_feedback``."""

    summary: dict[str, Any]
    feedback: dict[str, Any] | None = None


@contextlib.contextmanager
def no_progress(total: int, label: str) -> Iterator[Callable[[int], None]]:
    yield lambda n: None


def checked_config(req: Request, d: int | None = None, K: int | None = None,
                   extra: dict[str, Any] | None = None, env_K: int | None = None) -> Any:
    """``resolve_config`` for a request: unused parameters noted (or refused when ``strict``),
    the intercept and the horizon checked."""
    config, ignored = resolve_config(
        req.algo, d=d, K=K, env=req.env, T=req.T, paper=req.paper, aggregation=req.aggregation,
        params=req.params, central_epsilon=req.central_epsilon, extra=extra, env_K=env_K)
    if ignored:
        if req.strict:
            raise SimulationError(f"{req.algo} has no parameter(s) {', '.join(ignored)}")
        flags = ", ".join("--" + name.replace("_", "-") for name in ignored)
        req.note(f"{req.algo} does not use {flags}; ignored")
    check_intercept(req.algo, config, req.env, env_K)
    return config


def run(req: Request, progress: Progress = no_progress) -> Outcome:
    """Validate the request, resolve the config, run the family's simulator, summarise."""
    config_class(req.algo)  # an unknown policy is refused before anything else
    family = REGISTRY[req.algo].family if req.algo in REGISTRY else LINEAR
    loop = simulator_of(req.algo)
    if req.T < 1 or req.runs < 1:
        raise SimulationError("--T and --runs must be >= 1")
    name = req.env_name
    if req.log and (loop != "contextual" or req.runs != 1 or req.users is not None):
        raise SimulationError("--log records the contextual simulator's decisions (not mab, "
                              "BCO or lplr, nor returning users) of one run (--runs 1)")
    if req.explore is not None and (loop != "contextual" or req.algo == RANDOM
                                    or req.users is not None):
        raise SimulationError("--explore wraps a contextual policy of the simulator (not mab, "
                              "BCO, lplr or random, nor returning users)")
    if (loop == "bco") != (name in BCO_ENVIRONMENTS):
        raise SimulationError(f"use the BCO policies ({', '.join(BCO_ALGOS)}) with the BCO "
                              f"environments ({', '.join(BCO_ENVIRONMENTS)}) and only there")
    if loop == "bco":
        return _run_bco(req, progress)
    if (loop == "mab") != (name == "mab"):
        kind = "multi-armed" if loop == "mab" else "linear"
        raise SimulationError(f"{req.algo} is a {kind} policy; use --env "
                              f"{'mab' if kind == 'multi-armed' else 'linear or digits'}")
    if family is PHASE and name != "fixed-linear" and not (
            isinstance(req.env, Environment) and req.env.fixed_arms is not None):
        raise SimulationError(f"{req.algo} eliminates arms of a fixed arm set; use --env "
                              "fixed-linear")
    if req.users is None and req.contributions is not None:
        raise SimulationError("--contributions bounds returning users: give --users N")
    if req.users is not None and name not in ("linear", "mab"):
        raise SimulationError("returning users (--users) run on --env linear or mab")
    bad_k = req.contributions is not None and req.contributions < 1
    if req.users is not None and (req.users < 1 or bad_k or not req.user_offset >= 0):
        raise SimulationError("--users and --contributions must be >= 1, --user-offset >= 0")
    return _run_mab(req, progress) if loop == "mab" else _run_contextual(req, progress)


def simulator_of(algo: str) -> str:
    """The simulator loop of policy ``algo`` (its registry entry's; the uniform logging policy
    runs in the contextual one)."""
    return REGISTRY[algo].simulator if algo in REGISTRY else "contextual"


def _run_contextual(req: Request, progress: Progress) -> Outcome:
    """A linear, GLB or phase policy (or lplr, or the uniform logging policy) on a contextual
    environment: ``simulator.simulate`` (or lplr's loop, or returning users)."""
    from privbandit.shared.core import simulator
    from privbandit.shared.core.environments import environment_dimensions

    lplr = simulator_of(req.algo) == "lplr"  # lplr's own loop on the contextual environments
    if req.means is not None or req.reward_dist != "bernoulli":
        req.note("--means and --reward-dist apply to --env mab only; ignored")
    obj = req.env if isinstance(req.env, Environment) else None
    if obj is not None:
        if req.runs != 1 or req.users is not None or lplr:
            raise SimulationError("an environment object serves one run of a contextual policy "
                                  "(no returning users, not lplr)")
        d, K = req.d or int(getattr(obj, "d", 5)), int(getattr(obj, "K", req.K or 20))
    else:
        name = req.env_name
        if ":" in name:
            from privbandit.shared.core.environments import load_environment_class

            try:
                load_environment_class(name)
            except ValueError as exc:
                raise SimulationError(str(exc)) from exc
        want_d = req.d if req.d is not None else {"digits": 40, "letter": 52}.get(name, 5)
        want_K = 20 if req.K is None else req.K
        d, K = environment_dimensions(name, want_d, want_K)
        if (d, K) != (want_d, want_K):
            req.note(f"env {name} uses d={d}, K={K} (requested d={want_d}, K={want_K})")
    config = checked_config(req, d, extra={"K": K} if lplr else None, env_K=K)
    only = REGISTRY[req.algo].transports if req.algo in REGISTRY else ()
    if only == ("secure-sum",) and req.aggregation != "secure-sum":
        raise SimulationError(f"{req.algo} is private only over the secure sum (--aggregation "
                              f"secure-sum: {REGISTRY[req.algo].transport_reason})")
    if req.users is not None and lplr:
        raise SimulationError("lplr has its own simulator loop; no returning users")

    logs: list[Any] = []
    started = time.perf_counter()
    with progress(req.T * req.runs, f"{req.algo} on {req.env_name}") as advance:
        try:
            if obj is not None:
                results, env_params = _run_object(config, obj, req, advance, logs)
            elif req.users is not None:
                from privbandit.shared.core.returning import simulate_returning

                results, env_params = simulate_returning(
                    config, req.env_name, K, req.T, req.runs, req.seed, _population(req),
                    advance)
            elif lplr:
                from privbandit.shared.core.lplr_simulator import simulate_lplr

                results, env_params = simulate_lplr(config, req.env_name, K, req.T, req.runs,
                                                    req.seed, on_progress=advance)
            else:
                kw: dict[str, Any] = {"logs": logs} if req.log else {}
                if req.explore is not None:
                    kw["exploration"] = _exploration(req)
                results, env_params = simulator.simulate(config, req.env_name, K, req.T,
                                                         req.runs, req.seed, on_progress=advance,
                                                         **kw)
        except ValueError as exc:
            raise SimulationError(str(exc)) from exc
    wall = time.perf_counter() - started
    policy = simulator.make_policy(config)
    ledger = policy.ledger(req.T, aggregation=req.aggregation)
    if req.users is not None:
        ledger = _person(policy, ledger, req)
    params = {**config.model_dump(), **env_params}
    feedback = logs[0].bandit_feedback() if req.log else None
    return Outcome(_summary(req, params, results, wall, ledger.model_dump()), feedback)


def _exploration(req: Request) -> Any:
    """The request's ``Exploration`` (``SimulationError`` for a malformed one)."""
    from privbandit.shared.core.exploration import Exploration

    assert req.explore is not None
    try:
        return Exploration.parse(req.explore)
    except ValueError as exc:
        raise SimulationError(f"--explore: {exc}") from exc


def _run_object(config: Any, env: Environment, req: Request, advance: Callable[[int], None],
                logs: list[Any]) -> tuple[list[RunResult], dict[str, Any]]:
    """One run on an ``Environment`` object, its own generator drawing the users; the
    policy's, rewards' and devices' streams spawned from the seed."""
    import numpy as np

    from privbandit.shared.core import simulator

    reward_rng, device_rng, policy_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(req.seed).spawn(3))
    policy: Any = simulator.make_policy(config, policy_rng)
    policy.bind_arms(env.fixed_arms)
    if req.explore is not None:  # as simulator.simulate wraps it: draws from a child stream
        from privbandit.shared.core.exploration import ExploringPolicy

        policy = ExploringPolicy(policy, _exploration(req), policy_rng.spawn(1)[0])
    log = None
    if req.log:
        log = simulator.log_for(env)
        logs.append(log)
    result = simulator.run_once(policy, env, req.T, reward_rng, device_rng,
                                simulator.checkpoints_for(req.T), advance, log)
    return [result], env.params()


def _run_mab(req: Request, progress: Progress) -> Outcome:
    """A multi-armed policy on fixed arms (issue 8): ``simulate_mab`` (or returning users)."""
    from privbandit.shared.core.environments.mab import MABEnvironment, default_means
    from privbandit.shared.core.mab_simulator import per_user_fractions, simulate_mab
    from privbandit.shared.core.policies import build_policy

    try:
        means = [float(x) for x in req.means] if req.means else default_means(req.K or 20)
        if req.means and req.K is not None and req.K != len(means):
            raise ValueError(f"--K {req.K} but {len(means)} --means")
        env = MABEnvironment(means, req.reward_dist)
    except ValueError as exc:
        raise SimulationError(str(exc)) from exc
    if req.d is not None:
        req.note("--d applies to linear environments; ignored")
    # UCB's width for the environment's reward noise
    extra = {"reward_sigma": env.subgaussian} if req.algo == "ucb" else {}
    config = checked_config(req, None, K=env.K, extra=extra)
    started = time.perf_counter()
    with progress(req.T * req.runs, f"{req.algo} on mab") as advance:
        try:
            if req.users is not None:
                from privbandit.shared.core.returning import simulate_returning

                results, _ = simulate_returning(config, "mab", env.K, req.T, req.runs,
                                                req.seed, _population(req), advance,
                                                mab_env=env)
            else:
                results = simulate_mab(config, env, req.T, req.runs, req.seed,
                                       on_progress=advance)
        except ValueError as exc:
            raise SimulationError(str(exc)) from exc
    wall = time.perf_counter() - started
    policy = build_policy(config)
    ledger = policy.ledger(req.T)
    if req.users is not None:
        ledger = _person(policy, ledger, req)
    privacy = ledger.model_dump()
    if privacy.get("per_user_epsilon") is not None:
        used, declined, reports = per_user_fractions(results)
        privacy["per_user_epsilon"].update(fraction_used=used / reports,
                                           fraction_declined=declined / reports)
    params = {**config.model_dump(), **env.params()}
    if req.users is not None:
        params.update(users=req.users, contributions=req.contributions,
                      user_offset=req.user_offset)
    return Outcome(_summary(req, params, results, wall, privacy))


def _run_bco(req: Request, progress: Progress) -> Outcome:
    """A BCO policy (issue 12): the policy's loss class (B, G, β, μ) is the environment's, so
    the step sizes and the noise are the paper's for the losses the users actually have."""
    import numpy as np

    from privbandit.shared.core.bco_simulator import simulate_bco
    from privbandit.shared.core.environments.bco import BCOEnvironment
    from privbandit.shared.core.policies.bco import build_bco_policy

    d = 5 if req.d is None else req.d
    try:
        env = BCOEnvironment(req.env_name, d, np.random.default_rng(np.random.SeedSequence(
            [req.seed, 0xBC0])), radius=req.radius, loss_bound=req.loss_bound,
            noise=req.loss_noise, drift_period=req.drift_period)
    except ValueError as exc:
        raise SimulationError(str(exc)) from exc
    if req.K is not None:
        req.note("--K does not apply to BCO environments; ignored")
    extra = {"radius": env.R, "loss_bound": env.B, "lipschitz": env.lipschitz,
             "smoothness": env.smoothness, "strong_convexity": env.strong_convexity}
    config = checked_config(req, d, extra=extra)
    started = time.perf_counter()
    with progress(req.T * req.runs, f"{req.algo} on {req.env_name}") as advance:
        results, policy_params = simulate_bco(config, env, req.T, req.runs, req.seed,
                                              on_progress=advance)
    wall = time.perf_counter() - started
    params = {**config.model_dump(), **env.params(), **policy_params}
    privacy = build_bco_policy(config).ledger().model_dump()
    return Outcome(_summary(req, params, results, wall, privacy))


def _population(req: Request) -> Any:
    from privbandit.shared.core.returning import Population

    assert req.users is not None  # run() routes only requests with users here
    return Population(req.users, req.contributions, req.user_offset)


def _person(policy: Any, ledger: Any, req: Request) -> Any:
    """The ledger with the per-person guarantee of ``contributions`` (none without)."""
    from privbandit.shared.core.policies.person import person_ledger

    return person_ledger(policy, ledger, req.contributions, "forever", req.aggregation)


def _summary(req: Request, params: dict[str, Any], results: list[Any], wall: float,
             privacy: dict[str, Any]) -> dict[str, Any]:
    """Spec §6's JSON of a simulation (``summarize`` of the runs) with its privacy ledger."""
    import numpy as np

    from privbandit.shared.core.simulator import summarize

    out: dict[str, Any] = {"algo": req.algo, "env": req.env_name, "T": req.T, "runs": req.runs,
                           "seed": req.seed, "params": params}
    out.update(summarize(results))
    if req.users is not None:  # returning users: reports withheld per run
        out["withheld_mean"] = float(np.mean([r.extra["withheld"] for r in results]))
        out["max_reports_per_person"] = max(r.extra["max_reports_per_person"] for r in results)
    out["wall_seconds"] = wall
    out["privacy"] = privacy
    return out
