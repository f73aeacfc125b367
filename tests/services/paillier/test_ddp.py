"""``ddp-linucb`` through the real services, in-process: the device clips, rounds and adds an
exact Skellam share, packs the signed values with the task's offset layout and Paillier-encrypts
them; the (unchanged) shuffler multiplies l of them into one encrypted batch sum; the analyzer
decrypts only that sum, range-checks it, rescales it and feeds ddp-linucb. A batch whose decoded
sum lies beyond what honest devices produce is quarantined with ``sum_out_of_range`` and leaves
the analyzer's state exactly as it was.

Keys are 1024 bits (``PAILLIER_TEST_BITS``)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from privbandit.api import policy_ledger
from privbandit.services.analyzer.app import create_app as create_analyzer
from privbandit.services.shuffler.app import create_app as create_shuffler
from privbandit.shared.core.policies import build_policy, randomizer_for
from privbandit.shared.core.policies.practical import DDP_LINUCB
from privbandit.shared.core.randomizers.skellam import SkellamRandomizer
from privbandit.shared.core.schedule import BatchSchedule
from privbandit.shared.crypto.keystore import PaillierKeyStore
from privbandit.shared.crypto.paillier import (
    PaillierEncryptor,
    decode_ciphertexts,
    decrypt_sum,
    encode_ciphertexts,
)
from privbandit.shared.crypto.slots import pack_signed, unpack_signed
from privbandit.shared.crypto.tags import ciphertext_digest
from privbandit.shared.protocol.messages import HpkeConfig, b64decode
from privbandit.shared.protocol.paillier import (
    EncryptedBatchSum,
    EncryptedCounts,
    PaillierConfig,
    PaillierUpload,
)
from privbandit.shared.settings import Settings, TaskConfig
from tests.helpers import (
    PAILLIER_TEST_BITS,
    assert_same_state,
    counted,
    eventually,
    make_settings,
    paillier_ready,
    privacy,
    running,
    tag_for,
    upload,
)
from tests.services.device.support import decide, device_app, features, ok

from .support import Recorder

L = 10
DDP = TaskConfig(
    id="ddp", threat_model="shuffle", aggregation="secure-sum", secure_sum="paillier", K=4,
    policy={"algo": "ddp-linucb", "d": 3, "batch_size": L, "epsilon": 1.0, "delta": 1e-6,
            "noise": "devices",
            "regularizer": "clip", "eta": 0.0},
)
RANDOMIZER = randomizer_for(DDP.policy)
assert isinstance(RANDOMIZER, SkellamRandomizer)
DDP_FROBENIUS = TaskConfig.model_validate({**DDP.model_dump(), "policy": {
    **DDP.policy.model_dump(), "encoding": "frobenius", "u_weight": 1.3}})
# ddp-linucb's practical defaults (the frobenius encoding, the noise-calibrated ridge and width)
# with a short growing schedule in place of the demo's first batch of ≈ 500, and r x weighted
# by w = 1.3 so that dividing every weight out is visible.
SCHEDULE = BatchSchedule.parse("geometric:5,2,20")  # 5, 10, 20, 20, …
DDP_PRACTICAL = TaskConfig.model_validate({**DDP.model_dump(), "policy": {
    "algo": "ddp-linucb", "d": 3, "epsilon": 1.0, "delta": 1e-6, **DDP_LINUCB,
    "noise": "devices",
    "batch_schedule": SCHEDULE.spec(), "u_weight": 1.3}})


def ddp_settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path / "data", tasks=[DDP])


@dataclass
class DDPStack:
    analyzer: httpx.AsyncClient
    shuffler: httpx.AsyncClient
    analyzer_app: FastAPI
    shuffler_app: FastAPI
    to_analyzer: Recorder  # shuffler → analyzer
    config: PaillierConfig
    hpke: HpkeConfig

    def state(self) -> dict:
        return self.analyzer_app.state.runtime.tasks["ddp"].policy.get_state()

    def keys(self, settings: Settings) -> PaillierKeyStore:
        return PaillierKeyStore(Path(settings.data_dir) / "analyzer", PAILLIER_TEST_BITS,
                                allow_small=True)


@asynccontextmanager
async def ddp_stack(settings: Settings) -> AsyncIterator[DDPStack]:
    """The real analyzer and shuffler in-process, the shuffler posting through a recorder."""
    a_app = create_analyzer(settings, paillier_key_bits=PAILLIER_TEST_BITS)
    async with running(a_app) as analyzer:
        rec = Recorder(httpx.ASGITransport(a_app))
        s_app = create_shuffler(settings, analyzer_transport=rec)
        async with running(s_app) as shuffler:
            await eventually(lambda: paillier_ready(shuffler), what="shuffler key")
            r = await analyzer.get("/v1/tasks/ddp/secure-sum")
            assert r.status_code == 200, r.text
            config = PaillierConfig.model_validate_json(r.content)
            hpke = HpkeConfig.model_validate_json((await analyzer.get("/v1/hpke-config")).content)
            yield DDPStack(analyzer, shuffler, a_app, s_app, rec, config, hpke)


def decrypt_values(keys: PaillierKeyStore, config: PaillierConfig, ct: str, n: int) -> np.ndarray:
    """The signed values (n = 1) or coordinate sums of ``ct`` under the task's layout."""
    assert config.layout is not None
    lay = config.layout.slot_layout()
    plain = decrypt_sum(keys.private_key, decode_ciphertexts(ct, keys.n, lay.plaintexts))
    return unpack_signed(plain, lay, math.inf, n_reports=n)


