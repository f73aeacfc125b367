"""The device's side of the ``prio3`` transport (docs/prio3.md, issue 23): one report's counts
(``sblb``) or signed statistics (``ddp-linucb``) Prio3SumVec-sharded between the shuffler
(leader share, in full) and the analyzer (helper share, HPKE-sealed to it), with a proof that
every entry is in range (``shared.crypto.prio3_task``), uploaded to
``POST /v1/tasks/{task}/prio3-reports``.

The device needs nothing beyond the analyzer's HPKE key (the model cache's) and its own task
config: the Prio3 parameters (c, the range) are derived from the task's randomizer, as the
shuffler and analyzer derive them. It never holds the verification key. Sharding is pure CPU
(no pool, no background work): a few ms per report, run in a worker thread so the event loop
keeps serving meanwhile.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import ClassVar

import numpy as np

from privbandit.services.device.transports.base import (
    Context,
    Encoded,
    HpkeOnlyTransport,
    summed_values,
)
from privbandit.shared.core.randomizers.base import Randomizer, sized_for
from privbandit.shared.crypto.prio3.prio3 import NONCE_SIZE
from privbandit.shared.crypto.prio3_task import TaskVdaf, seal_helper, task_vdaf
from privbandit.shared.protocol.messages import b64encode
from privbandit.shared.protocol.prio3 import Prio3Report
from privbandit.shared.settings import TaskConfig


def make_report(
    vdaf: TaskVdaf, values: np.ndarray, hpke_key_id: int, hpke_public_key: bytes,
    batch_size: int | None = None,
) -> Prio3Report:
    """One report: a fresh nonce (the report id) from the OS CSPRNG, ``shard`` of the values'
    measurement, the helper share sealed to the analyzer. ``ValueError`` for values out of the
    task's range (an honest randomizer never produces them)."""
    v = vdaf.vdaf
    nonce = secrets.token_bytes(NONCE_SIZE)
    public, (leader, helper) = v.shard(vdaf.ctx, vdaf.measurement(values), nonce)
    public_share = v.encode_public_share(public)
    sealed = seal_helper(hpke_public_key, hpke_key_id, vdaf.task, nonce, public_share,
                         v.encode_input_share(helper))
    return Prio3Report(nonce=b64encode(nonce), public_share=b64encode(public_share),
                       leader_share=b64encode(v.encode_input_share(leader)),
                       helper_share=sealed, batch_size=batch_size)


class Prio3Transport(HpkeOnlyTransport):
    """Prio3 reports, uploaded to ``POST /v1/tasks/{task}/prio3-reports``."""

    name: ClassVar[str] = "prio3"
    endpoint: ClassVar[str] = "prio3-reports"

    def __init__(self, tasks: list[TaskConfig], context: Context) -> None:
        super().__init__(tasks, context)
        self.vdafs = {t.id: task_vdaf(t) for t in tasks}

    async def encode(self, task: str, randomizer: Randomizer, row: np.ndarray,
                     hpke_key_id: int, hpke_public_key: bytes) -> Encoded:
        """One feedback's report, sharded for the task and sealed to the analyzer's HPKE key."""
        values = summed_values(self.name, randomizer, row)
        # The batch length the report is sized for (ddp-linucb's noise share; sblb's ε0 under a
        # growing schedule): the shuffler refuses the report if it exceeds the task's next batch
        # (issue 22), as for the other transports.
        sized = sized_for(randomizer)
        report = await asyncio.to_thread(make_report, self.vdafs[task], values, hpke_key_id,
                                         hpke_public_key, sized)
        return Encoded(report.model_dump_json(exclude_none=True), self.name)
