"""Crashes of either service: real ``python -m services.X`` processes on loopback, SIGKILL while
uploads and deliveries are in progress, every accepted report counted exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from privbandit.launcher import free_ports
from privbandit.shared.protocol.messages import (
    EncryptedReport,
    HpkeConfig,
    PrivacyReport,
    ShufflerStatus,
)
from tests.helpers import TOKEN, eventually, patience, report_maker

from .support import LOC, SHUF

# ---------------------------------------------------------------------------------------------
# Crashes of either service (real processes, SIGKILL)


class Service:
    """``python -m services.<name>`` as a child process on loopback."""

    def __init__(self, name: str, port: int, config: Path) -> None:
        self.name, self.port, self.config = name, port, config
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVBANDIT_")}
        env.update(PRIVBANDIT_CONFIG=str(self.config), PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", f"privbandit.services.{self.name}", "--port", str(self.port)],
            env=env
        )

    async def ready(self) -> None:
        async with asyncio.timeout(patience(30)), httpx.AsyncClient() as client:
            while True:
                try:
                    r = await client.get(f"http://127.0.0.1:{self.port}/healthz")
                    if r.status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


ROOT = Path(__file__).parents[3]


@pytest.mark.sqlite_only(
    reason="subprocesses from a config file with SQLite stores; on PostgreSQL the kill -9 "
    "campaign of tests/e2e/test_postgres.py covers crashes"
)
async def test_exactly_once_across_crashes_of_both_services(tmp_path: Path) -> None:
    """Every report the shuffler accepted is counted by the analyzer exactly once, although both
    processes are killed (SIGKILL) while uploads and deliveries are in progress."""
    a_port, s_port = free_ports(2)
    config = tmp_path / "privbandit.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\nshuffler_token = "{TOKEN}"\nlog_level = "warning"\n'
        "retry_initial = 0.05\nretry_max = 0.2\n"
        f'[analyzer]\nport = {a_port}\n[shuffler]\nport = {s_port}\n'
        '[[tasks]]\nid = "shuf"\nthreat_model = "shuffle"\nK = 4\n'
        '[tasks.policy]\nalgo = "sblb-fixed"\nd = 3\neps0 = 4.0\nbatch_size = 5\n'
        '[[tasks]]\nid = "loc"\nthreat_model = "ldp"\nK = 4\n'
        '[tasks.policy]\nalgo = "ldp-linucb"\nd = 3\nupdate_every = 2\n'
    )
    analyzer = Service("analyzer", a_port, config)
    shuffler = Service("shuffler", s_port, config)
    try:
        analyzer.start()
        shuffler.start()
        await analyzer.ready()
        await shuffler.ready()
        async with httpx.AsyncClient(timeout=patience(10)) as client:
            a_url, s_url = f"http://127.0.0.1:{a_port}", f"http://127.0.0.1:{s_port}"
            hpke = HpkeConfig.model_validate((await client.get(f"{a_url}/v1/hpke-config")).json())
            make = report_maker(hpke)
            sent = {"shuf": make(SHUF, 203), "loc": make(LOC, 61)}
            # Uploads of 1–3 reports; those whose answer was lost are re-sent later.
            chunks = [(task, reps[i : i + 3]) for task, reps in sent.items()
                      for i in range(0, len(reps), 3)]
            unanswered: list[tuple[str, list[EncryptedReport]]] = []

            async def send(task: str, reps: list[EncryptedReport]) -> None:
                try:
                    r = await client.post(f"{s_url}/v1/tasks/{task}/reports",
                                          json={"reports": [x.model_dump() for x in reps]})
                    if r.status_code != 202:
                        unanswered.append((task, reps))
                except httpx.TransportError:
                    unanswered.append((task, reps))

            async def crash_both() -> None:
                await asyncio.sleep(0.15)
                shuffler.kill()
                await asyncio.sleep(0.05)
                analyzer.kill()

            sem = asyncio.Semaphore(8)

            async def limited(task: str, reps: list[EncryptedReport]) -> None:
                async with sem:
                    await send(task, reps)

            await asyncio.gather(crash_both(), *(limited(t, r) for t, r in chunks))
            assert unanswered, "the crash should have interrupted some uploads"

            analyzer.start()
            shuffler.start()
            await analyzer.ready()
            await shuffler.ready()
            for task, reps in unanswered:  # a device retries what it has no 202 for
                r = await client.post(f"{s_url}/v1/tasks/{task}/reports",
                                      json={"reports": [x.model_dump() for x in reps]})
                assert r.status_code == 202

            async def drained() -> bool:
                st = ShufflerStatus.model_validate_json(
                    (await client.get(f"{s_url}/v1/status")).content)
                return all(t.batches_in_flight == 0 for t in st.tasks)

            await eventually(drained, timeout=30)
            status = ShufflerStatus.model_validate_json(
                (await client.get(f"{s_url}/v1/status")).content)
            for t in status.tasks:
                p = PrivacyReport.model_validate_json(
                    (await client.get(f"{a_url}/v1/tasks/{t.task}/privacy")).content)
                n = len(sent[t.task])
                # Identical ciphertexts were dropped, so the shuffler holds each report once...
                assert t.accepted == n
                assert t.pending == n % t.batch_size
                # ... and the analyzer counted each delivered report exactly once.
                assert p.reports_counted == n - t.pending
                assert p.batches == t.batches_acknowledged == n // t.batch_size
    finally:
        shuffler.kill()
        analyzer.kill()
