"""The analyzer's refusals. Domain code (runtime, decoders, the ingest pipeline) raises these;
``services.common.web`` turns every one into ``{"code", "message"}`` with its status, so the
routes never translate errors themselves."""

from __future__ import annotations

from services.common.errors import Conflict, Invalid, NotFound, Unauthorized, Unavailable


class UnknownTask(NotFound):
    default_code = "unknown_task"


class NotSecureSum(NotFound):
    """``GET /secure-sum`` of a task that does not use the secure-sum transport."""

    default_code = "not_secure_sum"


class AggregationMismatch(Conflict):
    """The upload uses the other shuffle transport than the task is configured with; nothing
    was counted."""

    default_code = "aggregation_mismatch"


class BatchRefused(Invalid):
    """A batch that cannot be counted and was NOT recorded (its id stays unprocessed, so it may
    be re-sent). Raised per batch: the rest of its group still commits. One subclass a code."""


class BatchSizeMismatch(BatchRefused):
    default_code = "batch_size_mismatch"


class UnknownKey(BatchRefused):
    """A batch sum encrypted under another Paillier key than the analyzer's."""

    default_code = "unknown_key"


class BadCiphertext(BatchRefused):
    default_code = "bad_ciphertext"


class SlotOutOfRange(BatchRefused):
    """A decrypted batch sum that is not l reports with counts in 0..m."""

    default_code = "slot_out_of_range"


class NotShuffler(Unauthorized):
    """Batches are accepted from the shuffler only (bearer token)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"WWW-Authenticate": "Bearer"})


class ShuttingDown(Unavailable):
    """The analyzer stopped (or has not started) taking batches; the shuffler retries."""


class NotReady(Unavailable):
    """``/healthz`` before the keys, the tasks and the ingest committers are up."""

    default_code = "starting"
