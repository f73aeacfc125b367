"""Prio3 interop (issue 23, protocol.md §5.5), in process with the real analyzer and shuffler
apps: reports the independent client (tests/interop/client.py) builds from the document — its
own randomized counts (§3.4) or ddp values plus O, the document's Prio3SumVec parameters,
context, nonce, sealed helper share (pyhpke) and JSON — are verified and counted exactly, the
analyzer's state being the policy fed their sum; a forged one (a count of 2 in an m = 1 task)
is refused alone."""

from pathlib import Path

import numpy as np

from privbandit.shared.core.policies import build_policy, randomizer_for
from tests.helpers import assert_same_state, eventually
from tests.interop import client
from tests.services.prio3.support import (
    acked,
    ddp_prio3_task,
    prio3_task,
    settings_for,
    stack,
)

L = 10
SBLB = prio3_task("sum", l=L, eps0=4.0, m=1)
# The device-share design's ±O range (§5.3), and the default design's per-entry ranges (§5.5).
DDP = ddp_prio3_task("ddp", l=L, honest_fraction=0.8, noise="devices")
# ε = 100: the aggregators' noise (sd ≈ 48 per coordinate) far below a misread offset (n·|lo|).
DDA = ddp_prio3_task("dda", l=L, epsilon=100.0)


async def post(s, task: str, reports: list[dict]) -> None:
    r = await s.shuffler.post(f"/v1/tasks/{task}/prio3-reports", json={"reports": reports})
    assert r.status_code == 202, r.text


async def test_independent_prio3_reports_are_counted_and_a_forgery_refused(
        tmp_path: Path) -> None:
    async with stack(settings_for(tmp_path, [SBLB, DDP, DDA])) as s:
        hconf = (await s.analyzer.get("/v1/hpke-config")).json()
        info = (await s.analyzer.get("/v1/tasks/sum")).json()
        assert info["secure_sum"] == "prio3" and info["aggregation"] == "secure-sum"
        d, pol = info["d"], info["policy"]
        c = d * (d + 3) // 2
        rng = np.random.default_rng(11)
        x = rng.normal(size=(2 * L - 1, d))
        x /= np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True))
        r = rng.uniform(size=2 * L - 1)
        counts = [client.counts(client.binary_bits(xi, ri, pol["eps0"], pol["m"], pol["L"], rng),
                                pol["m"]) for xi, ri in zip(x, r, strict=True)]
        reports = [client.prio3_report("sum", hconf, c, pol["m"], measurement=k) for k in counts]
        forged = client.prio3_report("sum", hconf, c, pol["m"], encoded=[2] * c)
        await post(s, "sum", [*reports[:L - 1], forged])
        await post(s, "sum", reports[L - 1:])
        await eventually(lambda: acked(s.shuffler, 2))
        p = await s.privacy()
        assert (p.reports_counted, p.reports_refused, p.batches) == (2 * L - 1, 1, 2)
        policy = build_policy(SBLB.policy, np.random.default_rng(0))
        for batch in (counts[:L - 1], counts[L - 1:]):
            policy.ingest_statistic(np.asarray(batch).sum(axis=0), len(batch))
        assert_same_state(s.analyzer_app.state.runtime.tasks["sum"].policy.get_state(),
                          policy.get_state())

        # ddp-linucb: values v + O, M = 2O (O: the packing offset of §5.3, whose formula the
        # Paillier interop checks against the published layout).
        o = randomizer_for(DDP.policy).offset
        values = [rng.integers(-o, o + 1, size=c).tolist() for _ in range(L)]
        ddp = [client.prio3_report("ddp", hconf, c, 2 * o, measurement=[v + o for v in vals])
               for vals in values]
        await post(s, "ddp", ddp)
        await eventually(lambda: acked(s.shuffler, 1, "ddp"))
        p = await s.privacy("ddp")
        assert (p.reports_counted, p.reports_refused) == (L, 0)
        policy = build_policy(DDP.policy, np.random.default_rng(0))
        policy.ingest_statistic(np.asarray(values).sum(axis=0), L)
        assert_same_state(s.analyzer_app.state.runtime.tasks["ddp"].policy.get_state(),
                          policy.get_state())

        # ddp-linucb, noise by the aggregators: the client's ranges from §5.5 are the project's,
        # its rounded statistics (§3.5 without a share) are counted, one beyond its range is
        # refused alone, and the released sum is the true one plus noise of the stated size.
        info = (await s.analyzer.get("/v1/tasks/dda")).json()
        pol = info["policy"]
        lo, hi = client.honest_ranges(d, pol["scale"], pol["L"], pol.get("encoding", "upper"),
                                      pol.get("u_weight", 1.0), pol.get("intercept"))
        rz = randomizer_for(DDA.policy)
        assert (lo, hi) == (rz.range_lo.tolist(), rz.range_hi.tolist())
        maxima = [max(1, h - low) for low, h in zip(lo, hi, strict=True)]
        zs = [np.clip(client.ddp_values(xi, ri, pol["scale"], pol["L"], 0.0, rng), lo, hi)
              .tolist() for xi, ri in zip(x[:L - 1], r[:L - 1], strict=True)]
        good = [client.prio3_ranges_report("dda", hconf, maxima,
                                           measurement=[v - low for v, low in zip(z, lo,
                                                                                  strict=True)])
                for z in zs]
        beyond = [int(m) + 1 for m in maxima]  # each value whole in its entry's first element
        per = max(m.bit_length() for m in maxima)
        bad = client.prio3_ranges_report("dda", hconf, maxima,
                                         encoded=[e for v in beyond for e in [v] + [0] * (per - 1)])
        policy_ = s.analyzer_app.state.runtime.tasks["dda"].policy
        released: list[np.ndarray] = []
        ingest = policy_.ingest_statistic
        policy_.ingest_statistic = lambda stat, n: (released.append(np.asarray(stat)),
                                                    ingest(stat, n))
        await post(s, "dda", [*good, bad])
        await eventually(lambda: acked(s.shuffler, 1, "dda"))
        p = await s.privacy("dda")
        assert (p.reports_counted, p.reports_refused) == (L - 1, 1)
        residual = released[0] - np.asarray(zs).sum(axis=0)
        assert np.abs(residual).max() <= 6 * np.sqrt(2 * rz.aggregator_variance)