async def play(
    s: DDPStack, settings: Settings, rng: np.random.Generator, users: int, reports: int,
    what: str,
) -> tuple[list[tuple[np.ndarray, float]], list[EncryptedCounts]]:
    """``users`` visits of the real device (its uploads to the shuffler recorded): decide on
    random features, a uniform reward as feedback; waits until the analyzer counted ``reports``
    (``what``) and the device's outbox is empty. The (x, r) of each chosen arm and every report
    the device sent (one per visit)."""
    to_shuffler = Recorder(httpx.ASGITransport(s.shuffler_app))
    app = device_app(settings, httpx.ASGITransport(s.analyzer_app), to_shuffler)
    chosen = []
    async with running(app) as device:
        await eventually(lambda: ok(device.get("/healthz")), what="device ready")
        for _ in range(users):
            feats = features(rng)
            dec = await decide(device, "ddp", feats)
            reward = float(rng.uniform())
            body = {"decision_id": dec["decision_id"], "reward": reward}
            resp = await device.post("/v1/tasks/ddp/feedback", json=body)
            assert resp.status_code == 202, resp.text
            chosen.append((np.asarray(feats[dec["action"]]), reward))
        await eventually(lambda: counted(s.analyzer, "ddp", reports), what=what)
        await eventually(lambda: _outbox_empty(device), what="delivery")
    sent = [rep for path, body in to_shuffler.posts() if path.endswith("/encrypted-counts")
            for rep in PaillierUpload.model_validate(body).reports]
    assert len(sent) == users
    return chosen, sent


