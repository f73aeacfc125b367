"""Locust scenarios, one per path a real deployment has (``load/run.py`` runs them all):

- ``ShufflerIntake``: many devices, each uploading ONE HPKE report per request to the shuffler
  (``POST /v1/tasks/{task}/reports``), every report fresh (a real randomized row, sealed to the
  analyzer's key), so nothing is a duplicate;
- ``ModelFetch``: devices polling the analyzer's model with ``If-None-Match`` (mostly 304);
- ``Decide``: the device API's ``decide`` alone (K×d private features → action);
- ``DeviceFlow``: the device API as the demo drives it: ``decide`` then ``feedback``.

Each runs headless against a service or against the bare floor (``load/bare.py``) with the same
bodies. Settings come from the environment (``load/run.py`` sets them): ``LOAD_ANALYZER`` (URL
of the analyzer, for its HPKE key and task parameters), ``LOAD_TASK`` (task id), ``LOAD_SEED``,
``LOAD_SECONDS`` (the run's length, counted once the set-up is done).
Every target must be a loopback address: anything else is refused before a request is sent.
"""

from __future__ import annotations

import os

import gevent
import httpx
import numpy as np
from locust import FastHttpUser, events, task

from load.loopback import loopback_only
from privbandit.shared.core.policies import make_config, randomizer_for
from privbandit.shared.crypto.hpke import pack_report, seal
from privbandit.shared.protocol.messages import HpkeConfig, TaskInfo, b64decode


@events.test_start.add_listener
def _check_target(environment, **_: object) -> None:
    loopback_only(environment.host or "")
    if "LOAD_ANALYZER" in os.environ:
        loopback_only(os.environ["LOAD_ANALYZER"])
        shared_task()  # once, before any user starts: not inside the measured run
    if "LOAD_SECONDS" in os.environ:
        # The run's time limit, counted from now, once the set-up above is done. Locust's own
        # ``-t`` counts from gevent's cached loop time, which does not advance while the set-up
        # blocks the process: on a busy machine it ended runs before their first request.
        gevent.get_hub().loop.update_now()
        gevent.spawn_later(float(os.environ["LOAD_SECONDS"]), environment.runner.quit)


class _Task:
    """What every user of a run shares: the task's parameters, the analyzer's HPKE key and a
    seeded source of feature vectors and report rows (report ids and HPKE use the OS CSPRNG)."""

    def __init__(self) -> None:
        analyzer = os.environ["LOAD_ANALYZER"]
        self.task = os.environ["LOAD_TASK"]
        info = TaskInfo.model_validate(httpx.get(f"{analyzer}/v1/tasks/{self.task}").json())
        hpke = HpkeConfig.model_validate(httpx.get(f"{analyzer}/v1/hpke-config").json())
        self.K, self.d = info.K, info.d
        params = {k: v for k, v in info.policy.items() if k != "algo"}
        # Built here, not per user: calibrating a Gaussian randomizer takes a while.
        self.randomizer = randomizer_for(make_config(info.algo, **params))
        self.key_id, self.public_key = hpke.key_id, b64decode(hpke.public_key)
        self.rng = np.random.default_rng(int(os.environ.get("LOAD_SEED", "1")))

    def features(self) -> list[list[float]]:
        x = self.rng.normal(size=(self.K, self.d))
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).tolist()

    def report(self) -> dict[str, object]:
        x = np.asarray(self.features()[:1])
        row = self.randomizer.randomize(x, self.rng.uniform(size=1), self.rng)[0]
        _, plaintext = pack_report(self.randomizer.to_bytes(row))
        return seal(self.public_key, self.key_id, self.task, plaintext).model_dump()


_shared: _Task | None = None


def shared_task() -> _Task:
    global _shared
    if _shared is None:
        _shared = _Task()
    return _shared


class ShufflerIntake(FastHttpUser):
    @task
    def upload_one(self) -> None:
        t = shared_task()
        with self.client.post(f"/v1/tasks/{t.task}/reports", json={"reports": [t.report()]},
                              name="reports", catch_response=True) as resp:
            if resp.status_code != 202:
                resp.failure(f"status {resp.status_code}: {resp.text[:200]}")


class ModelFetch(FastHttpUser):
    etag: str | None = None

    @task
    def poll(self) -> None:
        t = shared_task()
        headers = {"If-None-Match": self.etag} if self.etag else {}
        with self.client.get(f"/v1/tasks/{t.task}/model", headers=headers, name="model",
                             catch_response=True) as resp:
            if resp.status_code == 200:
                self.etag = resp.headers.get("ETag")
            elif resp.status_code != 304:
                resp.failure(f"status {resp.status_code}")


def decide(user: FastHttpUser, t: _Task) -> str | None:
    """One ``decide``; its decision id, or None (a failure recorded) if it was not a 200."""
    with user.client.post(f"/v1/tasks/{t.task}/decide", json={"features": t.features()},
                          name="decide", catch_response=True) as resp:
        if resp.status_code != 200:
            resp.failure(f"status {resp.status_code}: {resp.text[:200]}")
            return None
        return resp.json()["decision_id"]


class Decide(FastHttpUser):
    @task
    def decide(self) -> None:
        decide(self, shared_task())


class DeviceFlow(FastHttpUser):
    @task
    def decide_and_feedback(self) -> None:
        t = shared_task()
        decision = decide(self, t)
        if decision is None:
            return
        reward = float(t.rng.uniform())
        with self.client.post(f"/v1/tasks/{t.task}/feedback", name="feedback",
                              json={"decision_id": decision, "reward": reward},
                              catch_response=True) as resp:
            if resp.status_code != 202:
                resp.failure(f"status {resp.status_code}: {resp.text[:200]}")
