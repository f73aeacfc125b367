"""Batch schedules in the shuffler store (issue 22): batch k holds exactly l_k reports, in order,
across a restart and across two PostgreSQL replicas forming batches at once; a report whose
noise share is sized for a longer batch than the task's next one is refused alone."""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import psycopg
import pytest

import tests.helpers as helpers
from privbandit.services.shuffler.store import ShufflerStore, Store, Upload
from privbandit.shared.core.policies import build_policy, make_config
from privbandit.shared.core.schedule import BatchSchedule
from privbandit.shared.protocol.messages import EncryptedReport, b64encode
from privbandit.shared.protocol.paillier import EncryptedCounts

SCHEDULE = BatchSchedule.parse("geometric:3,2,12")  # 3, 6, 12, 12, …


def counts(n: int, sized_for: int | None = None) -> list[EncryptedCounts]:
    """n distinct stand-ins for secure-sum reports (the store does not read ciphertexts)."""
    tag = EncryptedReport(key_id=0, enc=b64encode(bytes(32)), ct=b64encode(bytes(64)))
    return [EncryptedCounts(key_id=1, ct=b64encode(secrets.token_bytes(32)), batch_size=sized_for,
                            tag=tag.model_copy(update={"ct": b64encode(secrets.token_bytes(64))}))
            for _ in range(n)]


def open_store(backend: str, tmp_path: Path, *, poll: float = 3600) -> Store:
    """The backend the ``store`` fixture chose (PostgreSQL without its background sweep unless
    ``poll`` says otherwise)."""
    if backend == "sqlite":
        return ShufflerStore(tmp_path / "shuffler.sqlite3", {"sum": SCHEDULE})
    from privbandit.services.shuffler.store.postgres import PgShufflerStore

    return PgShufflerStore(helpers.STORES["shuffler"], {"sum": SCHEDULE}, poll=poll)


def batch_sizes(store: Store) -> list[int]:
    """The lengths of the task's unacknowledged batches, in formation order."""
    out = []
    for batch_id in store.unacked("sum", 1000):
        batch = store.load_secure_batch(batch_id)
        assert batch is not None
        assert batch.size == len(batch.members)
        out.append(batch.size)
    return out


def test_batches_follow_the_schedule_in_order_and_across_a_restart(
    tmp_path: Path, store: str
) -> None:
    shuffler = open_store(store, tmp_path)
    try:
        # 2 reports: nothing; the 3rd fills batch 0 (l₀ = 3); 8 more: batch 1 (6) and 2 left.
        assert shuffler.accept([Upload("sum", counts(2))])[1] == {}
        assert shuffler.accept([Upload("sum", counts(1))])[1] == {"sum": 1}
        assert shuffler.accept([Upload("sum", counts(8))])[1] == {"sum": 1}
        assert batch_sizes(shuffler) == [3, 6]
        c = shuffler.counts("sum")
        assert (c.pending, c.batches_formed, c.next_batch) == (2, 2, 2)
        first = shuffler.unacked("sum", 1)[0]
        assert shuffler.acknowledge(first)
    finally:
        shuffler.close()
    shuffler = open_store(store, tmp_path)  # a restart: the index comes from the database
    try:
        assert shuffler.counts("sum").next_batch == 2
        # 9 more (11 pending): batch 2 is 12 long, not 3 (a restarted count) nor 6.
        assert shuffler.accept([Upload("sum", counts(9))])[1] == {}
        assert shuffler.accept([Upload("sum", counts(1 + 12 + 5))])[1] == {"sum": 2}
        assert batch_sizes(shuffler) == [6, 12, 12]
        c = shuffler.counts("sum")
        assert (c.pending, c.batches_formed, c.next_batch, c.accepted) == (5, 4, 4, 38)
    finally:
        shuffler.close()


