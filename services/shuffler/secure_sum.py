"""The shuffler's side of the ``secure-sum`` transport (spec §3): it learns the analyzer's Paillier
public key, checks encrypted counts at intake, and turns each formed batch into ONE encrypted
batch sum, which is all it ever forwards for such a task.

The shuffler holds no Paillier private key. It needs the public modulus n for two things: to check
at intake that every ciphertext lies in Z*_{n²} (a ciphertext sharing a factor with n would make
the product of its whole batch undecryptable), and to multiply the l ciphertexts of a batch
modulo n². It fetches n from the analyzer's ``GET /v1/paillier-config`` at start-up and retries
until it gets it; until then, secure-sum uploads are refused with 503 ``not_ready`` and the
shuffler's ``/healthz`` answers 503 ``starting``. The last config it adopted is kept in its data
directory (public data, nothing secret), so a shuffler restarted while the analyzer is down is
ready at once and keeps taking reports; the fetch still runs and adopts a newer key.

The analyzer's key changes only by an explicit ``--init`` after its key file was lost. The shuffler
follows it: it fetches the config again every ``REFRESH`` seconds, and soon (at most one fetch per
``MIN_REFETCH`` seconds) after a device uploads under, or the analyzer refuses a sum for, a key
it does not hold. Batches never mix keys: when a new key is adopted, every report held under
another one (pending, or in an unacknowledged batch, which is dissolved) is dropped and counted
as refused (``ShufflerStore.refuse_stale_key``: nobody can decrypt it any more), and a batch
found to hold a stale member before its sum is formed is dissolved the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import gmpy2
import httpx
from pydantic import ValidationError

from services.common.files import write_atomically
from services.common.retry import Backoff
from services.shuffler.errors import BadCiphertext, NotReady, SumUnavailable, UnknownKey
from services.shuffler.store import SecureBatch
from shared.crypto.paillier import CiphertextError, decode_ciphertexts, homomorphic_sum
from shared.crypto.slots import SlotLayout, ciphertext_width, layout_for
from shared.protocol.messages import b64encode
from shared.protocol.secure_sum import EncryptedBatchSum, EncryptedCounts, PaillierConfig
from shared.settings import Settings, TaskConfig

log = logging.getLogger(__name__)

REFRESH = 60.0  # seconds between routine re-fetches of the analyzer's Paillier config
MIN_REFETCH = 1.0  # seconds between two fetches asked for by ``request_refresh``


class PaillierState:
    """The analyzer's Paillier public configuration as this shuffler knows it (event loop and
    worker threads read it; it is set once, from the event loop)."""

    def __init__(self, tasks: Sequence[TaskConfig], cache: Path | None = None) -> None:
        self.task_configs = {t.id: t for t in tasks if t.aggregation == "secure-sum"}
        self.config: PaillierConfig | None = None
        self.n = 0
        self.n_squared = 0
        self.layouts: dict[str, SlotLayout] = {}
        self.last_error: str | None = None
        self.ready = asyncio.Event()
        # Set (from any thread, via the follower's loop) to fetch the config again soon.
        self._refresh: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.cache = cache
        if cache is not None and self.needed and cache.exists():
            try:
                self.set(PaillierConfig.model_validate_json(cache.read_bytes()), save=False)
            except (OSError, ValidationError, ValueError) as exc:
                log.warning("ignoring the cached Paillier config %s: %s", cache, exc)

    @property
    def needed(self) -> bool:
        return bool(self.task_configs)

    def missing(self) -> list[str]:
        """What secure-sum intake waits for (readiness): the key, if a task needs it."""
        return ["paillier-config"] if self.needed and self.config is None else []

    def request_refresh(self) -> None:
        """Ask ``fetch_paillier_config`` to fetch the analyzer's config again soon (a device or
        the analyzer named a key this shuffler does not hold). Thread-safe; a no-op while no
        follower runs."""
        loop, event = self._loop, self._refresh
        if loop is not None and event is not None and not loop.is_closed():
            loop.call_soon_threadsafe(event.set)

    def refresh_requests(self) -> asyncio.Event:
        """The event ``request_refresh`` sets, bound to the running loop (the follower's)."""
        self._loop = asyncio.get_running_loop()
        self._refresh = asyncio.Event()
        return self._refresh

    def is_current(self, key_id: int | None) -> bool:
        """Whether ``key_id`` is the key of the adopted config."""
        return self.config is not None and key_id == self.config.key_id

    def set(self, config: PaillierConfig, save: bool = True) -> None:
        """Adopt a fetched config (and keep it in the cache file); raises ValueError (and
        changes nothing) if a task's layout does not fit this key."""
        layouts = {t: layout_for(c, config.key_bits) for t, c in self.task_configs.items()}
        n = config.modulus()
        if save and self.cache is not None and config != self.config:
            write_atomically(self.cache, config.model_dump_json().encode("utf-8"))
        self.layouts = layouts
        self.n, self.n_squared = n, n * n
        self.config = config
        self.last_error = None
        self.ready.set()

    def check_upload(self, task: str, reports: Sequence[EncryptedCounts]) -> None:
        """Intake validation of secure-sum reports (CPU: base64 and one gcd per ciphertext, run
        it in a worker thread). Raises ``NotReady``, ``UnknownKey`` or ``BadCiphertext`` for the
        first bad report; then nothing of the upload may be stored."""
        config = self.config
        if config is None:
            raise NotReady("the shuffler has not yet fetched the analyzer's Paillier key; "
                           "retry shortly (no report was stored)")
        plaintexts = self.layouts[task].plaintexts
        for i, report in enumerate(reports):
            if report.key_id != config.key_id:
                self.request_refresh()  # the analyzer's key may have changed: look
                raise UnknownKey(
                    f"reports[{i}]: encrypted under Paillier key {report.key_id}, the analyzer's "
                    f"key is {config.key_id}; no report was stored"
                )
            try:
                decode_ciphertexts(report.ct, self.n, plaintexts)
            except CiphertextError as exc:
                raise BadCiphertext(
                    f"reports[{i}]: {exc} (task {task!r} takes {plaintexts} ciphertext(s) of "
                    f"{ciphertext_width(config.key_bits)} bytes); no report was stored"
                ) from exc


def batch_sum(state: PaillierState, batch: SecureBatch) -> tuple[int, bytes]:
    """(key id, wire bytes) of E(Σ counts) = Π ciphertexts mod n² over the batch's members, per
    plaintext position. CPU work (~l · plaintexts multiplications mod n²): call it in a thread."""
    config = state.config
    if config is None:
        raise SumUnavailable("the analyzer's Paillier key is not known yet")
    if len(batch.members) != batch.size:
        raise SumUnavailable(
            f"batch {batch.batch_id} has {len(batch.members)} stored members, not {batch.size}"
        )
    key_ids = {key_id for key_id, _ in batch.members}
    if key_ids != {config.key_id}:
        # Members were checked against the key at intake; the analyzer's key changed since.
        raise SumUnavailable(
            f"batch {batch.batch_id} holds ciphertexts under key(s) {sorted(key_ids)}, the "
            f"analyzer's key is {config.key_id}"
        )
    lay = state.layouts[batch.task]
    width = ciphertext_width(config.key_bits)
    reports = []
    for _, raw in batch.members:
        if len(raw) != lay.plaintexts * width:
            raise SumUnavailable(f"batch {batch.batch_id}: a stored ciphertext has a bad length")
        reports.append(
            [int.from_bytes(raw[j * width : (j + 1) * width], "big") for j in range(lay.plaintexts)]
        )
    # Let gmpy2 release the GIL during the big multiplications (thread-local context), so the
    # event loop keeps answering uploads while a batch is summed.
    with gmpy2.context(allow_release_gil=True):
        total = homomorphic_sum(reports, state.n_squared)
    # Fixed-width bytes; the analyzer decodes them with ``decode_ciphertexts``.
    return config.key_id, b"".join(c.to_bytes(width, "big") for c in total)


def sum_message(batch: SecureBatch) -> EncryptedBatchSum:
    """The only thing forwarded for a secure-sum batch: its id, key id, count and sum."""
    assert batch.sum_ct is not None and batch.key_id is not None
    return EncryptedBatchSum(
        batch_id=batch.batch_id, key_id=batch.key_id, count=batch.size, ct=b64encode(batch.sum_ct)
    )


# Called with the new key id once a config with another key than the one held is adopted.
NewKeyHook = Callable[[int], Awaitable[None]]


async def fetch_paillier_config(
    state: PaillierState,
    client: httpx.AsyncClient,
    settings: Settings,
    on_new_key: NewKeyHook | None = None,
) -> None:
    """Follow the analyzer's ``GET /v1/paillier-config``: fetch until a valid config arrives
    (exponential backoff with jitter, as batch delivery) and adopt it; then fetch again every
    ``REFRESH`` seconds, or ``MIN_REFETCH`` seconds after ``state.request_refresh()``. When the
    adopted key differs from the one held before (also the cached one at start-up, or none),
    ``on_new_key(key_id)`` refuses what is held under any other key. Runs as a background task
    from start-up until cancelled."""
    refresh = state.refresh_requests()
    backoff = Backoff(settings.retry_initial, settings.retry_max)
    checked: int | None = None  # the key that what is held was last checked against
    while True:
        refresh.clear()
        try:
            resp = await client.get("/v1/paillier-config")
            if resp.status_code == 200:
                config = PaillierConfig.model_validate_json(resp.content)
                if config != state.config:
                    old = state.config
                    state.set(config)
                    if old is None:
                        log.info("analyzer Paillier key %d (%d bits); secure-sum intake open",
                                 config.key_id, config.key_bits)
                    else:
                        log.warning("the analyzer's Paillier key changed (key id %d -> %d)",
                                    old.key_id, config.key_id)
                if checked != config.key_id and on_new_key is not None:
                    try:
                        await on_new_key(config.key_id)
                        checked = config.key_id
                    except Exception:  # retried at the next fetch; sums check keys anyway
                        log.exception("refusing reports under old Paillier keys failed")
                backoff.reset()
                await asyncio.sleep(MIN_REFETCH)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(refresh.wait(), max(0.0, REFRESH - MIN_REFETCH))
                continue
            error = f"HTTP {resp.status_code}: {resp.text[:200]}"
        except (httpx.HTTPError, ValidationError, ValueError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        state.last_error = f"fetching the analyzer's Paillier key: {error}"
        log.warning("%s; retrying", state.last_error)
        await backoff.sleep()

