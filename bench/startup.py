"""Start-up to healthy of each service (issue 26 item 6), as ratios to a bare FastAPI app's.

A restart is only as fast as a service's imports and set-up, and recovery after a crash waits for
it. Each service of a local cluster (SQLite stores, the packaged default config, its data already
initialised) is restarted ``--repeats`` times in dependency order (analyzer, shuffler, device: the
device is healthy only once it holds the analyzer's key and models); for each start this measures
the wall time from ``Popen`` to the first 200 on ``/healthz`` and the CPU seconds the process spent
until then (``/proc/<pid>/stat``). The floor, interleaved with them: ``uvicorn`` serving this
module's ``app``, a FastAPI app whose only route is ``/healthz``. Figures are medians, as ratios
to the floor's (whose own figures are printed too). The services start as the launcher starts
them: forked from its forkserver (``privbandit/forkstart.py``), or with
``PRIVBANDIT_START_METHOD=exec`` as ``python -m privbandit.services.<name>``.

    python -m bench.startup [--repeats 5] [--json out/bench_startup.json]
"""

from __future__ import annotations

from fastapi import FastAPI

app = FastAPI()


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"service": "floor"}


def main() -> None:  # imports here: ``uvicorn bench.startup:app`` loads only FastAPI
    import os
    import platform
    import statistics
    import subprocess
    import sys
    import tempfile
    import time
    from pathlib import Path

    from bench.args import parse, write_json
    from privbandit.forkstart import Child
    from privbandit.launcher import SERVICES, Cluster, free_ports, healthy

    ticks = os.sysconf("SC_CLK_TCK")

    def cpu(pid: int) -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime

    def until_healthy(proc: Child, url: str, service: str | None,
                      t0: float) -> tuple[float, float]:
        while not healthy(url, timeout=1.0, service=service):
            if proc.poll() is not None:
                raise RuntimeError(f"{service or 'floor'} exited with {proc.returncode}")
            if time.monotonic() - t0 > 120:
                raise RuntimeError(f"{service or 'floor'} not healthy within 120 s")
            time.sleep(0.01)
        return time.monotonic() - t0, cpu(proc.pid)

    def floor() -> tuple[float, float]:
        (port,) = free_ports(1)
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "bench.startup:app", "--port", str(port),
             "--log-level", "warning"], env={**os.environ, "PYTHONPATH": "."})
        try:
            return until_healthy(proc, f"http://127.0.0.1:{port}", None, t0)
        finally:
            proc.terminate()
            proc.wait()

    args = parse(__doc__, {"repeats": 5}, "out/bench_startup.json")
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in ("floor", *SERVICES)}
    with tempfile.TemporaryDirectory() as tmp:
        ports = dict(zip(SERVICES, free_ports(len(SERVICES)), strict=True))
        cluster = Cluster(Path(tmp) / "data", ports, log_dir=Path(tmp) / "logs")
        with cluster:
            cluster.start(init=True, timeout=300)  # first start: keys and stores made
            env = cluster._child_env()
            for _ in range(args.repeats):
                for name in reversed(SERVICES):
                    cluster[name].stop()
                figures["floor"].append(floor())
                for name in SERVICES:
                    svc = cluster[name]
                    t0 = time.monotonic()
                    svc.start(env, cluster.python)
                    assert svc.proc is not None
                    figures[name].append(until_healthy(svc.proc, svc.url, name, t0))
    wall0 = statistics.median(w for w, _ in figures["floor"])
    cpu0 = statistics.median(c for _, c in figures["floor"])
    print(f"floor (bare FastAPI app under uvicorn): {wall0:.2f} s to healthy, {cpu0:.2f} s of CPU; "
          f"{platform.machine()}, load {os.getloadavg()[0]:.1f}")
    rows = {}
    for name in SERVICES:
        wall = statistics.median(w for w, _ in figures[name])
        cpus = statistics.median(c for _, c in figures[name])
        rows[name] = {"wall_s": round(wall, 3), "cpu_s": round(cpus, 3),
                      "wall_ratio": round(wall / wall0, 2), "cpu_ratio": round(cpus / cpu0, 2)}
        print(f"  {name:<9} {wall / wall0:5.2f}× the floor's wall time, "
              f"{cpus / cpu0:5.2f}× its CPU ({wall:.2f} s, {cpus:.2f} s)")
    write_json(args.json, {"floor": {"wall_s": round(wall0, 3), "cpu_s": round(cpu0, 3)},
                           "services": rows, "repeats": args.repeats})


if __name__ == "__main__":
    main()