def test_a_share_sized_for_a_longer_batch_than_the_next_is_refused_alone(
    tmp_path: Path, store: str
) -> None:
    shuffler = open_store(store, tmp_path)
    try:
        # Next batch: l₀ = 3. A report sized for 6 would carry too little noise in it.
        upload = [*counts(1, sized_for=3), *counts(1, sized_for=6), *counts(1)]
        (result,), formed = shuffler.accept([Upload("sum", upload)])
        assert (result.accepted, result.duplicates, result.refused) == (2, 0, 1)
        assert formed == {}
        # The refused one left no trace: sent again, it is refused again, not a duplicate.
        (again,), _ = shuffler.accept([Upload("sum", [upload[1]])])
        assert (again.accepted, again.duplicates, again.refused) == (0, 0, 1)
        # Sized for a shorter batch (an older model): over-noised, accepted.
        (ok,), formed = shuffler.accept([Upload("sum", counts(1, sized_for=3))])
        assert ok.accepted == 1 and formed == {"sum": 1}
        # Batch 1 is 6 long: a share sized for 6 is now enough, one sized for 12 is not.
        (result,), _ = shuffler.accept([Upload("sum", [*counts(2, 6), *counts(1, 12)])])
        assert (result.accepted, result.refused) == (2, 1)
        c = shuffler.counts("sum")
        assert (c.accepted, c.refused_oversized, c.pending, c.next_batch) == (5, 3, 2, 1)
    finally:
        shuffler.close()


@pytest.mark.postgres_only(reason="replicas share one PostgreSQL database; a SQLite file has "
                           "one shuffler")
def test_two_postgres_replicas_agree_on_every_batch_length(tmp_path: Path, store: str) -> None:
    replicas = [open_store(store, tmp_path, poll=0.05) for _ in range(2)]
    uploads = [counts(1) for _ in range(2 * 90)]  # 180 reports: 3+6+12×14 = 177, 3 pending
    errors: list[BaseException] = []

    def upload(shuffler: Store, mine: list[list[EncryptedCounts]]) -> None:
        try:
            for reports in mine:
                shuffler.accept([Upload("sum", reports)])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=upload, args=(r, uploads[i::2]))
               for i, r in enumerate(replicas)]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors
        end = helpers.deadline(10)  # each replica's sweep forms what the others filled
        while replicas[0].counts("sum").pending != 3:
            assert time.monotonic() < end, "the last full batch was never formed"
            time.sleep(0.05)
        sizes: dict[int, int] = {}
        members: list[bytes] = []
        with psycopg.connect(helpers.STORES["shuffler"]) as conn:
            for idx, size, batch_id in conn.execute(
                    "SELECT idx, size, batch_id FROM shuffler_batches WHERE task = 'sum'"):
                assert idx not in sizes, f"two batches with index {idx}"
                sizes[idx] = size
                members += [bytes(ct) for (ct,) in conn.execute(
                    "SELECT ct FROM shuffler_batch_reports WHERE batch_id = %s", (batch_id,))]
        assert sorted(sizes) == list(range(16))
        assert all(sizes[k] == SCHEDULE.size(k) for k in sizes), sizes
        assert len(members) == len(set(members)) == 177  # no report in two batches
        c = replicas[1].counts("sum")
        assert (c.accepted, c.batches_formed, c.next_batch) == (180, 16, 16)
    finally:
        for r in replicas:
            r.close()


def test_a_report_never_lands_in_a_batch_shorter_than_its_share_is_sized_for(
    tmp_path: Path, store: str
) -> None:
    """The invariant of ``policies.ddp_linucb`` with the services' delays, on the real store and
    the real policy: devices size their share from the length announced with a model they hold —
    any model published so far, however old — and upload in any order, late; the shuffler forms
    batches of l_k; the analyzer ingests them one at a time, behind. No honest report is ever
    refused, and every report lands in a batch at least as long as the one its share is sized
    for (so the batch's honest shares add at least the μ its (ε, δ) needs)."""
    rng = np.random.default_rng(11)
    config = make_config("ddp-linucb", d=2, batch_schedule="geometric:5,2,40")
    schedule = config.schedule
    analyzer = build_policy(config, np.random.default_rng(12))
    if store == "sqlite":
        shuffler: Store = ShufflerStore(tmp_path / "s.sqlite3", {"ddp": schedule})
    else:
        from privbandit.services.shuffler.store.postgres import PgShufflerStore

        shuffler = PgShufflerStore(helpers.STORES["shuffler"], {"ddp": schedule}, poll=3600)
    models = [analyzer.model]
    outbox: list[EncryptedCounts] = []
    rows: dict[str, np.ndarray] = {}  # ciphertext → the report's randomized statistics
    sized: dict[str, int] = {}
    checked = refused = 0
    try:
        for _ in range(600):
            event = rng.random()
            if event < 0.6:  # a user decides with some model it holds and reports
                model = models[int(rng.integers(len(models)))]
                size = model.batch_size or schedule.size(0)
                x = rng.normal(size=(1, 2))
                x /= max(1.0, float(np.linalg.norm(x)))
                (report,) = counts(1, sized_for=size)
                rows[report.ct] = analyzer.randomizer_for(size).randomize(x, rng.random(1), rng)[0]
                sized[report.ct] = size
                outbox.append(report)
            elif event < 0.85 and outbox:  # some reports reach the shuffler, in any order
                rng.shuffle(outbox)  # type: ignore[arg-type]  # a list shuffles in place
                take, outbox[:] = outbox[:3], outbox[3:]
                (result,), _ = shuffler.accept([Upload("ddp", take)])
                refused += result.refused
            elif ids := shuffler.unacked("ddp", 1):  # the analyzer ingests the oldest batch
                batch = shuffler.load_secure_batch(ids[0])
                assert batch is not None
                members = [b64encode(ct) for _, ct, _ in batch.members]
                assert all(sized[ct] <= batch.size for ct in members), (
                    batch.size, sorted(sized[ct] for ct in members))
                checked += len(members)
                analyzer.ingest_statistic(sum(rows[ct] for ct in members), len(members))
                if analyzer.model.version != models[-1].version:
                    models.append(analyzer.model)
                assert shuffler.acknowledge(ids[0])
        assert refused == 0
        # The schedule was crossed to its cap, and old models were used throughout.
        assert analyzer.batch_size == schedule.max_size and checked > 300
        announced = {m.batch_size or schedule.size(0) for m in models}
        assert sorted(announced) == schedule.distinct_sizes()
    finally:
        shuffler.close()


