"""What the shuffler knows of its tasks: public parameters only, and the one ciphertext length
every HPKE report of a task has (set by its transport, ``services.shuffler.transports``)."""

from __future__ import annotations

from dataclasses import dataclass

from privbandit.services.shuffler.transports import transport_class
from privbandit.shared.settings import Settings, TaskConfig


@dataclass(frozen=True)
class TaskSpec:
    """One task as the shuffler sees it."""

    config: TaskConfig
    # Every HPKE report of the task has exactly this ciphertext length; 0 for a Paillier task
    # (the length depends on the analyzer's Paillier key).
    ct_bytes: int

    @property
    def id(self) -> str:
        return self.config.id


def ct_bytes(config: TaskConfig) -> int:
    """The task's HPKE ciphertext length: report id + the randomizer's row + AEAD tag (public).
    0 for a Paillier task, whose ciphertext length depends on the analyzer's Paillier key."""
    return transport_class(config).ct_bytes(config)


def task_specs(settings: Settings) -> dict[str, TaskSpec]:
    return {t.id: TaskSpec(config=t, ct_bytes=ct_bytes(t)) for t in settings.tasks}
