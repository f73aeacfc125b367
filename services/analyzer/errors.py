"""The analyzer's refusals. Domain code (runtime, decoders, the ingest pipeline) raises these;
``services.common.web`` turns every one into ``{"code", "message"}`` with its status, so the
routes never translate errors themselves. The analyzer also raises the shared ones:
``UnknownTask`` (404, ``services.common.deps``), ``Starting`` (503 on ``/healthz``) and the group
committer's ``ShuttingDown`` (503 ``unavailable``)."""

from __future__ import annotations

from privbandit.services.common.errors import Conflict, Invalid, NotFound, Unauthorized, Unavailable


class NotSecureSum(NotFound, code="not_secure_sum"):
    """``GET /secure-sum`` of a task that is not a secure-sum task (neither prio3 nor Paillier)."""


class NoPaillierKey(NotFound, code="no_paillier_key"):
    """``GET /v1/paillier-config`` of an analyzer none of whose tasks uses Paillier."""


class AggregationMismatch(Conflict, code="aggregation_mismatch"):
    """The upload uses the other shuffle transport than the task is configured with; nothing
    was counted."""


class BatchRefused(Invalid):
    """A batch that cannot be counted and was NOT recorded (its id stays unprocessed, so it may
    be re-sent). Raised per batch: the rest of its group still commits. One subclass a code.

    Only for what is wrong with the deployment (the shuffler's view of a task or key differs
    from the analyzer's), which re-sending after a fix can cure. What is wrong with a batch's
    content is never refused this way: bad reports are rejected alone, and a Paillier batch
    that cannot be counted is quarantined and acknowledged
    (``services.analyzer.transports.paillier``)."""


class BatchSizeMismatch(BatchRefused, code="batch_size_mismatch"):
    """Not exactly l reports (or a sum claiming another count than l); under a batch schedule,
    not one of its lengths l_k."""


class UnknownKey(BatchRefused, code="unknown_key"):
    """A batch sum encrypted under another Paillier key than the analyzer's."""


class NotShuffler(Unauthorized):
    """Batches are accepted from the shuffler only (bearer token)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"WWW-Authenticate": "Bearer"})


class TooManyStreams(Unavailable, code="too_many_streams"):
    """A model stream beyond ``limits.model_streams`` open ones (503 with Retry-After): poll the
    model with ``If-None-Match`` meanwhile."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after)})


class BadContinuation(BatchRefused, code="bad_continuation"):
    """A ``prio3`` aggregate whose continuation this analyzer did not seal for the batch, or
    whose count, refusals or accepted nonces differ from what the analyzer verified (nothing is
    recorded: the shuffler verifies the batch again on its next attempt)."""

