"""A service start as ``python -m`` against one forked by the launcher (``privbandit.forkstart``).

Measured for issue 21 before the launcher adopted forked starts: every service start of the test
suite (≥ 93 per run) paid ≈ 1.1 s of CPU for its imports (docs/benchmarks/test-suite.md, session
18). This starts the shuffler to ``/healthz`` alternately as ``python -m
privbandit.services.shuffler`` and through ``forkstart.start`` (a fork of the launcher's forkserver,
which imported ``forkstart.PRELOAD`` once), and prints each start's own CPU (``/proc``, read when
the service first answers): the forkserver's one preload is not counted, as it is paid once per
launcher. ``python -m bench.startup`` gives both as ratios to a bare app's start, with
``PRIVBANDIT_START_METHOD=exec`` for the first.

    python -m bench.forkserver_start [--repeat 3]

Linux only (``/proc``, the forkserver start method).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from privbandit import forkstart

TICK = os.sysconf("SC_CLK_TCK")
MODULE = "privbandit.services.shuffler"


def cpu(pid: int) -> float:
    """User + system CPU seconds of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(port: int) -> bool:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
    except urllib.error.HTTPError:
        return True  # it answered (not ready yet is still an answer)
    except OSError:
        return False
    return True


def wait_answers(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not answers(port):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no answer on port {port} within {timeout:.0f}s")
        time.sleep(0.05)


def service_env(port: int, root: str) -> dict[str, str]:
    return {**os.environ, "PRIVBANDIT_SHUFFLER__PORT": str(port),
            "PRIVBANDIT_DATA_DIR": tempfile.mkdtemp(dir=root),
            "PRIVBANDIT_SHUFFLER_TOKEN": secrets.token_urlsafe(32),
            "OPENBLAS_NUM_THREADS": "1"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    out: dict[str, list[float]] = {"python -m": [], "forkserver child": []}
    with tempfile.TemporaryDirectory(prefix="forkserver-start-") as root:
        for _ in range(args.repeat):
            start_both(root, out)
    for how, values in out.items():
        print(f"{how:17s} CPU to healthy: median {statistics.median(values):.2f} s "
              f"({', '.join(f'{v:.2f}' for v in values)})")
    print(json.dumps(out))


def start_both(root: str, out: dict[str, list[float]]) -> None:
    """One start each way, the service stopped after each; their CPU appended to ``out``."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", MODULE, "--host", "127.0.0.1", "--port", str(port)],
        env=service_env(port, root), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_answers(port)
    out["python -m"].append(cpu(proc.pid))
    proc.terminate()
    proc.wait()
    port = free_port()
    child = forkstart.start(MODULE, ["--host", "127.0.0.1", "--port", str(port)],
                            service_env(port, root), os.devnull)
    wait_answers(port)
    out["forkserver child"].append(cpu(child.pid))
    child.send_signal(signal.SIGTERM)
    child.wait()


if __name__ == "__main__":
    main()
