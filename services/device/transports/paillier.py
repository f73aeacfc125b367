"""The device's side of the ``paillier`` transport (spec §3; a ``secure-sum`` task with
``secure_sum = "paillier"``): the analyzer's Paillier public key per such task, and the
encryption of one report's randomized counts (``sblb``) or noisy signed statistics
(``ddp-linucb``, a signed slot layout) under it (``PaillierTransport``), uploaded to
``POST /v1/tasks/{task}/encrypted-counts``.

For each Paillier task the device fetches, at start-up and retrying until the analyzer answers
(like the HPKE config),

1. ``GET /v1/tasks/{task}`` (``TaskInfo``: the analyzer must agree that the task is secure-sum),
2. ``GET /v1/tasks/{task}/secure-sum`` (``PaillierConfig`` with the task's slot layout),

and checks the layout against what it derives itself (c = d(d+3)/2 coordinates and m from its
own randomizer, l from the analyzer's task parameters): a device that packed its counts under
another layout would produce sums the analyzer refuses. It then keeps a pool of precomputed
obfuscators r^n mod n² topped up in the background (``PoolRefiller``, computing in worker
processes of lower priority, ``device_timing.paillier_workers``), so that encrypting a report on
the request path is one multiplication mod n² per plaintext. The config is refreshed
periodically, and at once when the shuffler says ``unknown_key`` (``refresh``); a new key gets a
new encryptor and pool (the old pool's randomness is useless under another modulus).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import ClassVar

import gmpy2
import httpx
import numpy as np

from privbandit.services.common.retry import Jittered, until_success
from privbandit.services.device.background import Loops
from privbandit.services.device.errors import NoPaillierKey
from privbandit.services.device.transports.base import (
    Context,
    Encoded,
    KeyRefresher,
    hpke_key,
    summed_values,
)
from privbandit.services.device.transports.refiller import (
    PoolRefiller,
    start_refiller,
    start_workers,
)
from privbandit.shared.core.randomizers.base import Randomizer, sized_for
from privbandit.shared.crypto.paillier import MIN_KEY_BITS, PaillierEncryptor, encode_ciphertexts
from privbandit.shared.crypto.slots import layout_for
from privbandit.shared.crypto.tags import make_tag
from privbandit.shared.protocol.messages import REPORT_ID_BYTES, TaskInfo, b64decode
from privbandit.shared.protocol.paillier import EncryptedCounts, PaillierConfig, PaillierLayout
from privbandit.shared.settings import DeviceTiming, TaskConfig

log = logging.getLogger(__name__)


class ConfigMismatch(ValueError):
    """The analyzer's Paillier parameters of a task do not match what this device derives itself."""


def check_config(task: TaskConfig, info: TaskInfo, config: PaillierConfig, min_key_bits: int
                 ) -> PaillierLayout:
    """The task's layout from a fetched config, or ``ConfigMismatch`` if the analyzer's view of
    the task differs from the device's (aggregation, c, m, l) or the key is too small."""
    if info.id != task.id or info.aggregation != "secure-sum":
        raise ConfigMismatch(
            f"the analyzer runs task {info.id!r} with {info.aggregation} aggregation, "
            f"this device is configured for secure-sum"
        )
    if info.secure_sum not in (None, "paillier"):
        # None: an analyzer from before the field, which only ran Paillier secure sums.
        raise ConfigMismatch(
            f"the analyzer sums task {info.id!r} with {info.secure_sum}, this device is "
            f"configured for a Paillier secure sum"
        )
    lay = config.layout
    if lay is None:
        raise ConfigMismatch("the Paillier config carries no slot layout for the task")
    if config.key_bits < min_key_bits:
        raise ConfigMismatch(f"a {config.key_bits}-bit Paillier key is below {min_key_bits} bits")
    if info.batch_size != task.batch_size:
        raise ConfigMismatch(
            f"the analyzer's batch size l = {info.batch_size} differs from this device's "
            f"l = {task.batch_size}"
        )
    check_release(task, info)
    try:
        want = PaillierLayout.of(layout_for(task, config.key_bits))
    except ValueError as exc:
        raise ConfigMismatch(str(exc)) from exc
    if lay != want:
        raise ConfigMismatch(
            f"slot layout {lay.model_dump()} does not match the task's {want.model_dump()}"
        )
    return lay


# Policy fields that say what a released value means, which the analyzer's decoder reads back
# (``ddp-linucb``: it divides s and the encoding's weights out of the batch sum). The slot
# layout's offset moves with most of them, but not always: a device and an analyzer that differ
# in one would count biased statistics as honest ones.
RELEASE_FIELDS = ("encoding", "u_weight", "intercept", "intercept_coords", "scale", "L")


