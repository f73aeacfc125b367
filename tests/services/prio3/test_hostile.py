"""Issue 23 item 7: hostile reports through the real services, one per case. Each shares a
batch of l = 10 with 9 honest reports: the hostile one is refused ALONE (counted as refused),
the 9 others are counted (the analyzer's state is SBLB — or ddp-linucb — fed exactly them), the
next batch is counted whole (the task goes on), and the reconciliation holds: every report the
shuffler accepted is counted or refused at the analyzer."""

import secrets
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from privbandit.shared.crypto.prio3.prio3 import LeaderShare
from privbandit.shared.protocol.messages import b64decode, b64encode
from privbandit.shared.protocol.prio3 import Prio3Report
from privbandit.shared.settings import TaskConfig
from tests.helpers import assert_same_state, eventually

from .support import Maker, acked, ddp_prio3_task, prio3_task, settings_for, stack, upload

SBLB = prio3_task("sum", l=10)
# The device-share design (noise = "devices"), γ = 0.8: shares sized so that any 8 honest
# reports of 10 carry the central noise. The default design (the aggregators add the noise):
# test_poisoning.py.
DDP = ddp_prio3_task("ddp", l=10, honest_fraction=0.8, noise="devices")

Attack = Callable[[Maker, list[Prio3Report]], Prio3Report]


def all_twenty(make: Maker, honest: list[Prio3Report]) -> Prio3Report:
    """The issue's probe: 20 in every slot of an m = 1 task (the sum of 20 users)."""
    return make.forged(make.value_encoding([20] * make.vd.length))


def negative(make: Maker, honest: list[Prio3Report]) -> Prio3Report:
    """A negative contribution: −19 in one slot, 0 elsewhere (would cancel 19 honest 1s)."""
    return make.forged(make.value_encoding([-19] + [0] * (make.vd.length - 1)))


def ddp_overflow(make: Maker, honest: list[Prio3Report]) -> Prio3Report:
    """The issue's ddp probe: +10,041 per coordinate (an honest value is within ±O)."""
    assert 10_041 > make.vd.offset
    return make.forged(make.value_encoding([10_041 + make.vd.offset] * make.vd.length))


def garbage(make: Maker, honest: list[Prio3Report]) -> Prio3Report:
    """Uniformly random field elements of exactly the leader share's length, with a helper
    share sealed properly: well-formed, passes intake, proves nothing."""
    v = make.vd.vdaf
    model = honest[0]
    n = (make.vd.leader_share_bytes - 32) // v.field.ENCODED_SIZE
    elems = v.field.vec([secrets.randbelow(v.field.MODULUS) for _ in range(n)])
    raw = v.field.encode_vec(elems) + secrets.token_bytes(32)
    forged = make.forged([0] * v.flp.MEAS_LEN)  # fresh nonce, public share, sealed helper
    assert len(raw) == len(b64decode(model.leader_share))
    return forged.model_copy(update={"leader_share": b64encode(raw)})


def replayed_share(make: Maker, honest: list[Prio3Report]) -> Prio3Report:
    """An honest report of the batch replayed under a new nonce (its leader, helper and public
    shares copied): the sealed helper share names the victim's nonce."""
    victim = honest[0]
    return victim.model_copy(update={"nonce": b64encode(secrets.token_bytes(16))})


def proof_for_another(make: Maker, honest: list[Prio3Report]) -> Prio3Report:
    """A valid report whose proof share is replaced by another valid report's: the measurement
    share of one with the proof of the other."""
    v = make.vd.vdaf
    mine, other = make.report([1] * make.vd.length), make.report([0] * make.vd.length)
    a = v.decode_input_share(0, b64decode(mine.leader_share))
    b = v.decode_input_share(0, b64decode(other.leader_share))
    assert isinstance(a, LeaderShare) and isinstance(b, LeaderShare)
    mixed = LeaderShare(a.meas_share, b.proofs_share, a.blind)
    return mine.model_copy(update={"leader_share": b64encode(v.encode_input_share(mixed))})


CASES: list[tuple[TaskConfig, Attack]] = [
    (SBLB, all_twenty), (SBLB, negative), (DDP, ddp_overflow), (SBLB, garbage),
    (SBLB, replayed_share), (SBLB, proof_for_another),
]


def fed(config: TaskConfig, make: Maker, batches: list[np.ndarray]) -> dict:
    """The state of the task's policy fed these plaintext rows' values as batch sums."""
    from privbandit.shared.core.policies import build_policy

    policy = build_policy(config.policy, np.random.default_rng(0))
    for rows in batches:
        values = np.asarray(make.values(rows), dtype=np.int64)
        policy.ingest_statistic(values.sum(axis=0), rows.shape[0])  # type: ignore[attr-defined]
    return policy.get_state()


@pytest.mark.parametrize(("config", "attack"), CASES, ids=[a.__name__ for _, a in CASES])
async def test_hostile_report_refused_alone(tmp_path: Path, config: TaskConfig, attack: Attack
                                            ) -> None:
    async with stack(settings_for(tmp_path, [config])) as s:
        task = config.id
        make = Maker(config, s.hpke, seed=7)
        rows, honest = make.honest(9)
        hostile = attack(make, honest)
        got = await upload(s.shuffler, [*honest, hostile], task)
        assert (got.accepted, got.duplicates) == (10, 0)  # intake cannot tell
        await eventually(lambda: acked(s.shuffler, 1, task))
        p = await s.privacy(task)
        assert (p.reports_counted, p.reports_refused, p.batches) == (9, 1, 1)
        # The task goes on: the next batch is counted whole.
        rows2, honest2 = make.honest(10)
        await upload(s.shuffler, honest2, task)
        await eventually(lambda: acked(s.shuffler, 2, task))
        p = await s.privacy(task)
        q = await s.queue(task)
        assert (p.reports_counted, p.reports_refused, p.batches) == (19, 1, 2)
        # Reconciliation: accepted at the shuffler = counted + refused at the analyzer.
        assert q.accepted == p.reports_counted + p.reports_refused == 20
        assert q.pending == 0
        state = s.analyzer_app.state.runtime.tasks[task].policy.get_state()
        assert_same_state(state, fed(config, make, [rows, rows2]))
