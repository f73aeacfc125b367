"""The shuffler's side of the ``secure-sum`` transport (spec §3): it learns the analyzer's Paillier
public key, checks encrypted counts at intake, and turns each formed batch into ONE encrypted
batch sum, which is all it ever forwards for such a task.

The shuffler holds no Paillier private key. It needs the public modulus n for two things: to check
at intake that every ciphertext lies in Z*_{n²} (a ciphertext sharing a factor with n would make
the product of its whole batch undecryptable), and to multiply the l ciphertexts of a batch
modulo n². It fetches n from the analyzer's ``GET /v1/paillier-config`` at start-up and retries
until it gets it; until then, secure-sum uploads are refused with 503 ``not_ready`` and the
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
from collections.abc import Sequence
from pathlib import Path

import gmpy2
from pydantic import TypeAdapter

from services.shuffler.errors import BadCiphertext, NotReady, SumUnavailable, UnknownKey
from services.shuffler.published import PublishedConfig
from services.shuffler.store import SecureBatch, tag_from_bytes
from shared.crypto.paillier import CiphertextError, decode_ciphertexts, homomorphic_sum
from shared.crypto.slots import SlotLayout, ciphertext_width, layout_for
from shared.crypto.tags import ciphertext_digest
from shared.protocol.messages import b64encode
from shared.protocol.secure_sum import (
    EncryptedBatchSum,
    EncryptedCounts,
    PaillierConfig,
    SumMember,
)
from shared.settings import TaskConfig

log = logging.getLogger(__name__)


class PaillierState(PublishedConfig[PaillierConfig]):
    """The analyzer's Paillier public configuration as this shuffler knows it, with the slot
    layout of each secure-sum task under its key (fetched and cached as
    ``services.shuffler.published`` says)."""

    path = "/v1/paillier-config"
    name = "paillier-config"
    model = PaillierConfig

    def __init__(self, tasks: Sequence[TaskConfig], cache: Path | None = None) -> None:
        self.task_configs = {t.id: t for t in tasks if t.aggregation == "secure-sum"}
        self.n = 0
        self.n_squared = 0
        self.layouts: dict[str, SlotLayout] = {}
        super().__init__(bool(self.task_configs), cache)

    def describe(self, config: PaillierConfig) -> str:
        return f"Paillier key {config.key_id} ({config.key_bits} bits); secure-sum intake open"

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
    """The only thing forwarded for a secure-sum batch: its id, key id, count and sum, and its
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