def check_release(task: TaskConfig, info: TaskInfo) -> None:
    """``ConfigMismatch`` if the analyzer's policy (``TaskInfo.policy``) differs from this
    device's in a field of ``RELEASE_FIELDS`` the device's policy has (a field the analyzer
    omits counts as its default)."""
    fields = type(task.policy).model_fields
    for name in RELEASE_FIELDS:
        if name not in fields:
            continue
        mine = getattr(task.policy, name)
        theirs = info.policy.get(name, fields[name].default)
        if isinstance(theirs, list):  # a tuple field (intercept_coords) as JSON carries it
            theirs = tuple(theirs)
        if theirs != mine:
            raise ConfigMismatch(
                f"the analyzer's policy.{name} = {theirs!r} differs from this device's {mine!r}"
            )


@dataclass
class TaskKey:
    """One task's Paillier config, layout and encryptor (with its refilling pool)."""

    config: PaillierConfig
    layout: PaillierLayout
    encryptor: PaillierEncryptor
    refiller: PoolRefiller

    @property
    def key_id(self) -> int:
        return self.config.key_id

    def encrypt_inline_ok(self) -> bool:
        """True when encrypting now costs only multiplications (the pool has randomness)."""
        return self.encryptor.pool_size >= self.layout.plaintexts

    def encrypt(
        self, counts: np.ndarray | list[int], task: str, hpke_key: bytes, hpke_key_id: int
    ) -> EncryptedCounts:
        """The wire form of one report's counts (each in 0..m; a signed layout's values in ±O)
        of ``task``: pack, encrypt, encode, and tag: a fresh report id from the OS CSPRNG bound
        to these ciphertext bytes, sealed to the analyzer's HPKE key (``shared.crypto.tags``)."""
        cts = self.encryptor.encrypt_report(counts, self.layout.slot_layout())
        ct = encode_ciphertexts(cts, self.config.key_bits)
        report_id = secrets.token_bytes(REPORT_ID_BYTES)
        tag = make_tag(hpke_key, hpke_key_id, task, report_id, b64decode(ct))
        return EncryptedCounts(key_id=self.config.key_id, ct=ct, tag=tag)

    def encrypt_in_thread(
        self, counts: np.ndarray | list[int], task: str, hpke_key: bytes, hpke_key_id: int
    ) -> EncryptedCounts:
        """``encrypt`` for a worker thread when the pool is empty: gmpy2 releases the GIL
        during the r^n mod n² exponentiation (thread-local context), so the event loop keeps
        serving requests meanwhile."""
        with gmpy2.context(allow_release_gil=True):
            return self.encrypt(counts, task, hpke_key, hpke_key_id)


class PaillierKeys:
    """The Paillier configs of this device's Paillier tasks, fed by background fetches."""

    def __init__(
        self,
        tasks: list[TaskConfig],
        timing: DeviceTiming,
        client: httpx.AsyncClient,
        *,
        min_key_bits: int = MIN_KEY_BITS,
        on_change: Callable[[str, TaskKey], None] | None = None,
    ) -> None:
        self.client = client
        self.timing = timing
        self.min_key_bits = min_key_bits
        # Precomputed obfuscators kept per task (a report of a task with d <= 19 under a
        # 2048-bit key needs one).
        self.pool_target = self.timing.paillier_pool
        self.on_change = on_change
        self.tasks = {t.id: t for t in tasks}
        self._keys: dict[str, TaskKey] = {}
        # The refillers' worker processes (all keys), started with the first key.
        self._workers: ProcessPoolExecutor | None = None
        self._locks = {t: asyncio.Lock() for t in self.tasks}
        self._loops = Loops()
        self.last_error: dict[str, str] = {}
        self.fetches = 0  # successful config fetches (tests and logs)

    # -- reading --------------------------------------------------------------------------------

    def get(self, task: str) -> TaskKey | None:
        return self._keys.get(task)

    def missing(self) -> list[str]:
        """The Paillier tasks whose Paillier config has not come yet (readiness)."""
        return [f"paillier-config:{t}" for t in self.tasks if t not in self._keys]

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        for task in self.tasks:
            self._loops.start(self._follow(task), f"paillier:{task}")

    async def stop(self) -> None:
        await self._loops.stop()
        # join() waits for an exponentiation in progress (~10 ms each): off the event loop.
        await asyncio.gather(*(asyncio.to_thread(k.refiller.stop) for k in self._keys.values()))
        if self._workers is not None:
            workers, self._workers = self._workers, None
            await asyncio.to_thread(workers.shutdown, wait=True, cancel_futures=True)

    def _pool_workers(self) -> ProcessPoolExecutor | None:
        if self._workers is None and self.timing.paillier_workers > 0:
            self._workers = start_workers(self.timing.paillier_workers)
        return self._workers

    # -- fetching -------------------------------------------------------------------------------

    async def refresh(self, task: str) -> int | None:
        """Fetch the task's config now (e.g. after the shuffler answered ``unknown_key``); the
        current key id afterwards, or None if the analyzer could not be asked."""
        try:
            key = await self._fetch(task)
        except (httpx.HTTPError, ValueError) as exc:
            self.last_error[task] = str(exc)
            log.warning("task %s: Paillier config refresh failed: %s", task, exc)
            return None
        return key.key_id

    async def _fetch(self, task: str) -> TaskKey:
        """Fetch and check the task's parameters and config; adopt a new key. Raises
        ``httpx.HTTPError`` or ``ValueError`` (including ``ConfigMismatch``)."""
        async with self._locks[task]:
            r = await self.client.get(f"/v1/tasks/{task}")
            r.raise_for_status()
            info = TaskInfo.model_validate_json(r.content)
            r = await self.client.get(f"/v1/tasks/{task}/secure-sum")
            r.raise_for_status()
            # Checks key id vs n and the layout's derived fields.
            config = PaillierConfig.model_validate_json(r.content)
            lay = check_config(self.tasks[task], info, config, self.min_key_bits)
            self.fetches += 1
            self.last_error.pop(task, None)
            old = self._keys.get(task)
            if old is not None and old.config == config:
                return old
            encryptor = PaillierEncryptor.from_config(config)
            refiller = start_refiller(encryptor, self.pool_target, workers=self._pool_workers())
            key = TaskKey(config, lay, encryptor, refiller)
            self._keys[task] = key
            if old is not None:
                log.warning("task %s: analyzer Paillier key changed (key id %d -> %d)",
                            task, old.key_id, key.key_id)
                await asyncio.to_thread(old.refiller.stop)
            else:
                log.info("task %s: Paillier key %d (%d bits), %d plaintext(s) per report",
                         task, key.key_id, config.key_bits, lay.plaintexts)
            if self.on_change is not None:
                self.on_change(task, key)
            return key

    async def _follow(self, task: str) -> None:
        def failed(exc: BaseException) -> int:
            self.last_error[task] = str(exc)
            return logging.ERROR if isinstance(exc, ConfigMismatch) else logging.INFO

        while not self._loops.stopping:
            async for attempt in until_success(
                    Jittered.of(self.timing.fetch_retry), (httpx.HTTPError, ValueError), log,
                    f"task {task}: Paillier config not available", on_failure=failed):
                with attempt:
                    await self._fetch(task)
            await asyncio.sleep(self.timing.paillier_refresh)


