"""The device's side of the ``reports`` transport: the randomized row, with a fresh report id,
sealed with HPKE to the analyzer for the task (``EncryptedReport``)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from privbandit.services.device.transports.base import Encoded, HpkeOnlyTransport
from privbandit.shared.core.randomizers.base import Randomizer, sized_for
from privbandit.shared.crypto.hpke import pack_report, seal
from privbandit.shared.protocol.messages import UploadedReport


class ReportsTransport(HpkeOnlyTransport):
    """HPKE reports, uploaded to ``POST /v1/tasks/{task}/reports``."""

    name: ClassVar[str] = "reports"
    endpoint: ClassVar[str] = "reports"

    async def encode(self, task: str, randomizer: Randomizer, row: np.ndarray,
                     hpke_key_id: int, hpke_public_key: bytes) -> Encoded:
        """The row, with a fresh report id, sealed to the analyzer for the task."""
        _, plaintext = pack_report(randomizer.to_bytes(row))
        report = seal(hpke_public_key, hpke_key_id, task, plaintext)
        # sblb under a growing schedule states the length its ε0 is sized for, for the shuffler
        # only (``UploadedReport``); any other report's bytes are what they always were.
        sized = sized_for(randomizer)
        if sized is None:
            return Encoded(report.model_dump_json(), self.name)
        uploaded = UploadedReport(**report.model_dump(), batch_size=sized)
        return Encoded(uploaded.model_dump_json(), self.name)
