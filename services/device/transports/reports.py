"""The device's side of the ``reports`` transport: the randomized row, with a fresh report id,
sealed with HPKE to the analyzer for the task (``EncryptedReport``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from privbandit.services.device.transports.base import Context, Encoded, KeyRefresher, hpke_key
from privbandit.shared.core.randomizers.base import Randomizer
from privbandit.shared.crypto.hpke import pack_report, seal
from privbandit.shared.protocol.messages import UploadedReport
from privbandit.shared.settings import TaskConfig


@dataclass(frozen=True)
class ReportSealer:
    task: str
    key_id: int
    public_key: bytes

    async def seal(self, randomizer: Randomizer, row: np.ndarray) -> Encoded:
        _, plaintext = pack_report(randomizer.to_bytes(row))
        report = seal(self.public_key, self.key_id, self.task, plaintext)
        # sblb under a growing schedule states the length its ε0 is sized for, for the shuffler
        # only (``UploadedReport``); any other report's bytes are what they always were.
        sized_for = getattr(randomizer, "batch_size", None)
        if sized_for is None:
            return Encoded(report.model_dump_json(), ReportsTransport.name)
        uploaded = UploadedReport(**report.model_dump(), batch_size=sized_for)
        return Encoded(uploaded.model_dump_json(), ReportsTransport.name)


class ReportsTransport:
    """HPKE reports, uploaded to ``POST /v1/tasks/{task}/reports``."""

    name: ClassVar[str] = "reports"
    endpoint: ClassVar[str] = "reports"
    refresh_key: KeyRefresher | None = None

    def __init__(self, tasks: list[TaskConfig], context: Context) -> None:
        self.tasks = {t.id: t for t in tasks}
        self.cache = context.cache

    def sealer(self, task: str) -> ReportSealer:
        return ReportSealer(task, *hpke_key(self.cache))

    def missing(self) -> list[str]:
        return []  # the HPKE config is the model cache's

    def health(self) -> dict[str, object]:
        return {}

    def start(self) -> None:
        """Nothing to fetch of its own."""

    async def stop(self) -> None:
        """Nothing to stop."""
