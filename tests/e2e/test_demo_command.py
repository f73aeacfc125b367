"""End-to-end: the ``privbandit demo`` and ``privbandit up`` commands themselves, each on services
of its own (started by the command, or a ``fresh_cluster``) — not on the e2e package's shared
``cluster`` (``tests/e2e/test_demo.py``), so that the scheduler may run them on any worker."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import httpx
import numpy as np
import pytest

from privbandit.demo import DemoOptions, Driver, run_demo_against
from privbandit.launcher import SERVICES, Cluster, free_ports, healthy
from privbandit.shared.core.policies import randomizer_for
from privbandit.shared.crypto.hpke import ciphertext_length, pack_report, seal
from privbandit.shared.protocol.messages import EncryptedReport, HpkeConfig, b64decode, b64encode
from privbandit.shared.settings import TaskConfig
from tests.helpers import (
    E2E_PAILLIER_POOL,
    TASKS,
    cli,
    deadline,
    only_tasks,
    patience,
    wait_done,
)

pytestmark = pytest.mark.slow


# What ``fresh_cluster`` serves: the tasks this module's tests on it drive.
DRIVEN_TASKS = [TASKS["ldp"], TASKS["shuffle"]]


def test_demo_command_starts_fresh_services_and_writes_json(
    tmp_path: Path, e2e_config: Path
) -> None:
    """``privbandit demo --paper``: starts its own services on free ports with a temporary
    config using the paper's widths, and writes the spec §6 JSON and a plot."""
    out_json, out_png = tmp_path / "demo.json", tmp_path / "demo.png"
    code = cli([
        "demo", "--threat-model", "shuffle", "--users", "150", "--concurrency", "3",
        "--config", str(e2e_config), "--paper", "--no-progress", "--seed", "3",
        "--json", str(out_json), "--plot", str(out_png), "--logs", str(tmp_path / "logs"),
    ])
    assert code == 0
    # --logs: the services' logs stay where asked (the fresh data directory is gone).
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == [
        "analyzer.log", "device.log", "shuffler.log"]
    # (empty here: the e2e config logs at level warning, and a clean run warns of nothing)
    out = json.loads(out_json.read_text())
    for key in ("final_regret", "regret_curve", "privacy", "users_per_second",
                "reconciliation", "threat_model", "task", "users", "concurrency", "params",
                "wall_seconds"):
        assert key in out, key
    rec = out["reconciliation"]
    assert {"feedbacks_sent", "reports_accepted", "reports_counted", "reports_refused",
            "reports_pending", "batches", "model_versions"} <= set(rec)
    assert rec["feedbacks_sent"] == rec["reports_accepted"] == 150
    # Fresh services: everything counted from zero, 150 = 7 batches of 20 + 10 pending.
    assert rec["reports_counted"] == 140 and rec["reports_pending"] == 10 and rec["batches"] == 7
    assert out["params"]["confidence_scale"] == 1.0 and out["params"]["regularizer"] == "paper"
    assert out["paper"] is True
    assert out_png.stat().st_size > 1000
    # Services of its own, started afresh: compared with the simulator on the same users.
    assert out["simulator_reference"]["runs"] == 20 and "simulator_reference_note" not in out


