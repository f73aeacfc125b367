"""The ingest pipeline of a secure-sum task, called on one group directly (the group committer
would form such groups under load): a refused sum is refused alone, changes no state and does
not claim its batch id; a failed commit restores the policy."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from services.analyzer.app import create_app
from services.analyzer.errors import SlotOutOfRange
from services.analyzer.ingest import IngestPipeline
from shared.protocol.messages import BatchAck
from shared.protocol.secure_sum import PaillierConfig
from tests.helpers import (
    PAILLIER_TEST_BITS,
    counts_maker,
    make_settings,
    privacy,
    running,
    secure_sum_task,
)
from tests.services.analyzer.support import batch_sum, out_of_range_sum

SUM = secure_sum_task("sum", l=10)


async def test_a_refused_sum_is_refused_alone_and_claims_no_batch_id(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path / "data", tasks=[SUM]),
                     paillier_key_bits=PAILLIER_TEST_BITS)
    async with running(app) as client:
        r = await client.get("/v1/tasks/sum/secure-sum")
        config = PaillierConfig.model_validate_json(r.content)
        make = counts_maker(config, seed=4)
        runtime = app.state.runtime
        rt = runtime.tasks["sum"]
        decoder = rt.decoder
        good = decoder.accept(batch_sum(config, make(SUM, 10)[1]))
        # The refused sum and the honest one after it share a batch id: a refusal does not
        # claim it, so the honest sum under it is counted in the same group.
        refused = decoder.accept(out_of_range_sum(config))
        honest = decoder.accept(batch_sum(config, make(SUM, 10)[1], refused.batch_id))
        pipeline = IngestPipeline(rt, runtime.store, runtime.metrics)
        before = rt.policy.get_state()
        outcomes = await asyncio.to_thread(pipeline, [good, refused, good, honest])
        assert isinstance(outcomes[1], SlotOutOfRange)
        acks = [o for o in outcomes if isinstance(o, BatchAck)]
        assert [(a.replayed, a.counted) for a in acks] == [(False, 10), (True, 0), (False, 10)]
        assert runtime.store.processed_batches("sum", [good.batch_id, refused.batch_id]) == {
            good.batch_id, refused.batch_id}
        assert rt.reports_counted == 20 and rt.batches == 2
        assert (await privacy(client, "sum")).reports_counted == 20
        assert rt.policy.get_state() != before

        # A group whose commit fails leaves memory and disk as they were.
        state = rt.policy.get_state()

        def disk_full(*args: object, **kwargs: object) -> None:
            raise OSError("disk full")

        runtime.store.commit_batches = disk_full
        lone = decoder.accept(batch_sum(config, make(SUM, 10)[1]))
        with pytest.raises(OSError, match="disk full"):
            await asyncio.to_thread(pipeline, [decoder.accept(out_of_range_sum(config)), lone])
        del runtime.store.commit_batches
        assert rt.policy.get_state() == state and rt.reports_counted == 20
        assert runtime.store.processed_batches("sum", [lone.batch_id]) == set()
