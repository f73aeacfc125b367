"""Issue 13, "one forged report stops a task for good": a well-formed, correctly HPKE-sealed
``ldp`` report whose values are ±1e300 goes through the real shuffler to the real analyzer (both
in-process). It is refused alone when decoded, its batch is acknowledged, the task keeps learning
from the honest reports around it, the model stays finite, and all of it holds after a restart.
And the policy never lets linear algebra fail a batch: an update it cannot compute is skipped,
counted, and exported as a metric."""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from privbandit.services.analyzer.app import create_app as create_analyzer
from privbandit.services.shuffler.app import create_app as create_shuffler
from privbandit.shared.core import confidence
from privbandit.shared.core.policies import randomizer_for
from privbandit.shared.crypto.hpke import pack_report, seal
from privbandit.shared.protocol.messages import (
    BatchAck,
    EncryptedReport,
    HpkeConfig,
    ModelMessage,
    b64decode,
)
from privbandit.shared.settings import Settings
from tests.helpers import (
    auth,
    eventually,
    ldp_task,
    make_settings,
    privacy,
    queue_status,
    report_maker,
    running,
    upload,
)
from tests.services.analyzer.support import batch, hpke_of

LOC = ldp_task()  # ldp-linucb, d = 3, update_every = 2, pass-through (l = 1)


@asynccontextmanager
async def services(settings: Settings) -> Any:
    """The real analyzer and shuffler, the shuffler delivering to the analyzer in-process."""
    analyzer = create_analyzer(settings)
    async with running(analyzer) as a_client:
        shuffler = create_shuffler(settings, analyzer_transport=httpx.ASGITransport(analyzer))
        async with running(shuffler) as s_client:
            yield a_client, s_client


def forged(hpke: HpkeConfig, value: float) -> EncryptedReport:
    """A correctly sealed ``ldp`` report whose every value is ``value``: the right length and
    key, finite, and nothing any Gaussian report could be."""
    width = randomizer_for(LOC.policy).width
    row = np.full(width, value).astype("<f8").tobytes()
    return seal(b64decode(hpke.public_key), hpke.key_id, LOC.id, pack_report(row)[1])


async def settled(s_client: httpx.AsyncClient, batches: int) -> bool:
    q = await queue_status(s_client, LOC.id)
    return q.batches_acknowledged >= batches and q.batches_in_flight == 0


async def model(client: httpx.AsyncClient) -> ModelMessage:
    return ModelMessage.model_validate_json((await client.get(f"/v1/tasks/{LOC.id}/model")).content)


def assert_sane(m: ModelMessage) -> None:
    values = np.array([*m.theta, *np.ravel(m.V), m.beta])
    assert np.isfinite(values).all() and np.abs(values).max() < 1e6, m


async def test_a_forged_ldp_report_of_1e300_is_refused_alone_and_the_task_keeps_learning(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path / "data", tasks=[LOC])
    async with services(settings) as (a_client, s_client):
        hpke = await hpke_of(a_client)
        make = report_maker(hpke, seed=13)
        # Honest reports around the two forged ones (each is a batch of its own: l = 1).
        await upload(s_client, make(LOC, 3), LOC.id)
        await upload(s_client, [forged(hpke, 1e300)], LOC.id)
        await upload(s_client, make(LOC, 3), LOC.id)
        await upload(s_client, [forged(hpke, -1e300)], LOC.id)
        await upload(s_client, make(LOC, 2), LOC.id)
        await eventually(lambda: settled(s_client, 10), what="every batch acknowledged")
        q = await queue_status(s_client, LOC.id)
        assert (q.accepted, q.pending, q.batches_formed, q.last_error) == (10, 0, 10, None)
        p = await privacy(a_client, LOC.id)
        assert (p.reports_counted, p.reports_refused, p.batches) == (8, 2, 10)
        assert q.accepted == p.reports_counted + p.reports_refused + q.pending
        # update_every = 2: the eight honest reports published four models.
        assert p.model_version == 4
        before = await model(a_client)
        assert_sane(before)
        metrics = (await a_client.get("/metrics")).text
        assert f'privbandit_analyzer_reports_rejected_total{{task="{LOC.id}"}} 2.0' in metrics
        # Posted to the analyzer directly, a forged report is rejected alone in its batch.
        r = await a_client.post(f"/v1/tasks/{LOC.id}/batches",
                                json=batch([forged(hpke, 1e300)]), headers=auth())
        ack = BatchAck.model_validate_json(r.content)
        assert (ack.counted, ack.rejected, ack.quarantined) == (0, 1, False)

    # After a restart: the same finite model, and the task goes on learning.
    async with services(settings) as (a_client, s_client):
        assert await model(a_client) == before
        await upload(s_client, make(LOC, 2), LOC.id)
        await eventually(lambda: settled(s_client, 12), what="two more batches")
        p = await privacy(a_client, LOC.id)
        assert (p.reports_counted, p.reports_refused, p.model_version) == (10, 3, 5)
        assert_sane(await model(a_client))


async def test_an_update_the_policy_cannot_solve_is_skipped_with_a_metric(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the ridge solve fails even after the eigenvalue repair, the batch is still counted and
    acknowledged, the published model stays, ``updates_skipped`` counts it, and the next update
    goes through."""
    settings = make_settings(tmp_path / "data", tasks=[LOC])
    async with running(create_analyzer(settings)) as client:
        make = report_maker(await hpke_of(client), seed=14)

        async def post(n: int) -> list[BatchAck]:
            acks = []
            for rep in make(LOC, n):
                r = await client.post(f"/v1/tasks/{LOC.id}/batches", json=batch([rep]),
                                      headers=auth())
                assert r.status_code == 200, r.text
                acks.append(BatchAck.model_validate_json(r.content))
            return acks

        await post(2)
        assert (await model(client)).version == 1

        def unsolvable(*args: object, **kwargs: object) -> None:
            raise np.linalg.LinAlgError("singular")

        monkeypatch.setattr(confidence, "ridge_solve", unsolvable)
        acks = await post(2)
        assert [a.counted for a in acks] == [1, 1]
        p = await privacy(client, LOC.id)
        assert (p.reports_counted, p.model_version) == (4, 1)
        metrics = (await client.get("/metrics")).text
        assert f'privbandit_analyzer_updates_skipped_total{{task="{LOC.id}"}} 1.0' in metrics
        monkeypatch.undo()
        await post(2)
        assert (await privacy(client, LOC.id)).model_version == 2
        assert_sane(await model(client))