@pytest.mark.parametrize("paper", [False, True])
def test_demo_central_runs_the_packaged_defaults(
    tmp_path: Path, paper: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``demo-central`` of the packaged config over real HTTP: adar-oful's practical settings
    (first release after ⌈50 σ_Y/L⌉ = 250 reports at (α, ε) = (10, 0.2), C = 8, width 0.1;
    issue 22) — or with ``--paper`` Alg. 4's (1, 0.5, width 1) — reconcile exactly, release a
    model, and keep the task's ledger either way."""
    from privbandit.shared.settings import DEFAULT_CONFIG

    # The e2e device pool (``E2E_PAILLIER_POOL``) for the config's two secure-sum tasks, which
    # this run does not drive; the services inherit the environment.
    monkeypatch.setenv("PRIVBANDIT_DEVICE_TIMING__PAILLIER_POOL", str(E2E_PAILLIER_POOL))

    out_json = tmp_path / "central.json"
    code = cli(["demo", "--task", "demo-central", "--users", "300", "--concurrency", "4",
                "--config", str(DEFAULT_CONFIG), "--fresh", "--no-progress", "--seed", "2",
                "--json", str(out_json), *(["--paper"] if paper else [])])
    assert code == 0
    out = json.loads(out_json.read_text())
    rec = out["reconciliation"]
    assert rec["consistent"] and rec["feedbacks_sent"] == rec["reports_counted"] == 300, rec
    params = out["params"]
    want = (1, 0.5, 1.0) if paper else (250, 8.0, 0.1)
    assert (params["first_episode"], params["switching"], params["confidence_scale"]) == want
    assert rec["model_versions"] >= (2 if paper else 1)
    assert out["privacy"]["rdp_alpha"] == 10 and out["privacy"]["rdp_epsilon"] == 0.2
    assert 0.89 < out["privacy"]["central_epsilon"] < 0.91


def test_demo_json_reconciles_refused_reports(fresh_cluster: Cluster) -> None:
    """Reports the analyzer refuses are part of the reconciliation: while the demo's users run,
    someone uploads forged ``ldp`` reports straight to the shuffler (correctly sealed, values
    ±1e300, and random bytes under the analyzer's key id). The shuffler cannot tell them from
    reports and accepts them; the analyzer refuses them, and the demo JSON shows
    accepted = counted + refused + pending — and that more was accepted than its users sent."""
    urls = fresh_cluster.urls
    task_id = TASKS["ldp"]
    users = 120

    async def forge(driver: Driver) -> None:
        await wait_done(driver, users // 3)
        async with httpx.AsyncClient(timeout=patience(10)) as c:
            r = await c.get(f"{urls['analyzer']}/v1/hpke-config")
            hpke = HpkeConfig.model_validate_json(r.content)
            info = (await c.get(f"{urls['analyzer']}/v1/tasks/{task_id}")).json()
            config = TaskConfig.model_validate(
                {k: info[k] for k in ("id", "threat_model", "K", "policy")})
            width = randomizer_for(config.policy).width
            pk = b64decode(hpke.public_key)
            forged = [seal(pk, hpke.key_id, task_id, pack_report(
                np.full(width, v).astype("<f8").tobytes())[1]) for v in (1e300, -1e300)]
            forged.append(EncryptedReport(
                key_id=hpke.key_id, enc=b64encode(secrets.token_bytes(32)),
                ct=b64encode(secrets.token_bytes(ciphertext_length(8 * width)))))
            body = {"reports": [f.model_dump() for f in forged]}
            r = await c.post(f"{urls['shuffler']}/v1/tasks/{task_id}/reports", json=body)
            assert r.status_code == 202 and r.json()["accepted"] == 3, r.text

    opts = DemoOptions("ldp", users=users, concurrency=4, seed=11, progress=False,
                       settle_timeout=patience(60))
    out = asyncio.run(run_demo_against(urls, task_id, opts, driver_hook=forge))
    rec = out["reconciliation"]
    assert rec["feedbacks_sent"] == users
    assert (rec["reports_accepted"], rec["reports_counted"], rec["reports_refused"],
            rec["reports_pending"]) == (users + 3, users, 3, 0)
    assert rec["reports_counted"] + rec["reports_refused"] + rec["reports_pending"] == (
        rec["reports_accepted"])
    # The one problem: three reports came from elsewhere than the demo's users.
    assert rec["problems"] == [
        f"reports_accepted ({users + 3}) + feedbacks_withheld (0) != feedbacks_sent ({users})"]
    assert not rec["consistent"]
    privacy = httpx.get(f"{urls['analyzer']}/v1/tasks/{task_id}/privacy").json()
    assert privacy["reports_refused"] == 3 and privacy["batches"] == users + 3
    model = httpx.get(f"{urls['analyzer']}/v1/tasks/{task_id}/model").json()
    assert model["version"] == rec["model_versions"] >= 1
    assert max(abs(v) for v in model["theta"]) < 1e6


def test_demo_command_rejects_a_missing_threat_model_task(tmp_path: Path) -> None:
    cfg = tmp_path / "only-central.toml"
    cfg.write_text('[[tasks]]\nid = "c"\nthreat_model = "central"\nK = 3\n'
                   '[tasks.policy]\nalgo = "adar-oful"\nd = 2\n')
    assert cli(["demo", "--threat-model", "shuffle", "--users", "5", "--config", str(cfg),
                 "--no-progress"]) == 2


def test_up_runs_until_interrupted(tmp_path: Path, e2e_config: Path) -> None:
    """``privbandit up`` starts the three services at the configured addresses and stops them
    all on Ctrl-C (SIGINT)."""
    ports = dict(zip(SERVICES, free_ports(3), strict=True))
    env = dict(os.environ)
    for name, port in ports.items():
        env[f"PRIVBANDIT_{name.upper()}__PORT"] = str(port)
    config = tmp_path / "up.toml"  # one task: what it serves is not the point here
    config.write_text(only_tasks(e2e_config.read_text(), [TASKS["ldp"]]))
    code = ("import sys; from tests.helpers import cli; "
            "sys.exit(cli(sys.argv[1:]))")
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "up", "--config", str(config),
         "--data-dir", str(tmp_path / "data")],
        env=env, cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    urls = {n: f"http://127.0.0.1:{p}" for n, p in ports.items()}
    lines: list[str] = []
    # Read the output in a thread: the services answer /healthz a moment before the launcher
    # itself has seen them all healthy and printed its banner, so wait for the banner (a SIGINT
    # before it would interrupt the start-up, which is another code path).
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        until = deadline(60)
        while not any("Ctrl-C stops all three" in line for line in list(lines)):
            assert proc.poll() is None, "".join(lines)
            assert time.monotonic() < until, "services did not come up"
            time.sleep(0.1)
        assert all(healthy(u) for u in urls.values())
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=patience(30))
        reader.join(timeout=patience(10))
        out = "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert "privbandit is up" in out and urls["device"] in out
    assert not any(healthy(u, timeout=patience(0.5)) for u in urls.values())
    # Each service kept its state in its own place under the data directory.
    assert (tmp_path / "data" / "device" / "device.sqlite3").exists()