@pytest.mark.parametrize("task", [DDP, DDP_FROBENIUS], ids=["upper", "frobenius"])
async def test_ddp_devices_through_the_shuffler_to_the_analyzer(tmp_path: Path,
                                                               task: TaskConfig) -> None:
    """Two batches of l = 10 device reports: every report decrypts to the user's rounded
    statistics plus a share within the packing offset; each batch sum the shuffler forwards is
    the sum of its members; the analyzer's state equals ddp-linucb fed those two sums; the ledger
    is the Skellam one. Both encodings (``frobenius``: off-diagonals × √2, r x × w, what the
    device and the analyzer both read from the task's policy)."""
    settings = make_settings(tmp_path / "data", tasks=[task])
    rz = randomizer_for(task.policy)
    assert isinstance(rz, SkellamRandomizer)
    rng = np.random.default_rng(30)
    async with ddp_stack(settings) as s:
        lay = s.config.layout
        assert lay is not None
        # The signed layout: c = 9 values as digits v + O in 0..2O, O from the randomizer.
        assert (lay.c, lay.offset, lay.m, lay.batch_size) == (9, rz.offset,
                                                             2 * rz.offset, L)
        chosen, sent = await play(s, settings, rng, 2 * L + 3, 2 * L, "two batches")
        keys = s.keys(settings)
        values = np.array([decrypt_values(keys, s.config, r.ct, 1) for r in sent])
        assert np.abs(values).max() <= rz.offset
        # Each value is s·v (rounded: within 1) plus a share Sk(σ²): |share| < 8σ fails with
        # probability below 1e-14 per coordinate (Bernstein); the shares' empirical variance
        # over 23 × 9 = 207 coordinates (relative sd √(2/207) ≈ 0.1) lies within [0.5, 1.6]·σ²
        # unless it is 5 sd off. (The device draws from the OS CSPRNG: no seed to fix.)
        clean = np.array([rz.scale * rz.statistics(x[None], np.array([r]))[0]
                          for x, r in chosen])
        noise = values - clean
        sigma2 = rz.share_variance
        assert np.abs(noise).max() < 8 * math.sqrt(sigma2) + 1
        assert 0.5 < float(np.mean(noise**2)) / sigma2 < 1.6
        # What the shuffler forwarded: two sums of l reports; decrypted, they add up to the
        # reports' values (a sum ignores the permutation), and they are all the analyzer fed.
        sums = [EncryptedBatchSum.model_validate(body) for path, body in s.to_analyzer.posts()
                if path.endswith("/batch-sums")]
        assert [b.count for b in sums] == [L, L]
        decoded = [decrypt_values(keys, s.config, b.ct, L) for b in sums]
        np.testing.assert_array_equal(decoded[0] + decoded[1], values[: 2 * L].sum(axis=0))
        reference = build_policy(task.policy, np.random.default_rng(0))
        for stat in decoded:
            reference.ingest_statistic(stat, L)
        assert_same_state(s.state(), reference.get_state())
        assert s.state()["reports"] == 2 * L
        model = (await s.analyzer.get("/v1/tasks/ddp/model")).json()
        # η = 0: a batch publishes unless its noise shrank det Ṽ, as the reference decided on
        # the same sums. Whether either of the two did depends on the aggregators' noise, drawn
        # from the OS CSPRNG (no seed; an occasional run publishes neither), so the test asks
        # for agreement, not for a publication.
        assert model["version"] == reference.model.version
        np.testing.assert_allclose(model["theta"], reference.model.theta, rtol=1e-12)
        report = await privacy(s.analyzer, "ddp")
        assert (report.reports_counted, report.reports_refused) == (2 * L, 0)
        p = report.ledger.model_dump()
        assert p["ldp_epsilon"] is None and p["aggregation"] == "secure-sum"
        assert 0.9 < p["central_epsilon"] <= 1.0 and p["central_delta"] == 1e-6
        assert p["honest_fraction"] == 1.0 and p["honest_shares"] == L
        assert p["share_variance"] == sigma2


def frobenius_statistics(x: np.ndarray, r: float, w: float) -> np.ndarray:
    """v_w = (diag(x xᵀ), √2·offdiag_{i<j}(x xᵀ), w·r x), the upper triangle row by row
    (protocol §3.5), written out here rather than taken from the randomizer."""
    d = x.shape[0]
    upper = [x[i] * x[j] * (1.0 if i == j else math.sqrt(2.0))
             for i in range(d) for j in range(i, d)]
    return np.concatenate([upper, w * r * x])


def divide_weights_out(stat: np.ndarray, d: int, scale: float, w: float
                       ) -> tuple[np.ndarray, np.ndarray]:
    """(G̃, ũ) of one decoded batch sum S: S / (s · weights), the upper triangle mirrored."""
    G = np.zeros((d, d))
    k = 0
    for i in range(d):
        for j in range(i, d):
            G[i, j] = G[j, i] = stat[k] / (scale * (1.0 if i == j else math.sqrt(2.0)))
            k += 1
    return G, stat[k:] / (scale * w)


