"""A new analyzer Paillier key (its key file lost, the analyzer started with ``--init``): the
shuffler follows it, refuses (drops and counts) every report it holds under the old key before
forming batches under the new one, dissolves batches under the old key instead of retrying them
forever, and never sums ciphertexts under two keys. (The device side, re-fetching the key on
``unknown_key`` and dropping what it holds under the old one, is in the device tests.)"""

from pathlib import Path

import httpx
import pytest

from privbandit.services.shuffler import published as shuffler_keys
from privbandit.services.shuffler.app import create_app as create_shuffler
from privbandit.shared.crypto.keystore import PAILLIER_KEY_FILE
from privbandit.shared.protocol.messages import HpkeConfig
from privbandit.shared.protocol.paillier import EncryptedCounts, PaillierConfig
from privbandit.shared.settings import Settings
from tests.helpers import (
    counted,
    counts_maker,
    error,
    eventually,
    paillier_ready,
    queue_status,
    running,
    upload,
)

from .support import SUM, Recorder, acked, analyzer_app, settings_for, stack


@pytest.fixture(autouse=True)
def refetch_soon(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shuffler_keys, "MIN_REFETCH", 0.05)


async def new_paillier_key(settings: Settings, old_key_id: int) -> None:
    """The analyzer loses its Paillier key file and is started with ``--init``: a new key (with
    another 8-bit key id than the old one, so the test does not depend on a 1/256 chance)."""
    while True:
        (Path(settings.data_dir) / "analyzer" / PAILLIER_KEY_FILE).unlink()
        async with running(analyzer_app(settings, init=True)) as client:
            config = await paillier_config(client)
        if config.key_id != old_key_id:
            return


async def paillier_config(client: httpx.AsyncClient) -> PaillierConfig:
    r = await client.get("/v1/tasks/sum/secure-sum")
    return PaillierConfig.model_validate_json(r.content)


async def refused(client: httpx.AsyncClient, n: int) -> bool:
    return (await queue_status(client, "sum")).refused_stale_key >= n


def body(reports: list[EncryptedCounts]) -> dict:
    return {"reports": [r.model_dump() for r in reports]}


async def test_a_new_key_leaves_no_batch_mixing_keys_and_none_stuck(tmp_path: Path) -> None:
    """Before: the restarted shuffler took the new key, and a batch formed from the 3 reports
    pending under the old key and 7 under the new one could never be summed (retried forever),
    nor could the batch whose sum was stored under the old key be delivered."""
    settings = settings_for(tmp_path)
    rec = Recorder()
    async with stack(settings, rec) as s:
        old = s.config
        make_old = counts_maker(old, s.hpke, seed=1)
        rec.block_posts = True  # the analyzer is unreachable: the first batch stays undelivered
        await upload(s.shuffler, make_old(SUM, 13)[1])
        store = s.shuffler_app.state.runtime.store
        (batch_id,) = store.unacked("sum", 10)
        await eventually(lambda: _has_sum(store, batch_id), what="sum stored")

    await new_paillier_key(settings, old.key_id)
    rec = Recorder()
    async with stack(settings, rec) as s:
        new = s.config
        # The shuffler adopted the new key: the 13 reports it held under the old one (3 pending,
        # 10 in the undelivered batch) can never be counted; they are refused.
        await eventually(lambda: refused(s.shuffler, 13), what="old reports refused")
        q = await s.queue()
        assert (q.accepted, q.pending, q.batches_formed, q.batches_in_flight) == (13, 0, 0, 0)
        # A device still on the old key is told so (and re-fetches the key).
        late = make_old(SUM, 2)[1]
        r = await s.shuffler.post("/v1/tasks/sum/encrypted-counts", json=body(late))
        error(r, 422, "unknown_key")
        rows, fresh = counts_maker(new, s.hpke, seed=2)(SUM, 10)
        await upload(s.shuffler, fresh)
        await eventually(lambda: s.counted(10), what="new batch counted")
        await eventually(lambda: acked(s.shuffler, 1))
        q = await s.queue()
        p = await s.privacy()
        assert (q.accepted, q.refused_stale_key, q.pending) == (23, 13, 0)
        assert (q.batches_formed, q.batches_acknowledged, q.last_error) == (1, 1, None)
        assert q.accepted == p.reports_counted + q.refused_stale_key + q.pending
        s.assert_sblb_of([rows])  # exactly the new reports, nothing of the old key
        assert rec.posts()[-1][1]["key_id"] == new.key_id
        metrics = (await s.shuffler.get("/metrics")).text
        assert 'privbandit_shuffler_reports_refused_stale_key_total{task="sum"} 13.0' in metrics


async def test_a_running_shuffler_follows_the_analyzers_new_key(tmp_path: Path) -> None:
    """Before: the shuffler fetched the key once, at start-up, and refused every report under
    the analyzer's new key until it was restarted."""
    settings = settings_for(tmp_path)
    rec = Recorder()
    first = analyzer_app(settings)
    first_life = running(first)
    first_client = await first_life.__aenter__()
    try:
        rec.inner = httpx.ASGITransport(first)
        async with running(create_shuffler(settings, analyzer_transport=rec)) as shuffler:
            await eventually(lambda: paillier_ready(shuffler), what="shuffler key")
            old = await paillier_config(first_client)
            hpke_json = (await first_client.get("/v1/hpke-config")).content
            hpke = HpkeConfig.model_validate_json(hpke_json)
            await upload(shuffler, counts_maker(old, hpke, seed=3)(SUM, 4)[1])  # pending, old key
            # The analyzer goes down, loses its key and comes back with --init.
            rec.block_gets = rec.block_posts = True
            await first_life.__aexit__(None, None, None)
            first_life = None
            await new_paillier_key(settings, old.key_id)
            second = analyzer_app(settings)
            async with running(second) as second_client:
                rec.inner = httpx.ASGITransport(second)
                rec.block_gets = rec.block_posts = False
                new = await paillier_config(second_client)
                rows, fresh = counts_maker(new, hpke, seed=4)(SUM, 10)
                # A device with the new key: the shuffler does not know it yet, says so and
                # looks again; once it has the new key, the old reports are refused.
                r = await shuffler.post("/v1/tasks/sum/encrypted-counts", json=body(fresh))
                error(r, 422, "unknown_key")
                await eventually(lambda: refused(shuffler, 4), what="old reports refused")
                await upload(shuffler, fresh)
                await eventually(lambda: counted(second_client, "sum", 10), what="counted")
                q = await queue_status(shuffler, "sum")
                assert (q.accepted, q.refused_stale_key, q.pending) == (14, 4, 0)
    finally:
        if first_life is not None:
            await first_life.__aexit__(None, None, None)


async def _has_sum(store: object, batch_id: str) -> bool:
    return bool(store.has_sum(batch_id))  # type: ignore[attr-defined]
