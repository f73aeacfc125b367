"""The prio3 exchange across lost answers, and the analyzer's refusal of an aggregate that does
not match what it verified: nothing lost, nothing counted twice, a lie changes nothing."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from privbandit.shared.protocol.prio3 import Prio3Aggregate
from tests.helpers import auth, error, eventually
from tests.services.paillier.support import Recorder

from .support import SUM, Maker, acked, settings_for, stack, upload


class LoseFirst(Recorder):
    """Loses the analyzer's answer to the first POST to ``suffix``, after it was processed."""

    def __init__(self, suffix: str) -> None:
        super().__init__()
        self.suffix = suffix
        self.lost = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith(self.suffix) and not self.lost:
            self.lost += 1
            self.lose_acks = 1
        return await super().handle_async_request(request)


@asynccontextmanager
async def one_batch_losing(tmp_path: Path, suffix: str, seed: int) -> AsyncIterator[LoseFirst]:
    """Ten honest reports (``Maker`` seeded ``seed``) through a stack that loses the analyzer's
    answer to the first POST to ``suffix``, once acknowledged: the analyzer's counts are those
    of one batch (10 counted, none refused). Yields the recorder with the stack still up."""
    rec = LoseFirst(suffix)
    async with stack(settings_for(tmp_path), rec) as s:
        _, reports = Maker(SUM, s.hpke, seed=seed).honest(10)
        await upload(s.shuffler, reports)
        await eventually(lambda: acked(s.shuffler, 1))
        p = await s.privacy()
        assert (p.reports_counted, p.reports_refused, p.batches) == (10, 0, 1)
        yield rec


async def test_a_lost_aggregate_ack_counts_the_batch_once(tmp_path: Path) -> None:
    """The analyzer counted the batch, its answer was lost: the shuffler verifies again (every
    nonce is now refused as counted), re-posts under the same batch id, and is told
    ``replayed``; the analyzer's counts are those of one batch."""
    async with one_batch_losing(tmp_path, "prio3-aggregates", seed=3) as rec:
        aggregates = [b for path, b in rec.posts() if path.endswith("prio3-aggregates")]
        assert len(aggregates) == 2 and rec.lost == 1
        assert aggregates[0]["batch_id"] == aggregates[1]["batch_id"]
        assert (len(aggregates[0]["accepted"]), len(aggregates[1]["accepted"])) == (10, 0)


async def test_a_lost_verification_answer_is_verified_again(tmp_path: Path) -> None:
    async with one_batch_losing(tmp_path, "prio3-verify", seed=4) as rec:
        paths = [path.rsplit("/", 1)[1] for path, _ in rec.posts()]
        assert paths == ["prio3-verify", "prio3-verify", "prio3-aggregates"]


async def test_an_aggregate_that_differs_from_the_verification_is_refused(
        tmp_path: Path) -> None:
    """A shuffler that claims a refused report as accepted, drops an accepted one, or replays
    the continuation under another batch id gets 422 ``bad_continuation``; nothing is counted
    and the honest aggregate is still taken afterwards."""
    rec = Recorder()
    async with stack(settings_for(tmp_path), rec) as s:
        make = Maker(SUM, s.hpke, seed=5)
        _, honest = make.honest(9)
        forged = make.forged(make.value_encoding([20] * make.vd.length))
        # The shuffler's honest aggregate of the batch (recorded), then lies made from it.
        await upload(s.shuffler, [*honest, forged])
        await eventually(lambda: acked(s.shuffler, 1))
        body: dict[str, Any] = next(b for path, b in rec.posts()
                                    if path.endswith("prio3-aggregates"))
        agg = Prio3Aggregate.model_validate(body)
        assert len(agg.accepted) == 9
        lies = [
            {**body, "accepted": [*body["accepted"], forged.nonce]},  # the forgery "valid"
            {**body, "accepted": body["accepted"][1:]},  # one valid report dropped
            {**body, "batch_id": "ab" * 16},  # the continuation under another batch id
        ]
        for lie in lies:
            r = await s.analyzer.post("/v1/tasks/sum/prio3-aggregates", json=lie,
                                      headers=auth())
            error(r, 422, "bad_continuation")
        p = await s.privacy()
        assert (p.reports_counted, p.reports_refused, p.batches) == (9, 1, 1)