@dataclass(frozen=True)
class SumSealer:
    """One feedback's encryption under the task's Paillier key, its tag sealed to the
    analyzer's HPKE key."""

    task: str
    key: TaskKey
    hpke_key_id: int
    hpke_public_key: bytes

    async def seal(self, randomizer: Randomizer, row: np.ndarray) -> Encoded:
        counts = summed_values(PaillierTransport.name, randomizer, row)
        key, args = self.key, (counts, self.task, self.hpke_public_key, self.hpke_key_id)
        if key.encrypt_inline_ok():  # one multiplication mod n² per plaintext
            wire = key.encrypt(*args)
        else:  # pool exhausted: r^n mod n² (~10 ms) must not stall the event loop
            wire = await asyncio.to_thread(key.encrypt_in_thread, *args)
        sized = sized_for(randomizer)
        if sized is not None:
            # The batch length the noise is sized for (ddp-linucb's share; sblb's ε0 under a
            # growing schedule): the shuffler refuses the report if it exceeds the task's next
            # batch (issue 22; ``services.shuffler.store.base``).
            wire = wire.model_copy(update={"batch_size": sized})
        # Unset fields stay off the wire (a sblb report's bytes are what they always were).
        return Encoded(wire.model_dump_json(exclude_none=True), PaillierTransport.name,
                       wire.key_id)


class PaillierTransport:
    """Paillier-encrypted counts, uploaded to ``POST /v1/tasks/{task}/encrypted-counts``; the
    tasks' keys are fetched and their pools refilled in the background (``PaillierKeys``)."""

    name: ClassVar[str] = "paillier"
    endpoint: ClassVar[str] = "encrypted-counts"

    def __init__(self, tasks: list[TaskConfig], context: Context) -> None:
        self.tasks = {t.id: t for t in tasks}
        self.cache = context.cache
        self.keys = PaillierKeys(
            tasks, context.settings.device_timing, context.analyzer,
            min_key_bits=context.paillier_min_bits, on_change=context.metrics.on_paillier_key,
        )
        # The shuffler does not know a report's key: fetch the task's config again.
        self.refresh_key: KeyRefresher | None = self.keys.refresh

    def sealer(self, task: str) -> SumSealer:
        key = self.keys.get(task)
        if key is None:
            raise NoPaillierKey(
                f"the analyzer's Paillier key for task {task} is not known yet; retry soon"
            )
        return SumSealer(task, key, *hpke_key(self.cache))

    def missing(self) -> list[str]:
        return self.keys.missing()

    def health(self) -> dict[str, object]:
        keys = self.keys
        return {"paillier_keys": {t: k.key_id for t in keys.tasks
                                  if (k := keys.get(t)) is not None}}

    def start(self) -> None:
        self.keys.start()

    async def stop(self) -> None:
        await self.keys.stop()