def test_demo_on_services_it_did_not_start_warns_and_does_not_compare(
    fresh_cluster: Cluster, e2e_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 26 item 8: services found running (``privbandit up``) may have learned from earlier
    users, so a fresh-start simulator is no reference: the demo says so and compares nothing."""
    import tomli_w

    from privbandit.demo.run import NOT_COMPARED

    data = tomllib.loads(e2e_config.read_text())
    for name in SERVICES:  # the config that names the running services' addresses
        data.setdefault(name, {})["port"] = fresh_cluster[name].port
    cfg = tmp_path / "running.toml"
    cfg.write_text(tomli_w.dumps(data))
    out_json = tmp_path / "demo.json"
    code = cli(["demo", "--threat-model", "shuffle", "--users", "40", "--config", str(cfg),
                "--no-progress", "--json", str(out_json)])
    assert code == 0
    out = json.loads(out_json.read_text())
    assert out["simulator_reference"] is None
    assert out["simulator_reference_note"] == NOT_COMPARED
    captured = capsys.readouterr()
    printed, warned = " ".join(captured.out.split()), " ".join(captured.err.split())
    assert "using the running services" in printed
    assert warned.startswith("warning: these services were not started by this demo")
    assert "is not compared with the simulator" in warned
    assert "simulator — (not compared: these services were not started" in printed
