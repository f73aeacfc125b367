"""The ingest pipeline of a secure-sum task, called on one group directly (the group committer
would form such groups under load): a sum out of range is quarantined alone — acknowledged,
its batch id claimed, no state change — and the rest of the group is counted; a failed commit
restores the policy."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from privbandit.services.analyzer.app import create_app
from privbandit.services.analyzer.ingest import IngestPipeline
from privbandit.shared.protocol.messages import BatchAck, HpkeConfig
from privbandit.shared.protocol.paillier import PaillierConfig
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


async def test_a_sum_out_of_range_is_quarantined_alone_and_claims_its_batch_id(
    tmp_path: Path,
) -> None:
    app = create_app(make_settings(tmp_path / "data", tasks=[SUM]),
                     paillier_key_bits=PAILLIER_TEST_BITS)
    async with running(app) as client:
        r = await client.get("/v1/tasks/sum/secure-sum")
        config = PaillierConfig.model_validate_json(r.content)
        hpke = HpkeConfig.model_validate_json((await client.get("/v1/hpke-config")).content)
        make = counts_maker(config, hpke, seed=4)
        runtime = app.state.runtime
        rt = runtime.tasks["sum"]
        decoder = rt.decoder
        good = decoder.accept(batch_sum(config, make(SUM, 10)[1]))
        # The quarantined sum and an honest one after it share a batch id: the quarantine
        # claims it (re-delivery is a replay), so the honest sum under it is not counted.
        bad = decoder.accept(out_of_range_sum(config, hpke, "sum"))
        honest = decoder.accept(batch_sum(config, make(SUM, 10)[1], bad.batch_id))
        later = decoder.accept(batch_sum(config, make(SUM, 10)[1]))
        pipeline = IngestPipeline(rt, runtime.store, runtime.metrics)
        before = rt.policy.get_state()
        acks = await asyncio.to_thread(pipeline, [good, bad, good, honest, later])
        assert all(isinstance(a, BatchAck) for a in acks)
        assert [(a.replayed, a.counted, a.rejected, a.quarantined) for a in acks] == [
            (False, 10, 0, False), (False, 0, 10, True), (True, 0, 0, False),
            (True, 0, 0, False), (False, 10, 0, False)]
        assert runtime.store.processed_batches("sum", [good.batch_id, bad.batch_id]) == {
            good.batch_id, bad.batch_id}
        assert rt.reports_counted == 20 and rt.batches == 3 and rt.quarantined == 10
        p = await privacy(client, "sum")
        assert (p.reports_counted, p.reports_refused, p.batches) == (20, 10, 3)
        assert rt.policy.get_state() != before
        # The counted batches' report ids are recorded, the quarantined one's are not.
        assert len(runtime.store.known_report_ids("sum", list(decoder.decode(good).report_ids))) \
            == 10

        # A group whose commit fails leaves memory and disk as they were.
        state = rt.policy.get_state()

        def disk_full(*args: object, **kwargs: object) -> None:
            raise OSError("disk full")

        runtime.store.commit_batches = disk_full
        lone = decoder.accept(batch_sum(config, make(SUM, 10)[1]))
        with pytest.raises(OSError, match="disk full"):
            await asyncio.to_thread(
                pipeline, [decoder.accept(out_of_range_sum(config, hpke, "sum")), lone])
        del runtime.store.commit_batches
        assert rt.policy.get_state() == state and rt.reports_counted == 20
        assert rt.quarantined == 10
        assert runtime.store.processed_batches("sum", [lone.batch_id]) == set()
