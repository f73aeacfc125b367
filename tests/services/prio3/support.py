"""What the prio3 service tests share: the tasks, honest and hostile reports built as a device
(or an attacker with a script) would, and a ``stack`` of the real analyzer and shuffler
in-process (the shuffler's verification exchange and deliveries go to the analyzer app)."""

import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from privbandit.services.analyzer.app import create_app as create_analyzer
from privbandit.services.device.transports.prio3 import make_report
from privbandit.services.shuffler.app import create_app as create_shuffler
from privbandit.shared.core.policies import randomizer_for
from privbandit.shared.crypto.prio3_task import TaskVdaf, seal_helper, task_vdaf
from privbandit.shared.protocol.messages import (
    HpkeConfig,
    ReportsAccepted,
    b64decode,
    b64encode,
)
from privbandit.shared.protocol.prio3 import Prio3Report
from privbandit.shared.settings import Settings, TaskConfig
from tests.helpers import make_rows, make_settings, queue_status, running
from tests.services.paillier.support import Recorder, ServiceStack


def prio3_task(task_id: str = "sum", l: int = 10, **policy: Any) -> TaskConfig:
    """An sblb-fixed secure-sum task over the prio3 transport (d = 3: c = 9 counts, m = 1)."""
    return TaskConfig.model_validate({
        "id": task_id, "threat_model": "shuffle", "K": 4, "aggregation": "secure-sum",
        "secure_sum": "prio3",
        "policy": {"algo": "sblb-fixed", "d": 3, "eps0": 4.0, "batch_size": l, **policy},
    })


def ddp_prio3_task(task_id: str = "ddp", l: int = 10, **policy: Any) -> TaskConfig:
    """A ddp-linucb task (d = 3) over the prio3 transport."""
    return TaskConfig.model_validate({
        "id": task_id, "threat_model": "shuffle", "K": 4, "aggregation": "secure-sum",
        "secure_sum": "prio3",
        "policy": {"algo": "ddp-linucb", "d": 3, "batch_size": l, **policy},
    })


SUM = prio3_task()


def settings_for(tmp_path: Path, tasks: list[TaskConfig] | None = None, **kw: Any) -> Settings:
    return make_settings(tmp_path / "data", tasks=tasks or [SUM], **kw)


@dataclass
class Stack(ServiceStack):
    hpke: HpkeConfig


@asynccontextmanager
async def stack(settings: Settings, recorder: Recorder | None = None) -> AsyncIterator[Stack]:
    a_app = create_analyzer(settings)
    async with running(a_app) as a_client:
        rec = recorder if recorder is not None else Recorder()
        rec.inner = httpx.ASGITransport(a_app)
        s_app = create_shuffler(settings, analyzer_transport=rec)
        async with running(s_app) as s_client:
            hpke = HpkeConfig.model_validate_json((await a_client.get("/v1/hpke-config")).content)
            yield Stack(a_client, s_client, a_app, s_app, rec, hpke)


class Maker:
    """Reports of a task as devices (honest) or attackers (``forged``, ...) build them."""

    def __init__(self, config: TaskConfig, hpke: HpkeConfig, seed: int = 0) -> None:
        self.config = config
        self.vd: TaskVdaf = task_vdaf(config)
        self.hpke = hpke
        self.rng = np.random.default_rng(seed)
        self.randomizer = randomizer_for(config.policy)

    def values(self, rows: np.ndarray) -> np.ndarray:
        """What each row's report sums (sblb: counts; ddp: the row itself)."""
        counts = getattr(self.randomizer, "counts", None)
        return counts(rows) if counts is not None and self.vd.offset == 0 else rows

    def honest(self, n: int) -> tuple[np.ndarray, list[Prio3Report]]:
        rows = make_rows(self.config, n, self.rng)
        return rows, [self.report(v) for v in self.values(rows)]

    def report(self, values: Sequence[int] | np.ndarray) -> Prio3Report:
        return make_report(self.vd, np.asarray(values), self.hpke.key_id,
                           b64decode(self.hpke.public_key))

    def forged(self, encoded: Sequence[int]) -> Prio3Report:
        """A report of an arbitrary encoded measurement (field elements), sharded and proved
        as an honest client would: what a script can send."""
        v = self.vd.vdaf
        nonce = secrets.token_bytes(16)
        public, (leader, helper) = v.shard_encoded(self.vd.ctx, v.field.vec(list(encoded)), nonce)
        public_share = v.encode_public_share(public)
        sealed = seal_helper(b64decode(self.hpke.public_key), self.hpke.key_id, self.vd.task,
                             nonce, public_share, v.encode_input_share(helper))
        return Prio3Report(nonce=b64encode(nonce), public_share=b64encode(public_share),
                           leader_share=b64encode(v.encode_input_share(leader)),
                           helper_share=sealed)

    def value_encoding(self, values: Sequence[int]) -> list[int]:
        """The SumVec encoding of integers that may lie outside the range: each value x placed
        whole in the first bit of its entry (truncate gives back x; the bit check fails for
        x ∉ {0, 1}), negatives as p − |x|."""
        v = self.vd.vdaf
        bits = self.vd.max_value.bit_length()
        p = v.field.MODULUS
        out: list[int] = []
        for x in values:
            out += [int(x) % p] + [0] * (bits - 1)
        return out


async def upload(client: httpx.AsyncClient, reports: list[Prio3Report], task: str = "sum"
                 ) -> ReportsAccepted:
    r = await client.post(f"/v1/tasks/{task}/prio3-reports",
                          json={"reports": [x.model_dump(exclude_none=True) for x in reports]})
    assert r.status_code == 202, r.text
    return ReportsAccepted.model_validate_json(r.content)


async def acked(client: httpx.AsyncClient, n: int, task: str = "sum") -> bool:
    return (await queue_status(client, task)).batches_acknowledged >= n
