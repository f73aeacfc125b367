"""The device's decide endpoint and its refusals (the model answers locally, no network round
trip), health and status."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from privbandit.shared.settings import Settings
from tests.helpers import error

from .support import D, K, decide, features, stack, status


async def test_health_status_and_decide(settings: Settings) -> None:
    rng = np.random.default_rng(1)
    async with stack(settings) as s:
        health = (await s.device.get("/healthz")).json()
        assert health["status"] == "ok"
        st = await status(s.device)
        assert st == {
            "tasks": {"shuf": 0, "loc": 0, "cen": 0},
            "feedbacks": 0,
            "outbox_pending": 0,
            "uploaded": 0,
            "dropped": 0,
            "withheld": 0,
        }
        for task in ("shuf", "loc", "cen"):
            out = await decide(s.device, task, features(rng))
            # base64url of 0x01 | 12-byte nonce | d float64s sealed | 16-byte tag
            assert re.fullmatch(r"[A-Za-z0-9_-]+", out["decision_id"])
            assert len(out["decision_id"]) == -(-(1 + 12 + 8 * D + 16) * 4 // 3)
            assert 0 <= out["action"] < K
            assert out["model_version"] == 0
            assert out["propensity"] == 1.0  # a deterministic argmax


async def test_decide_picks_the_models_argmax(settings: Settings) -> None:
    # Version 0: θ̃ = 0, so the index is β‖x‖_{V⁻¹} with V = λI: the longest vector wins.
    async with stack(settings) as s:
        feats = [[0.1, 0.0, 0.0], [0.0, 0.9, 0.0], [0.0, 0.0, 0.5], [0.3, 0.3, 0.3]]
        assert (await decide(s.device, "cen", feats))["action"] == 1


async def test_a_tie_goes_to_the_lowest_index_with_probability_one(settings: Settings) -> None:
    # Rows 1 and 2 have the same norm, so the same version-0 index: the rule picks row 1, and
    # the choice is not a coin, so its propensity is 1.
    async with stack(settings) as s:
        feats = [[0.1, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 0.5], [0.2, 0.2, 0.2]]
        for _ in range(5):
            out = await decide(s.device, "cen", feats)
            assert (out["action"], out["propensity"]) == (1, 1.0)


async def test_decide_ids_are_unique(settings: Settings) -> None:
    rng = np.random.default_rng(2)
    async with stack(settings) as s:
        ids = {(await decide(s.device, "cen", features(rng)))["decision_id"] for _ in range(50)}
        assert len(ids) == 50


async def test_decide_works_without_the_analyzer(settings: Settings) -> None:
    """No network round trip: with the analyzer unreachable, decide still answers (version 0)
    while feedback, which needs the analyzer's key, is refused without changing state."""
    rng = np.random.default_rng(3)
    async with stack(settings, analyzer_up=False, wait_ready=False) as s:
        health = await s.device.get("/healthz")
        error(health, 503, "starting")
        out = await decide(s.device, "shuf", features(rng))
        assert out["model_version"] == 0
        resp = await s.device.post(
            "/v1/tasks/shuf/feedback", json={"decision_id": out["decision_id"], "reward": 1.0}
        )
        error(resp, 503, "no_hpke_key")
        assert (await status(s.device))["feedbacks"] == 0


BAD_DECIDE = [
    pytest.param("nope", {"features": [[0.1] * D] * K}, 404, "unknown_task", id="unknown-task"),
    pytest.param("Bad_Id!", {"features": [[0.1] * D] * K}, 404, "unknown_task", id="bad-task-id"),
    pytest.param("cen", {"features": [[0.1] * D] * (K - 1)}, 422, "wrong_arms", id="too-few-arms"),
    pytest.param("cen", {"features": [[0.1] * D] * (K + 1)}, 422, "wrong_arms", id="too-many"),
    pytest.param("cen", {"features": [[0.1] * (D + 1)] * K}, 422, "wrong_dimension", id="d+1"),
    pytest.param("cen", {"features": [[0.1] * D] * (K - 1) + [[0.1]]}, 422, "wrong_dimension",
                 id="ragged"),
    pytest.param("cen", {"features": [[0.1] * D] * (K - 1) + [[1.0, 1.0, 0.0]]}, 422,
                 "feature_norm", id="norm>L"),
    pytest.param("cen", {"features": [[0.1] * D] * (K - 1) + [[1e200, 1e200, 0.0]]}, 422,
                 "feature_norm", id="norm-overflow"),
    pytest.param("cen", {"features": [["a", 0.1, 0.1]] + [[0.1] * D] * (K - 1)}, 422,
                 "invalid_request", id="string"),
    pytest.param("cen", {"features": [[True, 0.1, 0.1]] + [[0.1] * D] * (K - 1)}, 422,
                 "invalid_request", id="bool"),
    pytest.param("cen", {"features": [0.1] * K}, 422, "invalid_request", id="flat"),
    pytest.param("cen", {"features": []}, 422, "invalid_request", id="empty"),
    pytest.param("cen", {}, 422, "missing_features", id="missing"),
    pytest.param("cen", {"features": [[0.1] * D] * K, "user": "x"}, 422, "invalid_request",
                 id="extra-field"),
    pytest.param("cen", [1, 2], 422, "invalid_request", id="not-an-object"),
]


