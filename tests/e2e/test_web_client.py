"""The browser client end to end (issue 41): the real services (analyzer, shuffler; CORS open
to the page's origin only), the demo page served as ``privbandit up --web`` serves it, and
Debian's headless Chromium driven by playwright-core (``clients/web/page/drive.mjs``; never a
browser download). 1,000 simulated users per task go through the device role *inside the
page* — decide, randomise, Prio3-shard or seal in the Web Worker, IndexedDB outbox, upload — on
an ``sblb`` task (HPKE reports, ε0 per batch length from a central target as the default
demo task) and a ``ddp-linucb`` task (Prio3 secure sum, the aggregators'
noise). Halfway through each, the page is reloaded while reports wait in its outbox and uploads
race the reload; halfway through the first, the analyzer also restarts (the page's model stream
breaks and must come back).

Checked: nothing lost or counted twice (sent by the page = accepted by the shuffler = counted +
refused + pending; the page's durable counters agree), the regret of the users within the
spread of the in-process simulator on the very same users (|z| < 4, as the demo's tests), the
model stream followed again after the restart, and the device's rules on a bounded task.

Skipped, saying why, only where Chromium is not installed (CI installs Debian's ``chromium``).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tomllib
from pathlib import Path

import httpx
import pytest
import tomli_w

from privbandit.demo.config import DemoOptions
from privbandit.demo.report import simulator_reference
from privbandit.launcher import local_cluster
from privbandit.shared.protocol.messages import TaskInfo
from privbandit.web_page import (
    WEB_ROOT,
    PageServer,
    build_page,
    drive_page,
    page_config,
    user_table,
)
from tests.helpers import E2E_CONFIG, SBLB_SCHEDULED, deadline, only_tasks, patience

CHROMIUM = Path("/usr/bin/chromium")
SBLB, DDP = "small-shuffle", "small-ddp"
TASK_IDS = (SBLB, DDP)
# The same sblb task with a bound of 2 reports per person (the device's rules, checked in-page).
BOUNDED = "web-sblb-bounded"
USERS = 1000
SEED = 11
# Users whose reports are held in the outbox when the page reloads (about two batches of 20).
HELD = 40

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason="Debian's chromium is not installed (apt-get install chromium): "
                              "the browser client's end-to-end test needs a real browser"),
]


def web_tools_missing() -> str | None:
    """Why the page cannot be built and driven here, or None."""
    if shutil.which("node") is None:
        return "Node.js is not installed"
    for package in ("esbuild", "playwright-core"):
        if not (WEB_ROOT / "node_modules" / package).is_dir():
            return f"clients/web/node_modules/{package} is missing: run `npm ci` in clients/web"
    return None


async def counts(urls: dict[str, str], task: str) -> dict[str, int]:
    """The shuffler's and the analyzer's counts of ``task`` (spec §6.2)."""
    async with httpx.AsyncClient(timeout=10.0) as client:
        shf = (await client.get(f"{urls['shuffler']}/v1/status")).json()
        prv = (await client.get(f"{urls['analyzer']}/v1/tasks/{task}/privacy")).json()
    queue = next(q for q in shf["tasks"] if q["task"] == task)
    return {
        "accepted": int(queue["accepted"]), "pending": int(queue["pending"]),
        "formed": int(queue["batches_formed"]), "acked": int(queue["batches_acknowledged"]),
        "in_flight": int(queue["batches_in_flight"]),
        "counted": int(prv["reports_counted"]), "refused": int(prv.get("reports_refused", 0)),
    }


async def settled(urls: dict[str, str], task: str, batch: int) -> dict[str, int]:
    """The counts once every formed batch is acknowledged and fewer than l reports wait, the
    same twice in a row."""
    until = deadline(120)
    last: dict[str, int] | None = None
    while True:
        now = await counts(urls, task)
        quiet = now["formed"] == now["acked"] and now["in_flight"] == 0 and now["pending"] < batch
        if quiet and now == last:
            return now
        last = now if quiet else None
        assert asyncio.get_running_loop().time() < until, f"never settled: {now}"
        await asyncio.sleep(0.3)


def test_a_thousand_users_per_task_through_the_page_with_a_reload(tmp_path: Path) -> None:
    missing = web_tools_missing()
    assert missing is None, missing
    folder = build_page()
    config = tomllib.loads(only_tasks(E2E_CONFIG, [SBLB, DDP]))
    sblb = next(t for t in config["tasks"] if t["id"] == SBLB)
    # As the default demo-shuffle: ε0 from a central target, growing batches (20, 40, 80, 160),
    # so the page randomises at the ε0 the analyzer publishes for the announced length.
    sblb["policy"] = {k: v for k, v in {**sblb["policy"], **SBLB_SCHEDULED}.items()
                      if v is not None}
    config["tasks"].append({**sblb, "id": BOUNDED,
                            "contributions": {"k": 2}})
    page = PageServer(folder)  # bound: its origin is known before the services start
    config["browser_origins"] = [page.origin]
    path = tmp_path / "web.toml"
    path.write_text(tomli_w.dumps(config))
    with page, local_cluster(tmp_path / "data", config=path, log_dir=tmp_path / "logs",
                             timeout=patience(60)) as cluster:
        urls = cluster.urls
        tasks = {}
        job_tasks = []
        for task_id in TASK_IDS:
            info = TaskInfo.model_validate(
                httpx.get(f"{urls['analyzer']}/v1/tasks/{task_id}", timeout=10).json())
            tasks[task_id] = info
            users = tmp_path / f"{task_id}.users.json"
            users.write_text(json.dumps(user_table(info, USERS, SEED)))
            job_tasks.append({"id": task_id, "users": str(users)})
        page.configure(page_config(urls["analyzer"], urls["shuffler"], [*TASK_IDS, BOUNDED]))
        job = {
            "url": page.origin, "chromium": str(CHROMIUM),
            "userDataDir": str(tmp_path / "chromium-profile"), "concurrency": 4,
            "reload": True, "held": HELD, "tasks": job_tasks,
            "drainSeconds": patience(120),
            "checks": {"task": BOUNDED, "users": job_tasks[0]["users"]},
        }
        # Halfway through the first task, the analyzer restarts: the page's model stream breaks,
        # it polls, and follows the stream again once the analyzer is back.
        result = drive_page(job, tmp_path, timeout=patience(900),
                            halfway=lambda: cluster.restart("analyzer", timeout=patience(60)))
        assert result["errors"] == [], result["errors"]
        # The device's rules, in the page (services/device's, docs/protocol.md §6.3): a second
        # feedback for one decision, a reward outside [0, 1], a missing user key and an unknown
        # decision refused (the refused ones leaving the decision open), the person's third
        # report withheld, another person's queued; a report re-sent from the outbox byte for
        # byte (a lost 202) is a duplicate at the shuffler.
        checks = result["checks"]
        assert checks["codes"] == ["decision_used", "reward_out_of_range", "missing_user",
                                   "unknown_decision"], checks
        assert checks["first"] and checks["second"] and checks["third"] and checks["bob"]
        assert checks["counters"] == {"feedbacks": 3, "withheld": 1, "uploaded": 3,
                                      "deadLettered": 0}, checks
        assert checks["resend"] == {"status": 202,
                                    "body": {"accepted": 0, "duplicates": 1, "refused": 0}}
        bounded = asyncio.run(counts(urls, BOUNDED))
        assert bounded["accepted"] == 3, bounded
        assert "atRestart" in result["tasks"][TASK_IDS[0]]
        for task_id, info in tasks.items():
            record = result["tasks"][task_id]
            final = record["final"]
            # The reload: reports were waiting in IndexedDB, and the page came back with them
            # and with its users' progress.
            before, after = record["beforeReload"], record["afterReload"]
            assert before["pending"] >= HELD, before
            assert after["progress"]["done"] == USERS // 2, after
            assert after["counters"]["feedbacks"] == before["counters"]["feedbacks"]
            # The page follows the model stream, and learned models reached it.
            assert final["streaming"], final
            assert final["modelVersion"] >= 1, final
            if "atRestart" in record:
                # After the analyzer's restart the stream came back and carried new models.
                # (Whether a newer model is published after the restart depends on the batches
                # and the rare-switching rule, and which path brought the models, stream or
                # poll, on timing: neither is asserted — two CI runs each failed one of them,
                # issue 41's note. The page must not go backwards.)
                assert record["streamingAgainAfter"] is not None, record
                assert final["modelVersion"] >= record["atRestart"]["modelVersion"], record
            # Everything left the page: each feedback queued once and accepted once.
            assert final["pending"] == 0, final
            assert final["progress"]["done"] == USERS
            sent = final["progress"]["sent"]
            assert sent == final["counters"]["feedbacks"] == USERS
            assert final["counters"]["uploaded"] == sent
            assert final["counters"]["deadLettered"] == 0
            # The services' side (spec §6.2): accepted = sent = counted + refused + pending.
            got = asyncio.run(settled(urls, task_id, info.max_batch))
            assert got["accepted"] == sent, (task_id, got, sent)
            assert got["counted"] + got["refused"] + got["pending"] == got["accepted"], got
            assert got["refused"] == 0, got
            assert got["counted"] >= sent - info.max_batch
            # The same users' regret, where the simulator on them lands.
            regret = final["progress"]["regret"]
            ref = simulator_reference(info, DemoOptions("shuffle", users=USERS, seed=SEED),
                                      regret)
            assert ref["demo_z"] is not None and abs(ref["demo_z"]) < 4, (task_id, regret, ref)
