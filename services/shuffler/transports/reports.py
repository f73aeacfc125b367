"""The shuffler's side of the ``reports`` transport: HPKE reports, each sealed to the analyzer,
checked at intake for the analyzer's key id, a well-formed encapsulated key and the task's one
public length (``HpkeState.check_reports``); each formed batch is forwarded as it is stored —
its id and its l ciphertexts in the shuffled order, nothing else (``BatchUpload``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, cast

from privbandit.services.shuffler.hpke import HpkeState, Refresh
from privbandit.services.shuffler.transports import base
from privbandit.shared.core.policies import randomizer_for
from privbandit.shared.crypto.hpke import ciphertext_length, row_length
from privbandit.shared.protocol.messages import BatchUpload, EncryptedReport, ReportUpload
from privbandit.shared.settings import TaskConfig


class ReportsTransport(base.TransportBase):
    """HPKE reports in, shuffled batches of exactly l of them out."""

    name: ClassVar[str] = "reports"
    route: ClassVar[base.UploadRoute] = base.UploadRoute(
        "reports", ReportUpload, "HPKE reports (ReportUpload)",
        "Accept ciphertexts; 202 only once they are durable. Identical ciphertexts are dropped.")
    reload: ClassVar[bool] = False

    def __init__(self, tasks: list[TaskConfig], context: base.Context) -> None:
        super().__init__(tasks, context)
        self._ct_bytes = {t.id: self.ct_bytes(t) for t in tasks}
        self._limit = base.upload_limit(max(self._ct_bytes.values())) if tasks else 0

    @staticmethod
    def ct_bytes(config: TaskConfig) -> int:
        """Report id + the randomizer's row + AEAD tag: one public length per task."""
        return ciphertext_length(row_length(randomizer_for(config.policy)))

    async def check(self, task: str, reports: base.Reports, hpke: HpkeState, refresh: Refresh
                    ) -> None:
        sealed = cast("Sequence[EncryptedReport]", reports)
        await hpke.check_reports(task, sealed, self._ct_bytes[task], refresh)

    def load(self, task: str, batch_id: str) -> base.Delivery | None:
        """The batch as stored: its id and its l ciphertexts in the shuffled order."""
        batch = self.context.store.load_batch(batch_id)
        if batch is None:
            return None
        body = BatchUpload(batch_id=batch.batch_id, reports=batch.reports).model_dump_json()
        return base.Delivery(batch_id, task, f"/v1/tasks/{task}/batches", body)