def test_a_store_started_afresh_catches_up_with_the_analyzers_announced_length(
    tmp_path: Path, store: str
) -> None:
    """A shuffler store started afresh (``--init``) beside an analyzer that kept its state: the
    devices' shares are sized for the analyzer's announced length, longer than batch 0's, so
    every report is refused — until the shuffler reads the announcement
    (``services.shuffler.schedule``) and skips to the first batch at least that long. A
    device's report never moves the schedule."""
    shuffler = open_store(store, tmp_path)
    try:
        (result,), _ = shuffler.accept([Upload("sum", counts(3, sized_for=12))])
        assert (result.accepted, result.refused) == (0, 3)
        assert shuffler.counts("sum").next_batch == 0  # refusals do not move it
        assert shuffler.catch_up("sum", 12) == 2  # 3, 6, [12]
        assert shuffler.catch_up("sum", 6) == 2  # never back
        (result,), formed = shuffler.accept([Upload("sum", counts(12, sized_for=12))])
        assert (result.accepted, result.refused, formed) == (12, 0, {"sum": 1})
        assert batch_sizes(shuffler) == [12]
        assert shuffler.catch_up("sum", 10**6) == 3  # beyond the cap: the next cap-long batch
    finally:
        shuffler.close()


async def test_the_shuffler_reads_the_announced_length_from_the_analyzers_model(
    tmp_path: Path, store: str
) -> None:
    from privbandit.services.shuffler.schedule import ScheduleCatchUp
    from privbandit.shared.settings import Settings

    announced: dict[str, object] = {"batch_size": None}

    def analyzer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/tasks/sum/model"
        return httpx.Response(200, json={"version": 3, **announced})

    settings = Settings.model_validate({"tasks": [{
        "id": "sum", "threat_model": "shuffle", "aggregation": "secure-sum",
        "secure_sum": "paillier",
        "policy": {"algo": "ddp-linucb", "d": 2, "batch_schedule": SCHEDULE.spec(),
                   "noise": "devices"}}]})
    shuffler = open_store(store, tmp_path)
    async with httpx.AsyncClient(base_url="http://analyzer",
                                 transport=httpx.MockTransport(analyzer)) as client:
        catch_up = ScheduleCatchUp(settings, shuffler, client)
        try:
            assert catch_up.tasks == ["sum"]
            assert await catch_up.catch_up("sum") is None  # nothing announced yet
            announced["batch_size"] = 6
            await catch_up.first()
            assert shuffler.counts("sum").next_batch == 1
            announced["batch_size"] = 12
            catch_up.refused("sum")  # in the background
            catch_up.refused("sum")  # within INTERVAL: not again
            assert len(catch_up._running) == 1
            await asyncio.gather(*catch_up._running)
            assert shuffler.counts("sum").next_batch == 2
        finally:
            await catch_up.stop()
            shuffler.close()
