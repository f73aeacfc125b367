"""The device's model cache: the latest broadcast model per task, and the analyzer's HPKE config.

``decide`` must never wait on the network, so it reads whatever model this cache holds. The cache
is kept fresh in the background:

1. at startup, ``GET /v1/tasks/{task}/model`` until the analyzer answers (until then decisions use
   the version-0 model the policy itself would publish: θ̃ = 0, V = λI, the initial β);
2. then the Server-Sent-Events broadcast ``GET /v1/tasks/{task}/model/stream``;
3. whenever the stream fails or ends, ETag polling (``If-None-Match``) for a while before trying
   the stream again, with a growing pause, so a broken stream endpoint cannot stall updates.

The stream is read with httpx-sse (the SSE event-stream parser of the HTML standard), and its
``id:`` and ``retry:`` fields are honoured as an EventSource would: a reconnection sends the last
event id received as ``Last-Event-ID`` (the analyzer then skips re-sending a model the device
holds). The pause before reconnecting is the services' one retry schedule
(``services.common.retry.Jittered`` over ``stream_retry``: jittered, doubling with each stream
that failed soon after opening, back to the first after a stream that stayed up), and at least
the server's ``retry:`` (milliseconds) and a refused stream's ``Retry-After`` (e.g. 503
``too_many_streams``), those capped at ``stream_retry.maximum``.

Intervals and retry bounds are ``Settings.device_timing``; startup fetches retry with
``until_success`` (``services.common.retry``).

Models only move forward: an update is applied when its version is newer than the cached one.
The HPKE configuration is fetched at startup (retrying until the analyzer is up) and refreshed
periodically, so a device notices an analyzer that was redeployed with a new key.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import cast

import httpx
from httpx_sse import aconnect_sse

from privbandit.services.common.retry import Jittered, retry_after, until_success
from privbandit.services.device.background import Loops
from privbandit.shared.core.policies import Model, build_policy
from privbandit.shared.core.policies.adar_gope import PhaseModel
from privbandit.shared.core.policies.arm_model import ArmModel
from privbandit.shared.core.policies.bco_model import BCOModel
from privbandit.shared.core.policies.families import ModelMismatch
from privbandit.shared.protocol.messages import AnyModelMessage, HpkeConfig, b64decode
from privbandit.shared.settings import Settings, TaskConfig

AnyModel = Model | ArmModel | BCOModel | PhaseModel

log = logging.getLogger(__name__)

# What a fetch from the analyzer retries on: the network, an error answer, a malformed body.
FETCH_ERRORS = (httpx.HTTPError, ValueError)


class ModelCache:
    """Latest model per task plus the HPKE config; fed by background tasks from the analyzer."""

    def __init__(
        self,
        settings: Settings,
        client: httpx.AsyncClient,
        *,
        stream: bool = True,
        on_update: Callable[[str, AnyModel, str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.timing = settings.device_timing
        self.client = client
        self.stream = stream
        self.on_update = on_update
        self.tasks: dict[str, TaskConfig] = {t.id: t for t in settings.tasks}
        # Version-0 fallback: exactly what the analyzer publishes before any report is counted,
        # built on first use (``model``), not here: building every task's policy cost each
        # device start seconds of CPU (a BCO task's numba kernels, a DDP task's accountant) for
        # models the analyzer's first answers replace, usually before any decision (the device
        # is ready only once it has them).
        self._models: dict[str, AnyModel] = {}
        self._etags: dict[str, str] = {}
        self.fetched: set[str] = set()  # tasks whose model came from the analyzer at least once
        self.hpke: HpkeConfig | None = None
        self.hpke_public_key: bytes | None = None
        self.streaming: set[str] = set()  # tasks whose SSE stream is currently open
        # Per task, the stream's last event id and its ``retry:`` (seconds), kept across
        # reconnections as an EventSource keeps them.
        self.last_event_id: dict[str, str] = {}
        self.reconnect: dict[str, float] = {}
        # The pause chosen after each task's last stream ended or was refused (seconds).
        self.stream_pause: dict[str, float] = {}
        self._loops = Loops()

    # -- reading --------------------------------------------------------------------------------

    def model(self, task: str) -> AnyModel:
        model = self._models.get(task)
        if model is None:
            model = self._models[task] = cast(AnyModel, build_policy(self.tasks[task].policy).model)
        return model

    def parse(self, task: str, data: bytes | str) -> AnyModelMessage:
        """A model message of the kind the task publishes (arm models for multi-armed tasks,
        BCO models for BCO tasks)."""
        return self.tasks[task].family.parse(data)

    def versions(self) -> dict[str, int]:
        # A fallback not built yet is version 0, as every policy's first model (contract test).
        return {task: self._models[task].version if task in self._models else 0
                for task in self.tasks}

    def missing(self) -> list[str]:
        """What has not come from the analyzer yet (readiness): the HPKE config, models."""
        out = [] if self.hpke is not None else ["hpke-config"]
        return out + [f"model:{t}" for t in self.tasks if t not in self.fetched]

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._loops.start(self._hpke_loop(), "hpke-config")
        for task in self.tasks:
            self._loops.start(self._follow(task), f"model:{task}")

    async def stop(self) -> None:
        await self._loops.stop()

    # -- applying updates -----------------------------------------------------------------------

    def apply(self, task: str, msg: AnyModelMessage, source: str) -> bool:
        """Install ``msg`` if it is valid for the task and newer than the cached model."""
        if msg.task != task:
            log.warning("model for task %r arrived on %r's channel; ignored", msg.task, task)
            return False
        first = task not in self.fetched  # the analyzer's first answer replaces the fallback
        if not first and msg.version <= self._models[task].version:
            return False
        model = self._build(self.tasks[task], msg)
        if model is None:
            return False
        self._models[task] = model
        self.fetched.add(task)
        if self.on_update is not None:
            self.on_update(task, model, source)
        log.info("task %s: model v%d (%s)", task, model.version, source)
        return True

    @staticmethod
    def _build(cfg: TaskConfig, msg: AnyModelMessage) -> AnyModel | None:
        """The model a message describes, or None (logged) if it does not fit the task (its
        family's ``read_back``)."""
        try:
            model: AnyModel = cfg.family.read_back(cfg.policy, cfg.K, msg)
        except ModelMismatch as exc:
            log.warning("model v%d for %s %s; ignored", msg.version, cfg.id, exc)
            return None
        return model

    # -- background loops -----------------------------------------------------------------------

    async def poll(self, task: str) -> None:
        """One conditional GET of the task's model; raises on transport or server errors."""
        headers = {}
        if task in self._etags and task in self.fetched:
            headers["If-None-Match"] = self._etags[task]
        resp = await self.client.get(f"/v1/tasks/{task}/model", headers=headers)
        if resp.status_code == 304:
            return
        resp.raise_for_status()
        msg = self.parse(task, resp.content)
        self.apply(task, msg, "poll")
        if msg.version == self.model(task).version:
            # Remember the validator of the model we hold, as the server spells it.
            self._etags[task] = resp.headers.get("etag") or f'"{msg.version}"'

    async def _follow(self, task: str) -> None:
        t = self.timing
        async for attempt in until_success(Jittered.of(t.fetch_retry), FETCH_ERRORS, log,
                                           f"task {task}: analyzer not ready"):
            with attempt:
                await self.poll(task)
                if task not in self.fetched:  # answered, but with a model that does not fit
                    raise ValueError("no usable model yet")
        pauses, failures = Jittered.of(t.stream_retry), 0
        while not self._loops.stopping:
            stream_pause = float("inf")
            if self.stream:
                opened, refused_for = time.monotonic(), 0.0
                try:
                    await self._stream(task)
                except httpx.HTTPStatusError as exc:
                    # e.g. 503 ``too_many_streams``: its Retry-After is the least pause.
                    refused_for = retry_after(exc.response.headers)
                    log.info("task %s: model stream refused (%s); polling", task, exc)
                except (TimeoutError, httpx.HTTPError, ValueError) as exc:
                    log.info("task %s: model stream failed (%s); polling", task, exc)
                finally:
                    self.streaming.discard(task)
                # A stream that stayed up for a while was healthy: the schedule starts again.
                failures = 0 if time.monotonic() - opened > t.stream_retry.maximum else failures + 1
                # The services' one schedule (jittered, doubling), at least the server's
                # ``retry:`` and a refusal's Retry-After.
                stream_pause = pauses.delay(max(failures, 1), max(self.reconnect.get(task, 0.0),
                                                              refused_for))
                self.stream_pause[task] = stream_pause
            deadline = time.monotonic() + stream_pause
            while time.monotonic() < deadline and not self._loops.stopping:
                try:
                    await self.poll(task)
                except (httpx.HTTPError, ValueError) as exc:
                    log.debug("task %s: poll failed: %s", task, exc)
                await asyncio.sleep(t.poll_interval)

    async def _stream(self, task: str) -> None:
        """Follow the SSE broadcast until it ends or fails (an answer other than a 200
        ``text/event-stream`` is an ``httpx.HTTPError``)."""
        timeout = httpx.Timeout(5.0, read=self.timing.stream_read_timeout)
        headers = {}
        if task in self.last_event_id:
            headers["Last-Event-ID"] = self.last_event_id[task]
        async with aconnect_sse(
            self.client, "GET", f"/v1/tasks/{task}/model/stream", headers=headers,
            timeout=timeout,
        ) as source:
            resp = source.response
            if resp.status_code != 200:
                raise httpx.HTTPStatusError(
                    f"stream answered {resp.status_code}", request=resp.request, response=resp
                )
            self.streaming.add(task)
            # Catch up on anything published between our last poll and the subscription.
            with contextlib.suppress(httpx.HTTPError, ValueError):
                await self.poll(task)
            async for sse in source.aiter_sse():
                if sse.retry is not None:
                    self.reconnect[task] = sse.retry / 1000
                if sse.id:
                    self.last_event_id[task] = sse.id
                if sse.event == "model" and sse.data:
                    self._on_event(task, sse.data)

    def _on_event(self, task: str, data: str) -> None:
        try:
            msg = self.parse(task, data)
        except ValueError as exc:
            log.warning("task %s: malformed model event ignored: %s", task, exc)
            return
        self.apply(task, msg, "stream")

    async def _fetch_hpke(self) -> tuple[HpkeConfig, bytes]:
        resp = await self.client.get("/v1/hpke-config")
        resp.raise_for_status()
        cfg = HpkeConfig.model_validate_json(resp.content)
        key = b64decode(cfg.public_key)
        if len(key) != 32:
            raise ValueError("an X25519 public key is 32 bytes")
        return cfg, key

    async def _hpke_loop(self) -> None:
        while not self._loops.stopping:
            async for attempt in until_success(Jittered.of(self.timing.fetch_retry),
                                               FETCH_ERRORS, log, "HPKE config not available"):
                with attempt:
                    cfg, key = await self._fetch_hpke()
            if self.hpke is not None and cfg != self.hpke:
                log.warning("analyzer HPKE key changed (key id %d -> %d)",
                            self.hpke.key_id, cfg.key_id)
            self.hpke, self.hpke_public_key = cfg, key
            await asyncio.sleep(self.timing.hpke_refresh)

