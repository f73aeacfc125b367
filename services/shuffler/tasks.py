"""What the shuffler knows of its tasks: public parameters only, and the upload sizes they
imply (every HPKE report of a task has one public length; a secure-sum report's length depends
on the analyzer's Paillier key)."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.web import report_json_bytes
from shared.core.policies import randomizer_for
from shared.crypto.hpke import ciphertext_length, row_length
from shared.crypto.slots import layout_for
from shared.crypto.tags import TAG_CIPHERTEXT_BYTES
from shared.protocol.messages import MAX_REPORTS_PER_UPLOAD
from shared.settings import Settings, TaskConfig


@dataclass(frozen=True)
class TaskSpec:
    """One task as the shuffler sees it."""

    config: TaskConfig
    # Every HPKE report of the task has exactly this ciphertext length; 0 for a secure-sum task
    # (the length depends on the analyzer's Paillier key).
    ct_bytes: int

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def secure_sum(self) -> bool:
        return self.config.aggregation == "secure-sum"


def ct_bytes(config: TaskConfig) -> int:
    """The task's HPKE ciphertext length: report id + the randomizer's row + AEAD tag (public).
    0 for a secure-sum task, whose ciphertext length depends on the analyzer's Paillier key."""
    if config.aggregation == "secure-sum":
        return 0
    return ciphertext_length(row_length(randomizer_for(config.policy)))


def task_specs(settings: Settings) -> dict[str, TaskSpec]:
    return {t.id: TaskSpec(config=t, ct_bytes=ct_bytes(t)) for t in settings.tasks}


def upload_limit(ct_bytes: int) -> int:
    """Largest acceptable upload body: the most reports per upload of ``ct_bytes`` each."""
    return MAX_REPORTS_PER_UPLOAD * report_json_bytes(ct_bytes) + 64 * 1024


class BodyLimits:
    """The largest upload body any task takes, for a given Paillier key size (the secure-sum
    tasks' reports grow with it; each also carries a tag)."""

    def __init__(self, specs: dict[str, TaskSpec]) -> None:
        largest_report = max((s.ct_bytes for s in specs.values()), default=1024)
        self._hpke = upload_limit(largest_report)
        self._secure = [s.config for s in specs.values() if s.secure_sum]
        self._tags = MAX_REPORTS_PER_UPLOAD * report_json_bytes(TAG_CIPHERTEXT_BYTES)
        self._by_key: dict[int, int] = {}

    def for_key(self, key_bits: int) -> int:
        limit = self._by_key.get(key_bits)
        if limit is None:
            limit = self._by_key[key_bits] = max(
                [self._hpke]
                + [upload_limit(layout_for(t, key_bits).ciphertext_bytes) + self._tags
                   for t in self._secure]
            )
        return limit
