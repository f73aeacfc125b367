"""The shuffler's side of the ``paillier`` transport (spec §3; ``secure_sum = "paillier"``): it
learns the analyzer's Paillier public key, checks encrypted counts at intake, and turns each
formed batch into ONE encrypted batch sum, which is all it ever forwards for such a
task (``PaillierTransport``).

The shuffler holds no Paillier private key. It needs the public modulus n for two things: to check
at intake that every ciphertext lies in Z*_{n²} (a ciphertext sharing a factor with n would make
the product of its whole batch undecryptable), and to multiply the l ciphertexts of a batch
modulo n². It fetches n from the analyzer's ``GET /v1/paillier-config`` at start-up and retries
until it gets it; until then, Paillier uploads are refused with 503 ``not_ready`` and the
shuffler's ``/healthz`` answers 503 ``starting``. The last config it adopted is kept in its data
directory, so a shuffler restarted while the analyzer is down is ready at once (fetch and cache:
``services.shuffler.published``).

Every report carries a tag (``shared.crypto.tags``) the shuffler cannot open: intake checks its
form (``services.shuffler.hpke``) and refuses a tag it already holds, like an identical
ciphertext, so a re-randomised copy of a report that reuses its tag is a duplicate. A batch sum
is forwarded with each member's tag and the digest of the ciphertext bytes actually multiplied
(``SumMember``); the analyzer checks them.

The analyzer's key changes only by an explicit ``--init`` after its key file was lost. The shuffler
follows it (``services.shuffler.published``: a fetch every ``REFRESH`` seconds, and soon after a
device uploads under, or the analyzer refuses a sum for, a key it does not hold). Batches never
mix keys: when a new key is adopted, every report held under another one (pending, or in an
unacknowledged batch, which is dissolved) is dropped and counted as refused
(``ShufflerStore.refuse_stale_key``: nobody can decrypt it any more), and a batch found to hold a
stale member before its sum is formed is dissolved the same way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, cast

import anyio.to_thread
import gmpy2
from pydantic import TypeAdapter

from privbandit.services.common.web import report_json_bytes
from privbandit.services.shuffler.errors import BadCiphertext, NotReady, SumUnavailable, UnknownKey
from privbandit.services.shuffler.hpke import HpkeState, Refresh
from privbandit.services.shuffler.published import PublishedConfig
from privbandit.services.shuffler.store import SecureBatch, tag_from_bytes
from privbandit.services.shuffler.transports.base import (
    Context,
    Delivery,
    OnAdopted,
    Reports,
    TransportBase,
    UploadRoute,
    upload_limit,
)
from privbandit.shared.crypto.paillier import (
    DEFAULT_KEY_BITS,
    CiphertextError,
    decode_ciphertexts,
    homomorphic_sum,
)
from privbandit.shared.crypto.slots import SlotLayout, ciphertext_width, layout_for
from privbandit.shared.crypto.tags import TAG_CIPHERTEXT_BYTES, ciphertext_digest
from privbandit.shared.protocol.messages import MAX_REPORTS_PER_UPLOAD, b64encode
from privbandit.shared.protocol.paillier import (
    EncryptedBatchSum,
    EncryptedCounts,
    PaillierConfig,
    PaillierUpload,
    SumMember,
)
from privbandit.shared.settings import TaskConfig

log = logging.getLogger(__name__)

# The last Paillier config adopted, in the shuffler's data directory (``Context.cache_dir``).
PAILLIER_CACHE = "paillier-config.json"


class PaillierState(PublishedConfig[PaillierConfig]):
    """The analyzer's Paillier public configuration as this shuffler knows it, with the slot
    layout of each Paillier task under its key (fetched and cached as
    ``services.shuffler.published`` says)."""

    path = "/v1/paillier-config"
    name = "paillier-config"
    model = PaillierConfig

    def __init__(self, tasks: Sequence[TaskConfig], cache: Path | None = None) -> None:
        self.task_configs = {t.id: t for t in tasks}
        self.n = 0
        self.n_squared = 0
        self.layouts: dict[str, SlotLayout] = {}
        super().__init__(bool(self.task_configs), cache)

    def describe(self, config: PaillierConfig) -> str:
        return f"Paillier key {config.key_id} ({config.key_bits} bits); Paillier intake open"

    def _derive(self, config: PaillierConfig) -> dict[str, SlotLayout]:
        # ValueError if a task's layout does not fit this key.
        return {t: layout_for(c, config.key_bits) for t, c in self.task_configs.items()}

    def is_current(self, key_id: int | None) -> bool:
        """Whether ``key_id`` is the key of the adopted config."""
        return self.config is not None and key_id == self.config.key_id

    def _install(self, config: PaillierConfig, derived: dict[str, SlotLayout]) -> None:
        n = config.modulus()
        self.layouts = derived
        self.n, self.n_squared = n, n * n

    def check_upload(self, task: str, reports: Sequence[EncryptedCounts]) -> None:
        """Intake validation of Paillier reports (CPU: base64 and one gcd per ciphertext, run
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


def batch_sum(state: PaillierState, batch: SecureBatch) -> tuple[int, bytes, str]:
    """(key id, wire bytes, members JSON) of E(Σ counts) = Π ciphertexts mod n² over the batch's
    members, per plaintext position, and of the batch's ``SumMember``s: each member's tag and
    the digest of the very ciphertext bytes multiplied. CPU work (~l · plaintexts
    multiplications mod n²): call it in a thread."""
    config = state.config
    if config is None:
        raise SumUnavailable("the analyzer's Paillier key is not known yet")
    if len(batch.members) != batch.size:
        raise SumUnavailable(
            f"batch {batch.batch_id} has {len(batch.members)} stored members, not {batch.size}"
        )
    key_ids = {key_id for key_id, _, _ in batch.members}
    if key_ids != {config.key_id}:
        # Members were checked against the key at intake; the analyzer's key changed since.
        raise SumUnavailable(
            f"batch {batch.batch_id} holds ciphertexts under key(s) {sorted(key_ids)}, the "
            f"analyzer's key is {config.key_id}"
        )
    lay = state.layouts[batch.task]
    width = ciphertext_width(config.key_bits)
    reports = []
    members = []
    for _, raw, tag in batch.members:
        if len(raw) != lay.plaintexts * width:
            raise SumUnavailable(f"batch {batch.batch_id}: a stored ciphertext has a bad length")
        if tag is None:
            raise SumUnavailable(
                f"batch {batch.batch_id}: a member was stored without a report tag (accepted "
                "before tags existed); its sum cannot be forwarded"
            )
        reports.append(
            [int.from_bytes(raw[j * width : (j + 1) * width], "big") for j in range(lay.plaintexts)]
        )
        members.append(SumMember(tag=tag_from_bytes(tag), digest=b64encode(ciphertext_digest(raw))))
    # Let gmpy2 release the GIL during the big multiplications (thread-local context), so the
    # event loop keeps answering uploads while a batch is summed.
    with gmpy2.context(allow_release_gil=True):
        total = homomorphic_sum(reports, state.n_squared)
    # Fixed-width bytes; the analyzer decodes them with ``decode_ciphertexts``.
    ct = b"".join(c.to_bytes(width, "big") for c in total)
    return config.key_id, ct, _MEMBERS.dump_json(members).decode("utf-8")


_MEMBERS = TypeAdapter(list[SumMember])


def sum_message(batch: SecureBatch) -> EncryptedBatchSum:
    """The only thing forwarded for a Paillier batch: its id, key id, count and sum, and its
    members' tags and ciphertext digests (in the batch's shuffled order)."""
    assert batch.sum_ct is not None and batch.key_id is not None
    if batch.sum_members is None:
        raise SumUnavailable(
            f"batch {batch.batch_id}: its sum was stored without its members' tags (before tags "
            "existed); it cannot be forwarded"
        )
    return EncryptedBatchSum(
        batch_id=batch.batch_id, key_id=batch.key_id, count=batch.size, ct=b64encode(batch.sum_ct),
        members=_MEMBERS.validate_json(batch.sum_members),
    )


class PaillierTransport(TransportBase):
    """Paillier-encrypted counts in, one encrypted sum per batch of exactly l out."""

    name: ClassVar[str] = "paillier"
    route: ClassVar[UploadRoute] = UploadRoute(
        "encrypted-counts", PaillierUpload, "Paillier-encrypted counts (PaillierUpload)",
        "Accept Paillier-encrypted counts of a task with secure_sum = paillier; 202 only once "
        "they are durable. Identical ciphertexts are dropped. Each batch of l is released only "
        "as its encrypted sum.")
    # Loaded again before every attempt: checked against the analyzer's current key (a stale
    # batch is dissolved, see ``load``).
    reload: ClassVar[bool] = True

    def __init__(self, tasks: list[TaskConfig], context: Context) -> None:
        super().__init__(tasks, context)
        cache = context.cache_dir / PAILLIER_CACHE if context.cache_dir is not None else None
        self.paillier = PaillierState(tasks, cache)
        self._tags = MAX_REPORTS_PER_UPLOAD * report_json_bytes(TAG_CIPHERTEXT_BYTES)
        self._limits: dict[int, int] = {}

    @staticmethod
    def ct_bytes(config: TaskConfig) -> int:
        """0: the length depends on the analyzer's Paillier key."""
        return 0

    def published(self) -> list[tuple[PublishedConfig[Any], OnAdopted | None]]:
        return [(self.paillier, self.adopted)]

    def missing(self) -> list[str]:
        return self.paillier.missing()

    def health(self) -> dict[str, object]:
        if not self.paillier.needed:
            return {}
        # Secure-sum intake opens once the analyzer's Paillier key is known.
        return {"paillier_ready": self.paillier.config is not None}

    def upload_limit(self) -> int:
        """The largest upload of a task's reports under the analyzer's key (each also carries a
        tag); until the key is known (uploads are refused with 503 anyway), under a key of the
        default size."""
        config = self.paillier.config
        key_bits = config.key_bits if config is not None else DEFAULT_KEY_BITS
        limit = self._limits.get(key_bits)
        if limit is None:
            limit = self._limits[key_bits] = max(
                [upload_limit(layout_for(t, key_bits).ciphertext_bytes) + self._tags
                 for t in self.tasks.values()], default=0)
        return limit

    async def check(self, task: str, reports: Reports, hpke: HpkeState, refresh: Refresh
                    ) -> None:
        counts = cast("Sequence[EncryptedCounts]", reports)
        await hpke.check_tags(task, counts, refresh)
        # CPU (base64 and one gcd per ciphertext): off the event loop.
        await anyio.to_thread.run_sync(self.paillier.check_upload, task, counts)

    async def delivery_ready(self) -> None:
        # Sums need the analyzer's public key (batches stored before a restart wait too).
        await self.paillier.ready.wait()

    def load(self, task: str, batch_id: str) -> Delivery | None:
        """The stored encrypted sum of a Paillier batch, computed and stored first if needed:
        the product is deterministic, so a crash between storing and posting re-sends the same
        sum under the same batch id and the analyzer counts it once."""
        store, paillier = self.context.store, self.paillier
        batch = store.load_secure_batch(batch_id)
        if batch is None:
            return None
        keys = {batch.key_id} if batch.sum_ct is not None else {m[0] for m in batch.members}
        if paillier.config is not None and not all(map(paillier.is_current, keys)):
            # Under a key the analyzer no longer has: it can never be counted, and a sum over
            # two keys decrypts to nothing. Dissolve it (this and any other such batch).
            self.refuse_stale_key(batch.task, paillier.config.key_id)
            return None
        if batch.sum_ct is None:
            started = time.perf_counter()
            key_id, ct, members = batch_sum(paillier, batch)
            self.context.metrics.sum_seconds.observe(time.perf_counter() - started)
            if not store.save_sum(batch_id, key_id, batch.size, ct, members):
                return None
            batch = store.load_secure_batch(batch_id)
            if batch is None or batch.sum_ct is None:
                return None
        body = sum_message(batch).model_dump_json()
        return Delivery(batch_id, batch.task, f"/v1/tasks/{batch.task}/batch-sums", body)

    def refused(self, code: str | None) -> None:
        if code == "unknown_key":  # the analyzer's key changed?
            self.paillier.request_refresh()

    def refuse_stale_key(self, task: str, key_id: int) -> None:
        """(Worker thread.) Drop what ``task`` holds under another Paillier key than ``key_id``
        (``ShufflerStore.refuse_stale_key``), count and log it."""
        done = self.context.store.refuse_stale_key(task, key_id)
        if done.refused or done.dissolved:
            metrics = self.context.metrics
            metrics.reports_refused_stale_key.labels(task).inc(done.refused)
            metrics.batches_formed.labels(task).inc(done.formed)
            log.error(
                "task %s: refused %d accepted report(s) encrypted under a Paillier key the "
                "analyzer no longer has (its key is %d); %d unacknowledged batch(es) dissolved, "
                "%d formed again", task, done.refused, key_id, done.dissolved, done.formed,
            )

    async def adopted(self, config: PaillierConfig, wake: Callable[[str], None]) -> None:
        """The analyzer's Paillier key is ``config``'s (newly adopted): refuse what every
        Paillier task holds under another key, then let delivery look again (batches never
        mix keys)."""
        for task in sorted(self.tasks):
            await anyio.to_thread.run_sync(self.refuse_stale_key, task, config.key_id)
            wake(task)
