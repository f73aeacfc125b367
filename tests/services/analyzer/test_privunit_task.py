"""An ``ldp-linucb`` task with ``mechanism = "privunit"`` (issue 44 item 5) through the real
analyzer: the device's PrivUnit reports are counted and publish models, a report off PrivUnit's
sphere (a Gaussian-looking row of the right length) is refused alone, and the privacy endpoint
states pure ε (δ = 0)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from privbandit.services.analyzer.app import create_app as create_analyzer
from privbandit.shared.core.policies import randomizer_for
from privbandit.shared.crypto.hpke import pack_report, seal
from privbandit.shared.protocol.messages import BatchAck, b64decode
from privbandit.shared.settings import TaskConfig
from tests.helpers import auth, make_settings, privacy, report_maker, running
from tests.services.analyzer.support import batch, hpke_of

TASK = TaskConfig.model_validate({
    "id": "pu", "threat_model": "ldp", "K": 4,
    "policy": {"algo": "ldp-linucb", "d": 3, "update_every": 2, "regularizer": "clip",
               "mechanism": "privunit"},
})


async def test_privunit_reports_are_counted_and_off_sphere_rows_refused(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", tasks=[TASK])
    async with running(create_analyzer(settings)) as client:
        hpke = await hpke_of(client)
        for rep in report_maker(hpke, seed=5)(TASK, 4):  # batches of l = 1
            r = await client.post(f"/v1/tasks/{TASK.id}/batches", json=batch([rep]),
                                  headers=auth())
            ack = BatchAck.model_validate_json(r.content)
            assert (ack.counted, ack.rejected) == (1, 0), r.text
        rand = randomizer_for(TASK.policy)
        row = np.full(rand.width, 0.1)  # finite, the right length, not on the sphere r/m
        forged = seal(b64decode(hpke.public_key), hpke.key_id, TASK.id,
                      pack_report(row.astype("<f8").tobytes())[1])
        r = await client.post(f"/v1/tasks/{TASK.id}/batches", json=batch([forged]),
                              headers=auth())
        ack = BatchAck.model_validate_json(r.content)
        assert (ack.counted, ack.rejected) == (0, 1)
        p = await privacy(client, TASK.id)
        assert (p.reports_counted, p.reports_refused, p.model_version) == (4, 1, 2)
        assert p.ledger.ldp_epsilon == 1.0 and p.ledger.ldp_delta == 0.0
