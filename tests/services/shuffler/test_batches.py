"""Batch formation: exactly l reports in an order from the CSPRNG, never fewer, pass-through
tasks of one; and the shuffler holds nothing that could decrypt them."""

from __future__ import annotations

import asyncio
from pathlib import Path

from privbandit.shared.crypto.keystore import HpkeKeyStore
from tests.helpers import TOKEN, eventually, queue_status, report_maker, running, upload

from .support import BIG, LOC, SHUF, FakeAnalyzer, acked, settings_for, shuffler_app


async def test_batches_are_exactly_l_in_random_order(tmp_path: Path, keys: HpkeKeyStore) -> None:
    fake = FakeAnalyzer(keys)
    app = shuffler_app(settings_for(tmp_path), fake)
    async with running(app) as client:
        make = report_maker(keys.hpke_config())
        arrivals = make(BIG, 47)
        for rep in arrivals:  # one upload each: arrival order is the list order
            await upload(client, [rep], task="big")
        await eventually(lambda: acked(client, "big", 2))
        s = await queue_status(client, "big")
        assert (s.batches_formed, s.batches_acknowledged, s.pending, s.accepted) == (2, 2, 7, 47)
        assert s.batches_in_flight == 0 and s.last_error is None
        batches = fake.batches("big")
        assert len(batches) == 2 and len({b.batch_id for b in batches}) == 2
        for k, got in enumerate(batches):
            members = arrivals[20 * k : 20 * (k + 1)]
            # The l oldest pending reports, permuted: same multiset, not arrival order
            # (the identity has probability 1/20!).
            assert sorted(r.ct for r in got.reports) == sorted(r.ct for r in members)
            assert [r.ct for r in got.reports] != [r.ct for r in members]
        # Only the batch id and the ciphertexts travel; the bearer token authenticates.
        for _task, headers, raw in fake.deliveries:
            assert set(raw) == {"batch_id", "reports"}
            assert all(set(r) == {"key_id", "enc", "ct"} for r in raw["reports"])
            assert headers["authorization"] == f"Bearer {TOKEN}"
        # Nothing is stored of an acknowledged batch but its id.
        store = app.state.runtime.store
        assert all(store.batch_members(b.batch_id) == 0 for b in batches)


async def test_never_a_batch_below_l(tmp_path: Path, keys: HpkeKeyStore) -> None:
    fake = FakeAnalyzer(keys)
    settings = settings_for(tmp_path)
    make = report_maker(keys.hpke_config())
    async with running(shuffler_app(settings, fake)) as client:
        await upload(client, make(SHUF, 4))
        await asyncio.sleep(0.1)
        s = await queue_status(client, "shuf")
        assert (s.pending, s.batches_formed) == (4, 0) and fake.deliveries == []
    async with running(shuffler_app(settings, fake)) as client:
        assert (await queue_status(client, "shuf")).pending == 4  # durable across a restart
        await upload(client, make(SHUF, 1))
        await eventually(lambda: acked(client, "shuf", 1))
        assert len(fake.batches("shuf")) == 1 and len(fake.batches("shuf")[0].reports) == 5


async def test_pass_through_task_forwards_batches_of_one(
    tmp_path: Path, keys: HpkeKeyStore
) -> None:
    fake = FakeAnalyzer(keys)
    app = shuffler_app(settings_for(tmp_path), fake)
    async with running(app) as client:
        make = report_maker(keys.hpke_config())
        await upload(client, make(LOC, 3), task="loc")
        await eventually(lambda: acked(client, "loc", 3))
        assert [len(b.reports) for b in fake.batches("loc")] == [1, 1, 1]
        assert (await queue_status(client, "loc")).pending == 0


def test_shuffler_holds_no_decryption_capability() -> None:
    """The shuffler's code never touches the HPKE private key or the decryption function."""
    source = "\n".join(
        p.read_text() for p in (Path(__file__).parents[3] / "services" / "shuffler").glob("*.py")
    )
    for name in ("HpkeKeyStore", "open_report", "private_key", "X25519PrivateKey"):
        assert name not in source
