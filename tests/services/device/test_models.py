"""Model following (new versions reach decide), metrics and the status message."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from privbandit.services.device import create_app as create_device
from privbandit.shared.settings import Settings
from tests.helpers import auth, central_task, eventually, make_settings, report_maker, running

from .support import D, K, Stack, decide, features, give_feedbacks, outbox_empty, stack, status


async def test_device_follows_new_models(settings: Settings) -> None:
    """Batches posted to the analyzer publish new models; the device picks them up (by ETag
    polling here, since an in-process transport cannot stream) and decides with them."""
    async with stack(settings) as s:
        hpke = (await s.analyzer.get("/v1/hpke-config")).json()
        from privbandit.shared.protocol.messages import HpkeConfig

        make = report_maker(HpkeConfig.model_validate(hpke), seed=3)
        cfg = central_task()
        for i in range(40):
            body = {"batch_id": f"{i:032x}",
                    "reports": [r.model_dump() for r in make(cfg, 1)]}
            resp = await s.analyzer.post("/v1/tasks/cen/batches", json=body, headers=auth())
            assert resp.status_code == 200, resp.text
        target = (await s.analyzer.get("/v1/tasks/cen/model")).json()["version"]
        assert target > 0
        await eventually(lambda: _version_is(s, "cen", target), what="model update")
        out = await decide(s.device, "cen", features(np.random.default_rng(0)))
        assert out["model_version"] == target
        metrics = (await s.device.get("/metrics")).text
        assert f'privbandit_device_model_version{{task="cen"}} {float(target)}' in metrics


async def _version_is(s: Stack, task: str, version: int) -> bool:
    return (await status(s.device))["tasks"][task] == version


async def test_metrics(settings: Settings) -> None:
    rng = np.random.default_rng(13)
    async with stack(settings) as s:
        await give_feedbacks(s, "loc", 3, rng)
        await s.device.post("/v1/tasks/nope/decide", json={"features": [[0.0] * D] * K})
        await eventually(lambda: outbox_empty(s), what="delivery")
        text = (await s.device.get("/metrics")).text
        assert 'privbandit_device_decisions_total{task="loc"} 3.0' in text
        assert 'privbandit_device_feedbacks_total{task="loc"} 3.0' in text
        assert 'privbandit_device_requests_rejected_total{code="unknown_task"} 1.0' in text
        assert 'privbandit_device_upload_events_total{event="uploaded"} 3.0' in text
        # Two apps in one process keep separate registries.
        other = create_device(make_settings(Path(settings.data_dir).parent / "other"))
        async with running(other) as c2:
            text2 = (await c2.get("/metrics")).text
            assert 'privbandit_device_decisions_total{task="loc"}' not in text2


async def test_status_is_json_of_the_protocol_message(settings: Settings) -> None:
    """``/v1/status`` is exactly the protocol's ``DeviceStatus`` (including ``dropped``)."""
    async with stack(settings) as s:
        body = (await s.device.get("/v1/status")).json()
        from privbandit.shared.protocol.messages import DeviceStatus

        status = DeviceStatus.model_validate_json(json.dumps(body))
        assert status.dropped == 0 and set(body) == set(DeviceStatus.model_fields)
