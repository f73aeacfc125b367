"""The prio3 transport through the real services, in-process: devices' Prio3 reports →
shuffler (checked, durable, batched; leader) → one verification exchange per batch with the
analyzer (helper) → the leader's aggregate share over the valid reports → analyzer (unshards
the batch sum, feeds SBLB). The analyzer's state equals SBLB fed the plaintext rows."""

import asyncio
from pathlib import Path

import numpy as np

from privbandit.shared.protocol.prio3 import (
    Prio3Aggregate,
    Prio3VerifyRequest,
    Prio3VerifyResponse,
)
from tests.helpers import assert_same_state, eventually, reference_state

from .support import SUM, Maker, acked, settings_for, stack, upload


async def test_reports_verified_and_summed_equal_plaintext_sblb(tmp_path: Path) -> None:
    async with stack(settings_for(tmp_path)) as s:
        make = Maker(SUM, s.hpke, seed=1)
        batches = []
        for k in (1, 2):
            rows, reports = make.honest(10)
            done = await asyncio.gather(upload(s.shuffler, reports[:5]),
                                        *(upload(s.shuffler, [r]) for r in reports[5:]))
            assert sum(d.accepted for d in done) == 10
            batches.append(rows)
            await eventually(lambda k=k: acked(s.shuffler, k))
        p = await s.privacy()
        assert (p.reports_counted, p.reports_refused, p.batches) == (20, 0, 2)
        assert_same_state(s.analyzer_app.state.runtime.tasks["sum"].policy.get_state(),
                          reference_state(SUM, batches))
        # Per batch: ONE verification exchange, then one aggregate; no leader share ever
        # leaves the shuffler, and the aggregate carries no per-report share.
        posts = s.recorder.posts()
        paths = [p for p, _ in posts]
        assert paths == ["/v1/tasks/sum/prio3-verify", "/v1/tasks/sum/prio3-aggregates"] * 2
        for path, body in posts:
            if path.endswith("prio3-verify"):
                req = Prio3VerifyRequest.model_validate(body)
                assert len(req.reports) == 10
                assert all("leader_share" not in item for item in body["reports"])
            else:
                agg = Prio3Aggregate.model_validate(body)
                assert (agg.count, len(agg.accepted)) == (10, 10)
        # The same nonces counted: a replay of a whole report is a duplicate at intake.
        dup = await upload(s.shuffler, [reports[0]])
        assert (dup.accepted, dup.duplicates) == (0, 1)


async def test_verification_refuses_a_counted_nonce_and_needs_the_token(tmp_path: Path) -> None:
    """The analyzer alone refuses a nonce it counted (a shuffler that forgot it, e.g. a fresh
    store), and answers verification only to the shuffler."""
    async with stack(settings_for(tmp_path)) as s:
        make = Maker(SUM, s.hpke, seed=2)
        _, reports = make.honest(10)
        await upload(s.shuffler, reports)
        await eventually(lambda: acked(s.shuffler, 1))
        verify = next(b for p, b in s.recorder.posts() if p.endswith("prio3-verify"))
        r = await s.analyzer.post("/v1/tasks/sum/prio3-verify", json=verify)
        assert r.status_code == 401
        from tests.helpers import auth

        r = await s.analyzer.post("/v1/tasks/sum/prio3-verify", json=verify, headers=auth())
        assert r.status_code == 200, r.text
        answer = Prio3VerifyResponse.model_validate_json(r.content)
        assert [v.refused for v in answer.verdicts] == ["replayed_nonce"] * 10
        p = await s.privacy()
        assert (p.reports_counted, p.reports_refused) == (10, 0)
        assert np.isfinite(p.model_version)


async def test_the_secure_sum_route_answers_a_prio3_tasks_parameters(tmp_path: Path) -> None:
    """``GET /v1/tasks/{task}/secure-sum`` of a prio3 task (sblb: SumVec; ddp-linucb with the
    aggregators' noise: SumVecRanges) answers the parameters the task's VDAF is built from, so
    a device that builds Prio3 from them shards exactly as the shuffler and analyzer verify."""
    from privbandit.shared.crypto.prio3_task import sum_vec, sum_vec_ranges, task_vdaf
    from privbandit.shared.protocol.prio3 import Prio3Config

    from .support import ddp_prio3_task

    ddp = ddp_prio3_task(l=10)
    async with stack(settings_for(tmp_path, tasks=[SUM, ddp])) as s:
        for task, vdaf in ((SUM, "Prio3SumVec"), (ddp, "Prio3SumVecRanges")):
            resp = await s.analyzer.get(f"/v1/tasks/{task.id}/secure-sum")
            assert resp.status_code == 200, resp.text
            got = Prio3Config.model_validate_json(resp.content)
            want = task_vdaf(task)
            assert (got.task, got.vdaf, got.length, got.offsets, got.noise_variance) == (
                task.id, vdaf, want.length, want.entry_offsets, want.noise_variance)
            built = (sum_vec(got.length, got.max_value) if got.max_values is None
                     else sum_vec_ranges(tuple(got.max_values)))
            assert built is want.vdaf  # the same (cached) Prio3 instance: same parameters
            assert got.chunk_length == built.flp.valid.chunk_length  # type: ignore[attr-defined]
            assert got.endpoint == f"/v1/tasks/{task.id}/prio3-reports"
        assert (await s.analyzer.get("/v1/paillier-config")).status_code == 404