@pytest.mark.parametrize(("task", "body", "code", "err"), BAD_DECIDE)
async def test_decide_rejects(settings: Settings, task: str, body: Any, code: int, err: str):
    async with stack(settings) as s:
        before = await status(s.device)
        error(await s.device.post(f"/v1/tasks/{task}/decide", json=body), code, err)
        assert await status(s.device) == before


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
async def test_decide_rejects_non_finite(settings: Settings, literal: str) -> None:
    row = "[0.1, 0.1, 0.1]"
    body = '{"features": [[' + literal + ", 0.1, 0.1], " + ", ".join([row] * (K - 1)) + "]}"
    async with stack(settings) as s:
        resp = await s.device.post(
            "/v1/tasks/cen/decide", content=body, headers={"Content-Type": "application/json"}
        )
        error(resp, 422)


async def test_malformed_bodies_and_routes(settings: Settings) -> None:
    async with stack(settings) as s:
        headers = {"Content-Type": "application/json"}
        error(await s.device.post("/v1/tasks/cen/decide", content=b"{not json",
                                         headers=headers), 422)
        error(await s.device.post("/v1/tasks/cen/decide", content=b"\xff\xfe",
                                         headers=headers), 422)
        huge = b'{"features": [' + b"0," * (3 * 1024 * 1024) + b"0]}"
        error(await s.device.post("/v1/tasks/cen/decide", content=huge, headers=headers),
                     413, "body_too_large")
        error(await s.device.get("/v1/nothing-here"), 404)
        error(await s.device.get("/v1/tasks/cen/decide"), 405)
        assert (await status(s.device))["feedbacks"] == 0


def test_check_features_names_the_first_bad_row() -> None:
    """The fast path converts and checks the whole matrix at once; a refusal still names the
    first offending row (and its norm), as the per-row checks did."""
    from privbandit.services.device.decisions import check_features
    from privbandit.services.device.errors import FeatureNorm, NotFinite, WrongDimension
    from privbandit.shared.settings import TaskConfig

    cfg = TaskConfig.model_validate({"id": "t", "threat_model": "none", "K": 4,
                                     "policy": {"algo": "linucb", "d": 3}})
    ok = [[0.1, 0.2, 0.3]] * 4
    assert check_features(cfg, ok).shape == (4, 3)
    with pytest.raises(WrongDimension, match="row 2 has 2"):
        check_features(cfg, [[0.1] * 3, [0.1] * 3, [0.1] * 2, [0.1] * 3])
    with pytest.raises(FeatureNorm, match=r"row 1 has \|\|x\|\| = 1\.5"):
        check_features(cfg, [[0.1] * 3, [1.2, 0.9, 0.0], [3.0, 0, 0], [0.1] * 3])
    with pytest.raises(FeatureNorm, match=r"row 3 has \|\|x\|\| = inf"):
        check_features(cfg, [[0.1] * 3] * 3 + [[1e200, 0.0, 0.0]])
    with pytest.raises(NotFinite):
        check_features(cfg, [[0.1] * 3] * 3 + [[float("nan"), 0.0, 0.0]])
    # On the boundary ‖x‖ = L (= 1 here): inside, as before.
    assert check_features(cfg, [[1.0, 0.0, 0.0]] * 4).shape == (4, 3)


async def test_an_exploring_task_draws_with_its_exact_propensity(tmp_path) -> None:
    """A task with ``exploration = "epsilon-greedy:0.4"`` (issue 42): at version 0 the argmax is
    row 1 (the longest vector), taken with probability 0.6 + 0.4/4 = 0.7, every other arm with
    0.1; over 600 decisions each arm's frequency is within 5 standard errors of that, and every
    answer carries its arm's exact probability."""
    from tests.helpers import central_task, make_settings

    task = central_task("exp").model_copy(update={"exploration": "epsilon-greedy:0.4"})
    settings = make_settings(tmp_path, [task])
    feats = [[0.1, 0.0, 0.0], [0.0, 0.9, 0.0], [0.0, 0.0, 0.5], [0.3, 0.3, 0.3]]
    expected = np.array([0.1, 0.7, 0.1, 0.1])
    counts = np.zeros(4)
    async with stack(settings) as s:
        for _ in range(600):
            out = await decide(s.device, "exp", feats)
            assert out["propensity"] == pytest.approx(expected[out["action"]])
            counts[out["action"]] += 1
    se = np.sqrt(expected * (1 - expected) / 600)
    assert np.all(np.abs(counts / 600 - expected) <= 5 * se), counts


def test_exploration_is_refused_where_it_does_not_apply() -> None:
    from pydantic import ValidationError

    from privbandit.shared.settings import TaskConfig

    base = {"id": "t", "threat_model": "none", "policy": {"algo": "linucb", "d": 3}}
    assert TaskConfig(**base, exploration="softmax:0.1").exploration == "softmax:0.1"
    with pytest.raises(ValidationError, match="write epsilon-greedy:EPS or softmax:TAU"):
        TaskConfig(**base, exploration="softmax")
    with pytest.raises(ValidationError, match="exploration is for the linear and GLB"):
        TaskConfig(id="m", threat_model="none", K=3, policy={"algo": "ucb", "K": 3},
                   exploration="epsilon-greedy:0.1")
