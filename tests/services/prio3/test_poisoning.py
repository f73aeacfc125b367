"""Issue 40: one bad device costs nothing. ``ddp-linucb`` with its default design — devices send
exact rounded statistics proved within their honest ranges, each aggregator adds Skellam noise
to its aggregate share — through the real analyzer and shuffler apps, on SQLite and on
PostgreSQL (the package's ``store`` parametrisation). The three attacks of the issue:

1. one invalid report among honest ones: refused alone, every honest report counted;
2. a report at the edge of the validity range: it moves no coordinate further than an honest
   report can (ratio ≤ 1.0), and one step beyond the edge is refused;
3. devices that add no noise (every device here: reports carry none): the released sums still
   carry the ledger's noise — the residual (released − true sum) has the variance of the two
   aggregators' Skellam noise, 2μ_a, never less than the μ_a each observer is promised.
"""

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from privbandit.shared.core.policies import randomizer_for
from privbandit.shared.core.randomizers.skellam import SkellamRandomizer
from privbandit.shared.settings import TaskConfig
from tests.helpers import assert_same_state, eventually

from .support import Maker, acked, ddp_prio3_task, settings_for, stack, upload
from .test_hostile import ddp_overflow, fed

DDP = ddp_prio3_task("ddp", l=10)


def edge(make: Maker, step: int = 0) -> list[int]:
    """Every entry at the top of its honest range (plus ``step``)."""
    return [m - o + step for m, o in zip(make.vd.entry_maxima, make.vd.entry_offsets,
                                         strict=True)]


def test_the_task_runs_the_aggregators_design() -> None:
    r = randomizer_for(DDP.policy)
    assert isinstance(r, SkellamRandomizer) and r.aggregated_noise
    assert r.honest is None and r.share_variance == 0.0


@pytest.mark.parametrize(("config", "first", "second"), [
    # The default design: the invalid report is refused alone, every honest one counted.
    (DDP, (9, 1, 1), (19, 1, 2)),
    # The devices' noise shares at γ = 1 (``noise = "devices"``): every report's share is needed
    # for the central noise μ, so one invalid report leaves 9 < ⌈γl⌉ = 10 valid and the whole
    # batch is quarantined (nothing unsharded, all 10 refused); the next batch is counted.
    (ddp_prio3_task("ddp", l=10, honest_fraction=1.0, noise="devices"), (0, 10, 1), (10, 10, 2)),
], ids=["aggregators", "devices"])
async def test_one_invalid_report_costs_no_honest_one(
        tmp_path: Path, config: TaskConfig, first: tuple[int, int, int],
        second: tuple[int, int, int]) -> None:
    async with stack(settings_for(tmp_path, [config])) as s:
        make = Maker(config, s.hpke, seed=3)
        _, honest = make.honest(9)
        await upload(s.shuffler, [*honest, ddp_overflow(make, honest)], "ddp")
        await eventually(lambda: acked(s.shuffler, 1, "ddp"))
        p = await s.privacy("ddp")
        assert (p.reports_counted, p.reports_refused, p.batches) == first
        rows2, honest2 = make.honest(10)
        await upload(s.shuffler, honest2, "ddp")
        await eventually(lambda: acked(s.shuffler, 2, "ddp"))
        p, q = await s.privacy("ddp"), await s.queue("ddp")
        assert (p.reports_counted, p.reports_refused, p.batches) == second
        assert q.accepted == p.reports_counted + p.reports_refused == 20 and q.pending == 0
        if first[0] == 0:  # the quarantined batch left no trace in the model
            state = s.analyzer_app.state.runtime.tasks["ddp"].policy.get_state()
            assert_same_state(state, fed(config, make, [rows2]))


async def test_an_edge_of_range_report_moves_nothing_further_than_an_honest_one(
        tmp_path: Path) -> None:
    async with stack(settings_for(tmp_path, [DDP])) as s:
        make = Maker(DDP, s.hpke, seed=4)
        r = make.randomizer
        assert isinstance(r, SkellamRandomizer)
        top = edge(make)
        # What honest reports reach: the ranges are attained by honest inputs
        # (tests/shared/core/randomizers/test_skellam_aggregators.py), so the largest honest
        # move of coordinate i is max(|lo_i|, |hi_i|), and the edge report's move is hi_i.
        honest_bound = np.maximum(np.abs(r.range_lo), np.abs(r.range_hi))
        ratio = float(np.max(np.abs(np.asarray(top)) / honest_bound))
        assert ratio <= 1.0
        _, honest = make.honest(9)
        await upload(s.shuffler, [*honest, make.report(top)], "ddp")
        await eventually(lambda: acked(s.shuffler, 1, "ddp"))
        p = await s.privacy("ddp")
        assert (p.reports_counted, p.reports_refused) == (10, 0)  # in range: counted
        # One step beyond the edge on every entry: refused alone.
        _, honest = make.honest(9)
        await upload(s.shuffler, [*honest, make.forged(make.value_encoding(edge(make, 1)))],
                     "ddp")
        await eventually(lambda: acked(s.shuffler, 2, "ddp"))
        p = await s.privacy("ddp")
        assert (p.reports_counted, p.reports_refused) == (19, 1)


async def test_devices_that_add_no_noise_still_get_the_stated_noise(tmp_path: Path) -> None:
    """30 batches of 10: the residual of each released sum has the variance of Sk(2μ_a).
    With 30 × 9 = 270 residuals the sample variance's relative standard error is √(2/270) ≈
    0.086; the bounds are 4.5 of them either side, and the mean's 4.5 of its own: the noise is
    drawn from the OS CSPRNG (no seed to fix), so the bounds are set for a false alarm below
    10⁻⁵ per run rather than 3 standard errors' 0.3 %. They still refuse a release without the
    aggregators' noise (a residual variance below 1, ~10⁻⁶ of the stated) and one with a single
    aggregator's noise (half the variance: 5.8 standard errors off)."""
    batches = 30
    async with stack(settings_for(tmp_path, [DDP])) as s:
        make = Maker(DDP, s.hpke, seed=5)
        policy: Any = s.analyzer_app.state.runtime.tasks["ddp"].policy
        released: list[np.ndarray] = []
        ingest = policy.ingest_statistic

        def record(stat: np.ndarray, n: int) -> None:
            released.append(np.asarray(stat, dtype=np.int64).copy())
            ingest(stat, n)

        policy.ingest_statistic = record
        truths = []
        for b in range(batches):
            rows, honest = make.honest(10)
            truths.append(np.asarray(make.values(rows), dtype=np.int64).sum(axis=0))
            await upload(s.shuffler, honest, "ddp")
            await eventually(lambda b=b: acked(s.shuffler, b + 1, "ddp"))
        assert len(released) == batches
        residual = np.concatenate([got - want for got, want in zip(released, truths,
                                                                    strict=True)])
        r = make.randomizer
        assert isinstance(r, SkellamRandomizer)
        stated = 2 * r.aggregator_variance  # both aggregators' noise
        assert r.aggregator_variance >= r.mu_target  # each observer's promise
        se = np.sqrt(2 / residual.size)
        assert abs(residual.var() / stated - 1) < 4.5 * se, (residual.var(), stated)
        assert abs(residual.mean()) < 4.5 * np.sqrt(stated / residual.size)
