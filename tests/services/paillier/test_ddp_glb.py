"""``ddp-glb`` through the real services, in-process (the ``test_ddp`` stack: real device,
shuffler and analyzer, Paillier secure sum, devices' Skellam shares): the device seals the anchor
θ̂ of the model it decided with and releases the GLM statistics at it; the analyzer's state is
ddp-glb fed the batch sums; the model it publishes carries θ̂ = Π_S(θ̃) to the devices (the
``glb`` family), and its ledger is the accountant's at the GLM statistics' own bound."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from privbandit.shared.core.policies import build_policy, randomizer_for
from privbandit.shared.core.randomizers.glm_skellam import GLMSkellamRandomizer
from privbandit.shared.protocol.messages import GLBModelMessage
from privbandit.shared.protocol.paillier import EncryptedBatchSum
from privbandit.shared.settings import TaskConfig
from tests.helpers import assert_same_state, make_settings, privacy

from .test_ddp import DDP, L, ddp_stack, decrypt_values, play

# The practical encoding (frobenius: off-diagonals × √2); the upper one's statistics and ledger
# are the unit tests' (tests/shared/core/randomizers/test_glm_skellam.py).
DDP_GLB = TaskConfig.model_validate({**DDP.model_dump(), "policy": {
    "algo": "ddp-glb", "d": 3, "batch_size": L, "epsilon": 2000.0, "delta": 1e-6, "S": 3.0,
    "noise": "devices", "regularizer": "clip", "eta": 0.0, "encoding": "frobenius"}})


async def test_ddp_glb_devices_report_glm_statistics_at_their_anchor(tmp_path: Path) -> None:
    """Two batches of l = 10 (at ε = 2000, so that the shares are small enough to see each
    report's clean values): the first ten users decided with model 0 (θ̂ = 0, nothing is
    published before a batch of ten), so each of their reports decrypts to s·(upper(x xᵀ),
    (y − ½) x) — the GLM statistics at z = 0, not ddp-linucb's (upper(x xᵀ), y x) — plus a
    share; each later one to the statistics at the anchor of model 0 or model 1; the analyzer's
    state equals ddp-glb fed the two forwarded sums; the published model is a
    GLB model whose θ̂ is θ̃ projected on the S-ball; the ledger is the accountant at the GLM
    statistics' own frobenius bound (off-diagonals × √2, read by the device and the analyzer
    from the task)."""
    task = DDP_GLB
    settings = make_settings(tmp_path / "data", tasks=[task])
    rz = randomizer_for(task.policy)
    assert isinstance(rz, GLMSkellamRandomizer)
    rng = np.random.default_rng(40)
    async with ddp_stack(settings) as s:
        chosen, sent = await play(s, settings, rng, 2 * L + 3, 2 * L, "two batches")
        keys = s.keys(settings)
        values = np.array([decrypt_values(keys, s.config, r.ct, 1) for r in sent])
        # Each report is s·v(x, y, θ̂) rounded (within 1) plus a share: |share| < 8σ fails with
        # probability below 1e-14 per coordinate (Bernstein); at ε = 2000, 8σ + 1 ≈ 19. The
        # linear statistics (y x in place of (y − ½) x) would leave residuals s·½·x_i on the
        # vector part: mean square ≈ 64² · 0.64/3 ≈ 870 against σ² ≈ 5.
        sigma = math.sqrt(rz.share_variance)
        tol = 8 * sigma + 1
        iu = np.triu_indices(3)
        b = np.where(iu[0] == iu[1], 1.0, math.sqrt(2.0))  # written out, not the randomizer's
        at_zero = np.array([rz.scale * np.concatenate([b * np.outer(x, x)[iu], (r - 0.5) * x])
                            for x, r in chosen])
        linear = np.array([rz.scale * np.concatenate([b * np.outer(x, x)[iu], r * x])
                           for x, r in chosen])
        assert np.abs(values[:L] - at_zero[:L]).max() < tol
        glm_residual = float(np.mean((values[:L] - at_zero[:L]) ** 2))
        assert float(np.mean((values[:L] - linear[:L]) ** 2)) > 10 * glm_residual
        sums = [EncryptedBatchSum.model_validate(body) for path, body in s.to_analyzer.posts()
                if path.endswith("/batch-sums")]
        assert [b.count for b in sums] == [L, L]
        decoded = [decrypt_values(keys, s.config, b.ct, L) for b in sums]
        reference = build_policy(task.policy, np.random.default_rng(0))
        reference.ingest_statistic(decoded[0], L)
        # The later users decided with model 0 or model 1: each report is the statistics at
        # one of the two anchors (the model was published while they played).
        anchors = [np.zeros(3), reference.model.theta_hat]
        assert np.linalg.norm(anchors[1]) > 0.1
        for (x, r), row in zip(chosen[L:], values[L:], strict=True):
            at = [rz.scale * rz.statistics(np.concatenate([x, a])[None], np.array([r]))[0]
                  for a in anchors]
            assert min(np.abs(row - v).max() for v in at) < tol
        reference.ingest_statistic(decoded[1], L)
        assert_same_state(s.state(), reference.get_state())
        msg = GLBModelMessage.model_validate_json(
            (await s.analyzer.get("/v1/tasks/ddp/model")).content)
        assert msg.version == reference.model.version >= 1
        theta = np.asarray(msg.theta)
        expected = theta * min(1.0, 3.0 / float(np.linalg.norm(theta)))
        np.testing.assert_allclose(msg.theta_hat, expected, rtol=1e-12)
        report = await privacy(s.analyzer, "ddp")
        assert (report.reports_counted, report.reports_refused) == (2 * L, 0)
        p = report.ledger.model_dump()
        assert p["share_variance"] == rz.share_variance and p["central_epsilon"] <= 2000.0
        assert "GLM statistics" in p["accounting"] and "frobenius" in p["accounting"]
        assert p["central_epsilon"] == build_policy(task.policy).ledger().central_epsilon