async def test_a_frobenius_schedule_is_the_simulators_estimator_and_ledger(
    tmp_path: Path,
) -> None:
    """ddp-linucb at its practical defaults (the frobenius encoding, w = 1.3) under a growing
    schedule 5, 10, 20, through the real device, shuffler and analyzer: every report decrypts to
    s·v_w(x, r) of the user's chosen arm (v_w written out by hand) plus a share of the variance
    of the batch length it states; each forwarded batch sum (lengths 5, 10, 20) is the
    sum of its members (found by their ciphertext digests); the analyzer's state equals the
    simulator's ddp-linucb fed those members' rows batch by batch (``Policy.ingest``, the
    simulator's path), and its (G̃, ũ) equals the batch sums with the weights divided out by
    hand; the analyzer's ledger equals the simulator's (``privbandit.api.policy_ledger``) and
    its Δ₂ is the closed-form joint bound's."""
    task = DDP_PRACTICAL
    policy = task.policy
    assert (policy.encoding, policy.regularizer) == ("frobenius", "noise")  # the defaults
    settings = make_settings(tmp_path / "data", tasks=[task])
    sizes = [5, 10, 20]
    users = sum(sizes) + 3
    rng = np.random.default_rng(31)
    async with ddp_stack(settings) as s:
        chosen, sent = await play(s, settings, rng, users, sum(sizes), "3 batches")
        keys = s.keys(settings)
        values = np.array([decrypt_values(keys, s.config, r.ct, 1) for r in sent])
        reference = build_policy(policy, np.random.default_rng(0))
        # Each report: s·v_w(x, r) rounded, plus a share sized for the length it states. Over
        # 38 × 9 = 342 coordinates the pooled ratio of squared noise to the stated variances
        # (relative sd √(2/342) ≈ 0.08; rounding adds < 1/4 to variances of thousands) lies in
        # [0.6, 1.4] unless it is 5 sd off. (The device's CSPRNG has no seed to fix.)
        stated = [r.batch_size for r in sent]
        assert set(stated) <= set(SCHEDULE.distinct_sizes()), stated
        clean = np.array([policy.scale * frobenius_statistics(x, r, policy.u_weight)
                          for x, r in chosen])
        noise = values - clean
        variances = np.array([reference.randomizer_for(int(l)).share_variance for l in stated])
        ratio = float((noise**2).sum() / (variances.sum() * noise.shape[1]))
        assert 0.6 < ratio < 1.4, ratio
        # The batches and their members (the digest of each ciphertext multiplied). The forwarder
        # keeps up to ``WINDOW`` batches of a task in flight at once (``services/shuffler/
        # forwarder.py``; a secure-sum batch is multiplied in a worker thread first), so a short
        # batch may be posted after a longer, later one (seen under load): their lengths are 5,
        # 10 and 20 in some order, and the analyzer ingests each as it arrives, as the simulator
        # below does. (In another order, its state differs from a simulator fed 5, 10, 20 —
        # e.g. in ``repairs`` — so the order fed is the order posted.)
        by_digest = {ciphertext_digest(b64decode(r.ct)): i for i, r in enumerate(sent)}
        forwarded: dict[str, EncryptedBatchSum] = {}
        for path, body in s.to_analyzer.posts():
            if path.endswith("/batch-sums"):
                forwarded.setdefault(body["batch_id"], EncryptedBatchSum.model_validate(body))
        batches = list(forwarded.values())
        assert sorted(b.count for b in batches) == sizes
        members = [[by_digest[b64decode(m.digest)] for m in b.members] for b in batches]
        assert len({i for m in members for i in m}) == sum(sizes)
        for batch, b in zip(members, batches, strict=True):
            # No report lands in a batch shorter than its share is sized for.
            assert len(batch) == b.count and max(stated[i] for i in batch) <= b.count
        decoded = [decrypt_values(keys, s.config, b.ct, b.count) for b in batches]
        for stat, batch in zip(decoded, members, strict=True):
            np.testing.assert_array_equal(stat, values[batch].sum(axis=0))
        # The simulator's estimator on the same reports, batch by batch.
        for batch in members:
            reference.ingest(values[batch])
        state = s.state()
        assert_same_state(state, reference.get_state())
        assert state["reports"] == sum(sizes) and state["batches"] == len(sizes)
        G, u = np.zeros((3, 3)), np.zeros(3)
        for stat in decoded:
            g, v = divide_weights_out(stat, 3, policy.scale, policy.u_weight)
            G, u = G + g, u + v
        np.testing.assert_allclose(state["G"], G, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(state["u"], u, rtol=1e-12, atol=1e-12)
        model = (await s.analyzer.get("/v1/tasks/ddp/model")).json()
        assert model["version"] == reference.model.version >= 1
        assert model["batch_size"] == SCHEDULE.size(len(sizes)) == 20
        np.testing.assert_allclose(model["theta"], reference.model.theta, rtol=1e-12)
        # The ledger: the simulator's, for the same parameters, field by field — with the
        # task's transport's observers stated in place of the simulator's transport-free ones.
        report = await privacy(s.analyzer, "ddp")
        # batch_size is the schedule's first length (derived): the library takes one of them
        params = policy.model_dump(exclude={"algo", "batch_size"})
        simulator = policy_ledger("ddp-linucb", secure_sum=task.secure_sum, **params)
        assert "Paillier ciphertexts" in report.ledger.accounting
        assert report.ledger.model_dump() == simulator.model_dump()
        ledger = report.ledger.model_dump()
        assert [row["batch_size"] for row in ledger["per_batch"]] == [5, 10, 20]
        assert all(row["central_epsilon"] <= 1.0 for row in ledger["per_batch"])
        # Δ₂ = min(2B, s Δ_v + 2√n) with the frobenius joint bound at L = 1, w = 1.3:
        # Δ_v² = 2A + 2U + U²/(2A), A = 1, U = w² ≤ 2A (randomizers.skellam, *Encodings*).
        w2 = policy.u_weight**2
        pair = math.sqrt(2 + 2 * w2 + w2 * w2 / 2)
        slack = 1 + 1e-9
        bound = policy.scale * math.sqrt(1 + w2) * slack + 3
        assert ledger["l2_sensitivity"] == pytest.approx(
            min(2 * bound, policy.scale * pair * slack + 2 * 3), rel=1e-12)
        assert pair < math.sqrt(2 + 4 * w2)  # below the upper encoding's


def lying_reports(s: DDPStack, value: int) -> list[EncryptedCounts]:
    """l reports whose first coordinate is ``value`` (within the packing offset, so each one
    packs), the others 0: devices lying within ±O but beyond their mechanism."""
    assert s.config.layout is not None
    lay = s.config.layout.slot_layout()
    enc = PaillierEncryptor.from_config(s.config)
    out = []
    for _ in range(L):
        values = np.zeros(lay.c, dtype=np.int64)
        values[0] = value
        ct = encode_ciphertexts(enc.encrypt(pack_signed(values, lay)), s.config.key_bits)
        out.append(EncryptedCounts(key_id=s.config.key_id, ct=ct, tag=tag_for(s.hpke, "ddp", ct)))
    return out


async def test_an_out_of_range_sum_is_quarantined_without_a_state_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """l reports each at +O in one coordinate: every one packs (|v| ≤ O), the shuffler sums
    them, and the decoded sum l·O exceeds the bound an honest batch stays within
    (``sum_bound(l)`` < l·O for l > 1): the analyzer quarantines the batch
    (``sum_out_of_range``), counts its reports as refused, and its policy state, model and
    ledger are exactly as before. A batch of reports at exactly the bound's edge but inside it is
    counted."""
    settings = ddp_settings(tmp_path)
    assert RANDOMIZER.sum_bound(L) < L * RANDOMIZER.offset
    async with ddp_stack(settings) as s:
        before = json.dumps(s.state(), sort_keys=True)
        model_before = (await s.analyzer.get("/v1/tasks/ddp/model")).json()
        logger = "privbandit.services.analyzer.transports.paillier"
        with caplog.at_level(logging.WARNING, logger=logger):
            accepted = await upload(s.shuffler, lying_reports(s, RANDOMIZER.offset), "ddp")
            assert accepted.accepted == L
            await eventually(
                lambda: _refused(s.analyzer, L), what="the batch quarantined")
        assert "sum_out_of_range" in caplog.text
        assert json.dumps(s.state(), sort_keys=True) == before
        assert (await s.analyzer.get("/v1/tasks/ddp/model")).json() == model_before
        p = await privacy(s.analyzer, "ddp")
        assert (p.reports_counted, p.reports_refused, p.batches) == (0, L, 1)
        # Inside the bound: each report at ⌊sum_bound(l) / l⌋ sums to at most the bound.
        inside = math.floor(RANDOMIZER.sum_bound(L) / L)
        await upload(s.shuffler, lying_reports(s, inside), "ddp")
        await eventually(lambda: counted(s.analyzer, "ddp", L), what="the batch counted")
        assert s.state()["reports"] == L


async def _refused(client: httpx.AsyncClient, n: int) -> bool:
    return (await privacy(client, "ddp")).reports_refused >= n


async def _outbox_empty(device: httpx.AsyncClient) -> bool:
    return (await device.get("/v1/status")).json()["outbox_pending"] == 0


def test_the_device_checks_the_signed_layout() -> None:
    """A ddp-linucb device derives its own offset O from the task's parameters: a published
    layout with another O (or the unsigned layout of the same c, l) is refused."""
    from privbandit.services.device.transports.paillier import ConfigMismatch, check_config
    from privbandit.shared.crypto.paillier import generate_keypair
    from privbandit.shared.crypto.slots import layout
    from privbandit.shared.protocol.messages import TaskInfo
    from privbandit.shared.protocol.paillier import paillier_config

    public, _ = generate_keypair(1024, allow_small=True)
    o = RANDOMIZER.offset
    info = TaskInfo(id="ddp", threat_model="shuffle", algo="ddp-linucb", d=3, K=4, batch_size=L,
                    aggregation="secure-sum", policy=DDP.policy.model_dump())
    good = paillier_config(public.n, layout(9, L, 2 * o, 1024, offset=o))
    assert check_config(DDP, info, good, 1024) == good.layout
    for lay in (layout(9, L, 2 * (o + 1), 1024, offset=o + 1), layout(9, L, 2 * o, 1024)):
        with pytest.raises(ConfigMismatch):
            check_config(DDP, info, paillier_config(public.n, lay), 1024)


def test_the_device_refuses_an_analyzer_reading_its_values_otherwise() -> None:
    """What a value means (the encoding's weights, w, s, L) must be the same on both sides: a
    device configured with the ``upper`` encoding refuses an analyzer whose task states
    ``frobenius`` (or another w), even under the very layout the device derives, and accepts
    its own policy; an analyzer whose policy omits the encoding means the default (``upper``)."""
    from privbandit.services.device.transports.paillier import ConfigMismatch, check_config
    from privbandit.shared.crypto.paillier import generate_keypair
    from privbandit.shared.crypto.slots import layout_for
    from privbandit.shared.protocol.messages import TaskInfo
    from privbandit.shared.protocol.paillier import paillier_config

    public, _ = generate_keypair(1024, allow_small=True)
    good = paillier_config(public.n, layout_for(DDP, 1024))

    def info(**policy: object) -> TaskInfo:
        return TaskInfo(id="ddp", threat_model="shuffle", algo="ddp-linucb", d=3, K=4,
                        batch_size=L, aggregation="secure-sum",
                        policy={**DDP.policy.model_dump(), **policy})

    assert check_config(DDP, info(), good, 1024) == good.layout
    omitted = info()
    del omitted.policy["encoding"]
    assert check_config(DDP, omitted, good, 1024) == good.layout
    for change in ({"encoding": "frobenius"}, {"u_weight": 1.3}, {"scale": 256.0}):
        with pytest.raises(ConfigMismatch, match=next(iter(change))):
            check_config(DDP, info(**change), good, 1024)
    # And the other way round: a frobenius device against an upper analyzer.
    frob = paillier_config(public.n, layout_for(DDP_FROBENIUS, 1024))
    with pytest.raises(ConfigMismatch, match="encoding"):
        check_config(DDP_FROBENIUS, info(), frob, 1024)
    # The analyzer states which secure sum it runs: a Paillier device refuses a prio3 task.
    assert check_config(DDP, info().model_copy(update={"secure_sum": "paillier"}), good,
                        1024) == good.layout
    with pytest.raises(ConfigMismatch, match="prio3"):
        check_config(DDP, info().model_copy(update={"secure_sum": "prio3"}), good, 1024)
