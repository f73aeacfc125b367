"""The shuffler's refusals. Domain code (intake checks, the Paillier key state, the store
behind group commit) raises these; ``services.common.web`` turns each into ``{"code",
"message"}`` with its status. An upload refused with any of them stored nothing."""

from __future__ import annotations

from privbandit.services.common.errors import Conflict, Invalid, TooMany, Unavailable


class AggregationMismatch(Conflict, code="aggregation_mismatch"):
    """The upload uses the other shuffle transport than the task is configured with."""


class BadReportSize(Invalid, code="bad_report_size"):
    """An HPKE report whose enc or ct length is not the task's (public, fixed) length."""


class UnknownKey(Invalid, code="unknown_key"):
    """Encrypted counts under another Paillier key than the analyzer's."""


class UnknownHpkeKey(Invalid, code="unknown_hpke_key"):
    """An HPKE report (or a Paillier report's tag) sealed to a key id the analyzer does not
    publish."""


class BadEncapsulatedKey(Invalid, code="bad_encapsulated_key"):
    """An HPKE report (or tag) whose encapsulated key is not an X25519 point an honest sender
    makes (a point of small order)."""


class BadCiphertext(Invalid, code="bad_ciphertext"):
    """Encrypted counts that are not the task's number of ciphertexts in Z*_{n²}."""


class BadShare(Invalid, code="bad_share"):
    """A ``prio3`` report whose leader share is not the task's length of field elements."""


class NotReady(Unavailable, code="not_ready"):
    """Intake before the analyzer's keys are known, or while an unknown key id cannot be checked
    with the analyzer (retry shortly)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"Retry-After": "1"})


class QueueFull(TooMany, code="queue_full"):
    """An upload while the task already has ``limits.shuffler_reports`` reports stored and not
    yet acknowledged by the analyzer (429 with Retry-After); none of it was stored."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after)})


class StorageError(Unavailable, code="storage_error"):
    """The group commit failed; none of the upload was accepted."""


class Undeliverable(Exception):
    """(Not an HTTP error.) What a transport forwards for a batch cannot be formed now; the
    forwarder reports it (``forward_failures`` with the class's ``reason``, logged at ERROR)
    and retries with backoff."""

    reason = "undeliverable"


class SumUnavailable(Undeliverable):
    """A batch's encrypted sum cannot be formed now (key unknown, or members under another
    key)."""

    reason = "paillier_sum"


class VerifyUnavailable(Undeliverable):
    """A ``prio3`` batch's verification exchange with the analyzer failed (unreachable, a
    refusal, or an answer that does not fit the batch); retried."""

    reason = "verify_failed"
