"""The demo's users: N simulated users of a seeded ``linear`` environment, C at a time, driven
through one device task over HTTP (decide → Bernoulli reward → feedback), with their regret.

An ``ldp-glb`` task plays the ``logistic`` environment instead (the same contexts, Bernoulli
rewards of mean g(⟨x, θ*⟩), g the logistic function), an ``adar-gope`` task ``fixed-linear`` on
the task's own arms (decide sends ``{}``: the device draws the arm from the phase's design). A
BCO task plays the ``bco-quadratic``
environment (``privbandit.demo.bco_users``). A
multi-armed task (``TaskInfo.d`` is null) plays the ``mab`` environment's default instance
(``default_means(K)``, Bernoulli rewards): decide sends ``{}`` and the device picks the arm; for a
task with per-user privacy levels each user states her own ε_t in feedback, drawn from the task's
``epsilon_dist`` (a seeded stream of its own).

Returning users (issue 24): with ``persons`` = P, the N users are visits of P persons (visit i
is person i mod P's), and each feedback names its person with a user key of this run (random,
so that runs against a long-lived device do not share counts); a task that bounds persons gets
user keys even without ``persons`` (one person per visit). The device answers a feedback beyond
the bound with ``withheld`` (counted in ``feedbacks_withheld``).

Also used by the load test (``load/drive.py``) and the end-to-end tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx
import numpy as np

from privbandit.demo.bco_users import BCOUsers, is_bco_task
from privbandit.demo.config import DemoError
from privbandit.launcher import tls_context
from privbandit.shared.core.environments import Environment
from privbandit.shared.core.policies.families import ARMS, PHASE
from privbandit.shared.core.policies.registry import family_of
from privbandit.shared.core.privacy_levels import levels_for
from privbandit.shared.core.simulator import user_streams
from privbandit.shared.protocol.messages import TaskInfo

CURVE_POINTS = 200
CONTEXT_CHUNK = 256
# Transport retries per request (the device itself never needs the network to answer). With the
# doubling wait capped at 2 s, 14 tries span about 19 s: long enough for a device restarted by
# kill -9 to come back on a loaded 2-core machine (8 tries, about 7 s, were not).
REQUEST_RETRIES = 14


async def fetch_task(analyzer_url: str, task_id: str) -> TaskInfo:
    async with httpx.AsyncClient(timeout=10.0, verify=tls_context()) as client:
        resp = await client.get(f"{analyzer_url}/v1/tasks/{task_id}")
    if resp.status_code != 200:
        raise DemoError(f"the analyzer does not serve task {task_id}: {resp.status_code} "
                        f"{resp.text[:200]}")
    return TaskInfo.model_validate_json(resp.content)


@dataclass(frozen=True)
class Answer:
    """A device's answer to one of the users' requests: its status and body."""

    status_code: int
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


def demo_environment(task: TaskInfo, env_rng: np.random.Generator) -> Environment:
    """The users of a task with features: its family's demo environment (``linear``;
    ``logistic`` for ``ldp-glb``, which learns a generalized linear model; ``fixed-linear`` on
    the task's own seeded arms for a phase task, θ* from the demo's seed)."""
    d = int(task.d)  # type: ignore[arg-type]  # a task with features has its d
    env: Environment = family_of(task.algo).demo_users(task.policy, d, task.K, env_rng)
    return env


def demo_env_name(task: TaskInfo) -> str:
    """The environment a demo of ``task`` plays (``demo_environment``; BCO and MAB tasks have
    their own)."""
    return family_of(task.algo).demo_env


@dataclass
class DriveResult:
    users: int
    concurrency: int
    feedbacks_sent: int
    final_regret: float
    random_regret: float
    regret_curve: list[list[float]]
    wall_seconds: float
    model_version: int
    errors: int
    feedbacks_withheld: int = 0
    persons: int | None = None

    @property
    def users_per_second(self) -> float:
        return self.users / self.wall_seconds if self.wall_seconds > 0 else 0.0


@dataclass
class Driver:
    """N simulated users, C at a time, against one device task over HTTP."""

    device_url: str
    task: TaskInfo
    users: int
    concurrency: int = 1
    seed: int = 0
    on_progress: Callable[[Driver], None] | None = None
    # Awaited before every request, retries included: crash tests hold users here while a
    # service restarts (``tests.helpers.Gate``).
    gate: Callable[[], Awaitable[None]] | None = None
    # Stop starting new users after this many seconds (load tests); None = run all users.
    time_limit: float | None = None
    # Tries per request on transport errors and 5xx (backoff doubling to 2 s): the default rides
    # out a device restart of a few seconds; fault campaigns that kill it often raise it.
    request_retries: int = REQUEST_RETRIES
    # Returning users: the visits come from this many persons (None: one person per visit).
    persons: int | None = None
    # Live state (read by progress displays and tests): users done and their regret so far...
    done: int = 0
    regret: float = 0.0
    random_regret: float = 0.0
    curve: list[list[float]] = field(default_factory=list)
    # ... and the traffic: feedbacks accepted, the newest model version seen, retried requests.
    feedbacks_sent: int = 0
    feedbacks_withheld: int = 0  # answered ``withheld`` (the answers seen; lost ones aside)
    model_version: int = 0
    errors: int = 0
    # Seconds per successful request, by endpoint ("decide", "feedback").
    latencies: dict[str, list[float]] = field(
        default_factory=lambda: {"decide": [], "feedback": []}
    )

    def __post_init__(self) -> None:
        if self.users < 1 or self.concurrency < 1:
            raise ValueError("users and concurrency must be >= 1")
        if self.persons is not None and self.persons < 1:
            raise ValueError("persons must be >= 1")
        # User keys of this run: opaque to the device, never shared with another run.
        self._run_key = secrets.token_hex(8)
        self._keyed = self.persons is not None or self.task.contributions is not None
        env_rng, self._reward_rng = user_streams(self.seed)
        family = family_of(self.task.algo)
        self.multi_armed = family is ARMS
        self._levels = None
        self.bco = BCOUsers(self.task, env_rng, self._reward_rng) if is_bco_task(self.task) \
            else None
        if self.bco is not None:
            self.env = None
        elif self.multi_armed:
            self.env = None
            self._means = family.demo_users(self.task.policy, 0, self.task.K, env_rng)
            dist = self.task.policy.get("epsilon_dist")
            if dist is not None:
                self._levels = levels_for(self.task.policy.get("epsilon"), dist)
                self._level_rng = env_rng  # the mab instance is fixed: env_rng is free
        else:
            self.env = demo_environment(self.task, env_rng)
        self.fixed_arms = family is PHASE
        # Features are drawn with ||x|| <= 1; a task with a smaller bound L gets them scaled.
        self._scale = min(1.0, float(self.task.policy.get("L", 1.0)))
        self._next = 0
        self._buffer: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._buffer_start = 0
        self._every = max(1, self.users // CURVE_POINTS)

    def user(self, i: int) -> tuple[np.ndarray, np.ndarray, float]:
        """User i's contexts, true means and reward draw, for a client that drives the users
        itself (the browser client's end-to-end test); in user order, as ``run`` draws them."""
        return self._user(i)

    def _user(self, i: int) -> tuple[np.ndarray, np.ndarray, float]:
        """User i's contexts, true means and reward draw (drawn in user order, so a run's users
        do not depend on the concurrency)."""
        if self._buffer is None or i >= self._buffer_start + self._buffer[2].shape[0]:
            u = self._reward_rng.random(CONTEXT_CHUNK)
            if self.env is None:  # multi-armed: no contexts; column 0 of "X" holds ε_t
                eps = (np.full(CONTEXT_CHUNK, np.nan) if self._levels is None
                       else self._levels.sample(CONTEXT_CHUNK, self._level_rng))
                X, mu = eps[:, None], np.broadcast_to(self._means, (CONTEXT_CHUNK, self.task.K))
            else:
                X, mu = self.env.contexts(CONTEXT_CHUNK)
                X = X * self._scale
            self._buffer_start = i
            self._buffer = (X, mu, u)
        j = i - self._buffer_start
        X, mu, u = self._buffer
        return X[j], mu[j], float(u[j])

    def _requests(self, X: np.ndarray) -> tuple[dict[str, Any], dict[str, Any]]:
        """The decide body and the feedback fields besides decision and reward of one user."""
        if self.fixed_arms:  # the device draws the arm from the phase's design
            return {}, {}
        if not self.multi_armed:
            return {"features": X.tolist()}, {}
        eps = float(X[0])
        return {}, ({} if np.isnan(eps) else {"epsilon": eps})

    async def run(self) -> DriveResult:
        # aiohttp rather than httpx for the users: the client's CPU per request is a sixth of
        # httpx's (``python -m bench.http_client``), and every simulated user costs two requests.
        connector = aiohttp.TCPConnector(limit=self.concurrency + 2)
        started = time.perf_counter()
        self._stop_at = None if self.time_limit is None else started + self.time_limit
        async with aiohttp.ClientSession(connector=connector,
                                         timeout=aiohttp.ClientTimeout(total=30.0)) as client:
            await asyncio.gather(*(self._worker(client) for _ in range(self.concurrency)))
        wall = time.perf_counter() - started
        if not self.curve or self.curve[-1][0] != self.done:
            self.curve.append([self.done, self.regret])
        return DriveResult(
            users=self.done,
            concurrency=self.concurrency,
            feedbacks_sent=self.feedbacks_sent,
            final_regret=self.regret,
            random_regret=self.random_regret,
            regret_curve=self.curve,
            wall_seconds=wall,
            model_version=self.model_version,
            errors=self.errors,
            feedbacks_withheld=self.feedbacks_withheld,
            persons=self.persons,
        )

    async def _worker(self, client: aiohttp.ClientSession) -> None:
        task = self.task.id
        while self._next < self.users:
            if self._stop_at is not None and time.perf_counter() > self._stop_at:
                return
            i = self._next
            self._next += 1
            if self.bco is not None:
                await self._bco_user(client, i)
                continue
            X, mu, u = self._user(i)
            decide_body, extra = self._requests(X)
            t0 = time.perf_counter()
            resp = await self._post(client, f"/v1/tasks/{task}/decide", decide_body)
            t1 = time.perf_counter()
            if resp.status_code != 200:
                raise DemoError(f"decide failed: {resp.status_code} {resp.text[:300]}")
            out = resp.json()
            a = int(out["action"])
            self.model_version = max(self.model_version, int(out["model_version"]))
            best = float(mu.max())
            self.regret += best - float(mu[a])
            self.random_regret += best - float(mu.mean())
            reward = 1.0 if u < mu[a] else 0.0
            body = {"decision_id": out["decision_id"], "reward": reward, **extra,
                    **self._user_key(i)}
            resp = await self._post(client, f"/v1/tasks/{task}/feedback", body, retry_409=True)
            if resp.status_code != 202:
                raise DemoError(f"feedback failed: {resp.status_code} {resp.text[:300]}")
            self._finished(t0, t1, resp)

    def _user_key(self, i: int) -> dict[str, str]:
        """The feedback's ``user`` field of visit i: its person's key (none for a task that
        bounds no one, when the run has no returning persons)."""
        if not self._keyed:
            return {}
        person = i if self.persons is None else i % self.persons
        return {"user": f"{self._run_key}-{person}"}

    def _finished(self, t0: float, t1: float, resp: Answer | None = None) -> None:
        """Book-keeping after a user's feedback was accepted (decide sent at t0, answered t1)."""
        self.latencies["decide"].append(t1 - t0)
        self.latencies["feedback"].append(time.perf_counter() - t1)
        self.feedbacks_sent += 1
        if resp is not None and resp.json().get("withheld"):
            self.feedbacks_withheld += 1
        self.done += 1
        if self.done % self._every == 0:
            self.curve.append([self.done, self.regret])
        if self.on_progress is not None:
            self.on_progress(self)

    async def _bco_user(self, client: aiohttp.ClientSession, i: int) -> None:
        """User i of a BCO task: decide ``{}`` → the point(s) → her losses in feedback."""
        assert self.bco is not None
        task = self.task.id
        t0 = time.perf_counter()
        resp = await self._post(client, f"/v1/tasks/{task}/decide", {})
        t1 = time.perf_counter()
        if resp.status_code != 200:
            raise DemoError(f"decide failed: {resp.status_code} {resp.text[:300]}")
        out = resp.json()
        self.model_version = max(self.model_version, int(out["model_version"]))
        fields, regret = self.bco.respond(i, out["points"])
        self.regret += regret
        self.random_regret += self.bco.random
        body = {"decision_id": out["decision_id"], **fields, **self._user_key(i)}
        resp = await self._post(client, f"/v1/tasks/{task}/feedback", body, retry_409=True)
        if resp.status_code != 202:
            raise DemoError(f"feedback failed: {resp.status_code} {resp.text[:300]}")
        self._finished(t0, t1, resp)

    async def _post(self, client: aiohttp.ClientSession, path: str, body: dict[str, Any],
                    retry_409: bool = False) -> Answer:
        """POST with retries on transport errors, 5xx and 429 (the device's outbox is full;
        its Retry-After is the least wait). A 409 on a *retried* feedback means the first
        attempt was recorded (only its answer was lost): report it as the 202."""
        url = self.device_url.rstrip("/") + path
        data = json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
        delay = 0.05
        for attempt in range(self.request_retries):
            wait = delay
            if self.gate is not None:
                await self.gate()
            try:
                async with client.post(url, data=data, headers=_JSON) as resp:
                    answer = Answer(resp.status, await resp.read())
                    retry_after = resp.headers.get("retry-after", 0)
            except (aiohttp.ClientError, TimeoutError):
                self.errors += 1
            else:
                if retry_409 and attempt > 0 and answer.status_code == 409:
                    return Answer(202, b'{"queued":true,"outbox_pending":0}')
                if answer.status_code < 500 and answer.status_code != 429:
                    return answer
                self.errors += 1
                with contextlib.suppress(ValueError):
                    wait = max(wait, float(retry_after))
            await asyncio.sleep(wait)
            delay = min(2 * delay, 2.0)
        raise DemoError(
            f"POST {path}: the device did not answer after {self.request_retries} tries"
        )


_JSON = {"Content-Type": "application/json"}
