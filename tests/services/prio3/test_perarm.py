"""ddp-linucb's centered encoding on per-arm (disjoint) features, an intercept in every arm's
block (``intercept_coords``; shared/core/randomizers/skellam.py, *Encodings*), through the real
device, shuffler and analyzer over prio3: the device checks ⟨e, x⟩ = c and refuses a context
without it; every honest report passes the Prio3 range proofs (none refused); the analyzer's
(G̃, ũ) — ũ rebuilt as Σ (r − ½) x + ½ G̃ e / c with G̃'s released diagonal — is the users'
(Σ x xᵀ, Σ r x) within the (small, ε = 1000) noise."""

from __future__ import annotations

import math
from pathlib import Path

import httpx
import numpy as np

from privbandit.shared.core.logged import disjoint_intercept_coords
from privbandit.shared.settings import TaskConfig
from tests.helpers import counted, eventually, privacy, running
from tests.services.device.support import device_app, ok

from .support import settings_for, stack

C = 1 / math.sqrt(2)
K, P = 2, 3
D = K * P
L = 10
TASK = TaskConfig.model_validate({
    "id": "pa", "threat_model": "shuffle", "K": K, "aggregation": "secure-sum",
    "secure_sum": "prio3",
    "policy": {"algo": "ddp-linucb", "d": D, "batch_size": L, "epsilon": 1000.0,
               "delta": 1e-6, "encoding": "centered", "intercept": C, "u_weight": 1.5,
               "intercept_coords": list(disjoint_intercept_coords(D, K))},
})


def disjoint_features(rng: np.random.Generator) -> list[list[float]]:
    """One user's K arms in disjoint blocks, x_a = e_a ⊗ (c, v_a), each arm's v_a of its own
    random norm up to √(1 − c²) (the norm's edge, where the entry ranges are tightest), so the
    device's choice varies between the arms."""
    X = np.zeros((K, D))
    for a in range(K):
        v = rng.normal(size=P - 1)
        v *= math.sqrt(1 - C * C) * rng.uniform(0.2, 1.0) / np.linalg.norm(v)
        X[a, a * P] = C
        X[a, a * P + 1:(a + 1) * P] = v
    return X.tolist()


async def test_per_arm_intercepts_through_device_shuffler_and_analyzer(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, [TASK])
    assert TASK.policy.intercept_coords == (0, 3)  # type: ignore[union-attr]
    rng = np.random.default_rng(40)
    async with stack(settings) as s:
        app = device_app(settings, httpx.ASGITransport(s.analyzer_app),
                         httpx.ASGITransport(s.shuffler_app))
        chosen = []
        async with running(app) as device:
            await eventually(lambda: ok(device.get("/healthz")), what="device ready")
            bad = disjoint_features(rng)
            bad[1][3] = 0.5  # arm 1's block starts with 0.5, not c
            resp = await device.post("/v1/tasks/pa/decide", json={"features": bad})
            assert resp.status_code == 422 and "feature_intercept" in resp.text, resp.text
            assert "[0, 3]" in resp.text
            for _ in range(2 * L):
                feats = disjoint_features(rng)
                resp = await device.post("/v1/tasks/pa/decide", json={"features": feats})
                assert resp.status_code == 200, resp.text
                dec = resp.json()
                reward = float(rng.integers(0, 2))
                resp = await device.post("/v1/tasks/pa/feedback", json={
                    "decision_id": dec["decision_id"], "reward": reward})
                assert resp.status_code == 202, resp.text
                chosen.append((np.asarray(feats[dec["action"]]), reward))
            await eventually(lambda: counted(s.analyzer, "pa", 2 * L), what="two batches")
        report = await privacy(s.analyzer, "pa")
        assert (report.reports_counted, report.reports_refused) == (2 * L, 0)
        assert "[0, 3]" in report.ledger.accounting
        state = s.analyzer_app.state.runtime.tasks["pa"].policy.get_state()
        X = np.array([x for x, _ in chosen])
        r = np.array([rr for _, rr in chosen])
        G, u = X.T @ X, X.T @ r
        # Noise: two batches of the aggregators' Skellam (σ ≈ 0.09 per entry and batch at
        # ε = 1000) and rounding (< 1/128 per report and entry); ũ adds ½/c × a sum of two
        # entries of G̃. 1.0 is over 5 standard deviations of the largest; rebuilding ũ with
        # x[0]'s column only (the single-intercept rule) would miss by ½/c × Σ x over arm 1's
        # users (≈ 0.35 per user of arm 1 on ũ[3]).
        np.testing.assert_allclose(np.asarray(state["G"]), G, atol=1.0)
        np.testing.assert_allclose(np.asarray(state["u"]), u, atol=1.0)
        assert 3 <= (X[:, 3] > 0).sum() <= 2 * L - 3  # both arms chosen, so both blocks count
