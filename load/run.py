"""``make load``: every Locust scenario of ``load/locustfile.py`` against fresh local services and
against the bare floor (``load/bare.py``), with the same client, in the same run.

For each scenario it runs Locust headless (bounded by users, spawn rate and time; loopback only),
reads its CSV, and reports throughput and latency percentiles of the service as ratios to the
floor.

The services run with a configuration of their own (``LOAD_CONFIG`` below, written to a temporary
file), not the demo's:

- ``load-shuffle``: a ``shuffle`` task with ``aggregation = "reports"`` and ``batch_size = 1000``,
  for the shuffler-intake scenario: a batch is formed (and forwarded to the analyzer, whose ingest
  competes for the same cores) only once per 1000 reports, so the run measures intake itself;
- ``demo-ldp``: the demo's ldp task (pass-through), for model fetch and the device scenarios;
- ``load-sum``: a ``paillier`` task (``secure_sum = "paillier"``); during the ``decide-refill``
  scenario feeder threads send feedback on it at a fixed total rate (``--refill-rate``), so the
  device refills its Paillier pool throughout while Locust measures ``decide``. Every run starts
  once the device's initial pool is full.

After the shuffler-intake run it waits for the pipeline to settle and checks that nothing the
shuffler accepted was lost: the reports it accepted during the run (at least every report answered
202) equal the analyzer's counted + refused plus the shuffler's pending ones.

Each scenario runs ``--rounds`` (floor, service) pairs back to back, so both runs of a pair see
the same machine load; the pair with the median throughput ratio is the headline, every pair is
kept. Besides Locust's rates and percentiles, each run records the CPU time per request of the
server process (``/proc/<pid>/stat``) and of the Locust client, which on a shared machine
varies much less than the rates.

With ``--profile`` the target service of each scenario is sampled by py-spy during its run
(``load/profile.py``): collapsed stacks in ``<json dir>/profile/<scenario>.txt`` and a summary of
the top functions in the JSON.

    python load/run.py [--time 20] [--rounds 2] [--only decide,...] [--json out/load/summary.json]
                       [--profile]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Measure the checkout this script belongs to, whatever an editable install points at (the
# launcher starts the services from wherever ``privbandit`` was imported).
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

import httpx  # noqa: E402
import numpy as np  # noqa: E402

from load.profile import parse, record, summary  # noqa: E402
from privbandit.launcher import Cluster, free_ports, healthy, local_cluster  # noqa: E402

INTAKE_TASK = "load-shuffle"  # l = 1000, HPKE reports: forwarding is rare
DEVICE_TASK = "demo-ldp"  # the demo's pass-through task
SUM_TASK = "load-sum"  # paillier: the device keeps a Paillier pool for it
FEEDERS = 4  # threads feeding Paillier feedback during decide-refill

LOAD_CONFIG = f"""\
# load/run.py's deployment (ports and data directory come from the environment).
log_level = "warning"

[[tasks]]
id = "{INTAKE_TASK}"
threat_model = "shuffle"
K = 20
aggregation = "reports"
[tasks.policy]
algo = "sblb"
d = 5
eps0 = 8.0
batch_size = 1000
confidence_scale = 0.1
regularizer = "clip"

[[tasks]]
id = "{DEVICE_TASK}"
threat_model = "ldp"
K = 20
[tasks.policy]
algo = "ldp-linucb"
d = 5
epsilon = 4.0
delta = 1e-6
update_every = 100
confidence_scale = 0.1
regularizer = "clip"

[[tasks]]
id = "{SUM_TASK}"
threat_model = "shuffle"
K = 20
aggregation = "secure-sum"
# The Paillier transport: the decide-refill scenario measures its pool refill (prio3 has none).
secure_sum = "paillier"
[tasks.policy]
algo = "sblb"
d = 5
eps0 = 30.0
m = 1
batch_size = 1000
confidence_scale = 0.1
regularizer = "clip"
"""


@dataclass(frozen=True)
class Scenario:
    name: str
    user_class: str
    service: str  # which service it targets
    users: int
    task: str
    refill: bool = False  # feed Paillier feedback meanwhile (the device refills its pool)


SCENARIOS = [
    Scenario("shuffler-intake", "ShufflerIntake", "shuffler", 32, INTAKE_TASK),
    Scenario("model-fetch", "ModelFetch", "analyzer", 32, DEVICE_TASK),
    Scenario("decide", "Decide", "device", 50, DEVICE_TASK),
    Scenario("decide-refill", "Decide", "device", 50, DEVICE_TASK, refill=True),
    Scenario("device-flow", "DeviceFlow", "device", 50, DEVICE_TASK),
]


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system, all threads) a process has used so far; None where
    ``/proc/<pid>/stat`` cannot be read (not Linux, or the process is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    # Fields 14 and 15 (utime, stime) of proc(5), counted after the ")" that ends the name.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_locust(s: Scenario, host: str, seconds: int, out: Path, env: dict[str, str],
               server_pid: int | None = None) -> dict:
    """One headless Locust run of ``s`` against ``host``: its CSV's throughput and latency
    percentiles, with the CPU time per request of the server (``server_pid``) and of the Locust
    client, and the machine's 1-minute load average when the run ends."""
    prefix = out / f"{s.name}-{'bare' if 'bare' in env.get('LOAD_TARGET', '') else 'service'}"
    cmd = [sys.executable, "-m", "locust", "-f", str(HERE / "locustfile.py"), s.user_class,
           "--headless", "-u", str(s.users), "-r", str(s.users),
           "--host", host, "--csv", str(prefix), "--only-summary", "--stop-timeout", "5",
           "--loglevel", "WARNING"]
    server0 = cpu_seconds(server_pid) if server_pid is not None else None
    client0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # The time limit is the locustfile's (LOAD_SECONDS), counted once its set-up is done.
    env = {**env, "LOAD_SECONDS": str(seconds)}
    proc = subprocess.run(cmd, env=env, check=False, timeout=seconds + 120,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    client1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    Path(f"{prefix}_stderr.txt").write_bytes(proc.stderr)
    server1 = cpu_seconds(server_pid) if server_pid is not None else None
    with open(f"{prefix}_stats.csv", newline="") as fh:
        rows = {row["Name"]: row for row in csv.DictReader(fh)}
    agg = rows["Aggregated"]
    if int(agg["Request Count"]) == 0:
        raise RuntimeError(f"{s.name}: Locust sent no request to {host} (see "
                           f"{prefix}_exceptions.csv)\n"
                           f"{proc.stderr.decode(errors='replace')[-2000:]}")
    n = int(agg["Request Count"])
    client_cpu = (client1.ru_utime + client1.ru_stime) - (client0.ru_utime + client0.ru_stime)
    return {
        "requests": n,
        "failures": int(agg["Failure Count"]),
        "rps": float(agg["Requests/s"]),
        "p50_ms": float(agg["50%"]),
        "p99_ms": float(agg["99%"]),
        "server_cpu_ms": (1000 * (server1 - server0) / n
                          if server0 is not None and server1 is not None else None),
        "client_cpu_ms": 1000 * client_cpu / n,
        "load1": os.getloadavg()[0],
        "by_name": {n: {"rps": float(r["Requests/s"]), "p50_ms": float(r["50%"]),
                        "p99_ms": float(r["99%"])}
                    for n, r in rows.items() if n != "Aggregated"},
    }


def shuffler_counts(shuffler: str, task: str) -> tuple[int, int]:
    """(accepted, pending) of a task at the shuffler."""
    body = httpx.get(f"{shuffler}/v1/status", timeout=10).json()
    (queue,) = [q for q in body["tasks"] if q["task"] == task]
    return int(queue["accepted"]), int(queue["pending"])


def counted(analyzer: str, task: str) -> int:
    """Reports of a task the analyzer counted or refused."""
    body = httpx.get(f"{analyzer}/v1/tasks/{task}/privacy", timeout=10).json()
    return int(body["reports_counted"]) + int(body.get("reports_refused", 0))


def settle(urls: dict[str, str], task: str, timeout: float = 120.0) -> tuple[int, int, int]:
    """(accepted, pending, counted) once every formed batch of ``task`` is counted: accepted −
    pending stops moving away from counted (or ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        accepted, pending = shuffler_counts(urls["shuffler"], task)
        n = counted(urls["analyzer"], task)
        if n + pending >= accepted or time.monotonic() > deadline:
            return accepted, pending, n
        time.sleep(0.5)


def no_loss(urls: dict[str, str], task: str, before: tuple[int, int, int], answered_202: int
            ) -> dict[str, int | bool]:
    """Nothing the shuffler accepted during a run is lost: accepted = counted (+ refused) +
    pending, and it accepted at least every report Locust saw answered 202 (a request cut at the
    end of the run may have been stored without its answer being seen)."""
    accepted, pending, n = settle(urls, task)
    rec = {
        "accepted_202": answered_202,
        "shuffler_accepted": accepted - before[0],
        "counted_or_refused": n - before[2],
        "pending": pending - before[1],
    }
    rec["consistent"] = bool(
        rec["shuffler_accepted"] >= answered_202
        and rec["counted_or_refused"] + rec["pending"] == rec["shuffler_accepted"]
    )
    return rec


class Feeder(threading.Thread):
    """decide + feedback on the Paillier task at a fixed rate: every feedback takes one Paillier
    obfuscator from the device's pool, which the device refills in the background."""

    def __init__(self, device: str, task: str, K: int, d: int, rate: float, seed: int = 0
                 ) -> None:
        super().__init__(name="refill-feeder", daemon=True)
        self.device, self.task, self.K, self.d, self.rate = device, task, K, d, rate
        self.seed = seed
        self.stop_event = threading.Event()
        self.sent = self.failed = 0

    def run(self) -> None:
        rng = np.random.default_rng(self.seed)
        with httpx.Client(base_url=self.device, timeout=30) as client:
            next_at = time.monotonic()
            while not self.stop_event.is_set():
                x = rng.normal(size=(self.K, self.d))
                x /= np.linalg.norm(x, axis=1, keepdims=True)
                try:
                    r = client.post(f"/v1/tasks/{self.task}/decide", json={"features": x.tolist()})
                    r.raise_for_status()
                    r = client.post(f"/v1/tasks/{self.task}/feedback",
                                    json={"decision_id": r.json()["decision_id"],
                                          "reward": float(rng.uniform())})
                    r.raise_for_status()
                    self.sent += 1
                except httpx.HTTPError:
                    self.failed += 1
                next_at += 1.0 / self.rate
                self.stop_event.wait(max(0.0, next_at - time.monotonic()))


def device_metric(device: str, name: str, task: str | None = None) -> float:
    """One sample of the device's Prometheus metrics (0 if absent)."""
    text = httpx.get(f"{device}/metrics", timeout=10).text
    want = f'privbandit_device_{name}' + (f'{{task="{task}"}}' if task else "")
    for line in text.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    return 0.0


def wait_pool_full(device: str, target: int = 256, timeout: float = 180.0) -> None:
    """Until the device's first Paillier pool is computed (it would compete with the first run)."""
    deadline = time.monotonic() + timeout
    while (device_metric(device, "paillier_pool", SUM_TASK) < target
           and time.monotonic() < deadline):
        time.sleep(0.5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time", type=int, default=20, help="seconds per run (default 20)")
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--refill-rate", type=float, default=40.0,
                    help="Paillier feedbacks per second during decide-refill (default 40)")
    ap.add_argument("--json", type=Path, default=Path("out/load/summary.json"))
    ap.add_argument("--rounds", type=int, default=1,
                    help="(floor, service) run pairs per scenario; the median is reported")
    ap.add_argument("--profile", action="store_true",
                    help="sample each scenario's service with py-spy during its run")
    args = ap.parse_args()
    if not 1 <= args.time <= 600:
        ap.error("--time must be 1..600 seconds")
    if not 1 <= args.rounds <= 10:
        ap.error("--rounds must be 1..10")
    if not 0 < args.refill_rate <= 200:
        ap.error("--refill-rate must be in (0, 200]")
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - {s.name for s in SCENARIOS}
    if unknown:
        ap.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    chosen = [s for s in SCENARIOS if not names or s.name in names]
    out = args.json.parent
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "load.toml"
        config.write_text(LOAD_CONFIG)
        with local_cluster(Path(tmp) / "data", config=config, log_dir=Path(tmp) / "logs") as cl:
            results = run_all(chosen, cl, args)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.json}")
    lost = [r["no_loss"] for r in results.values() if "no_loss" in r]
    for rec in lost:
        if not rec["consistent"]:
            print(f"error: the shuffler accepted {rec['shuffler_accepted']} reports "
                  f"({rec['accepted_202']} answered 202), {rec['counted_or_refused']} counted, "
                  f"{rec['pending']} pending", file=sys.stderr)
    return 0 if all(rec["consistent"] for rec in lost) else 1


def run_all(chosen: list[Scenario], cl: Cluster, args: argparse.Namespace) -> dict[str, dict]:
    (port,) = free_ports(1)
    bare_url = f"http://127.0.0.1:{port}"
    bare = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "load.bare:app", "--host", "127.0.0.1", "--port",
         str(port), "--log-level", "warning", "--no-access-log"],
        cwd=HERE.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    results: dict[str, dict] = {}
    try:
        deadline = time.monotonic() + 30
        while not healthy(bare_url) and time.monotonic() < deadline:
            time.sleep(0.2)
        wait_pool_full(cl.urls["device"])
        for s in chosen:
            row = run_scenario(s, cl, (bare_url, bare.pid), args)
            results[s.name] = row
            print(describe(row), flush=True)
    finally:
        bare.terminate()
        bare.wait(10)
    return results


def run_scenario(s: Scenario, cl: Cluster, bare: tuple[str, int], args: argparse.Namespace
                 ) -> dict:
    """``args.rounds`` rounds of (floor run, service run), back to back so that both of a round
    see the same machine load; the headline figures are the round with the median throughput
    ratio, every round is kept under ``rounds``."""
    urls, out = cl.urls, args.json.parent
    env = {**os.environ, "LOAD_ANALYZER": urls["analyzer"], "PYTHONPATH": str(HERE.parent),
           "LOAD_TASK": s.task}
    before = None
    if s.name == "shuffler-intake":
        before = (*shuffler_counts(urls["shuffler"], s.task), counted(urls["analyzer"], s.task))
    rounds = []
    for r in range(args.rounds):
        floor = run_locust(s, bare[0], args.time, out, {**env, "LOAD_TARGET": "bare"},
                           server_pid=bare[1])
        real, extra = service_run(s, cl, args, env, profile=args.profile and r == 0)
        rounds.append({
            "service": real, "floor": floor, **extra,
            "throughput_ratio": real["rps"] / floor["rps"] if floor["rps"] else None,
            "p99_ratio": real["p99_ms"] / floor["p99_ms"] if floor["p99_ms"] else None,
            "cpu_ratio": (real["server_cpu_ms"] / floor["server_cpu_ms"]
                          if real["server_cpu_ms"] and floor["server_cpu_ms"] else None),
        })
    ranked = sorted(rounds, key=lambda rd: rd["throughput_ratio"] or 0.0)
    row = {"scenario": s.name, "users": s.users, "seconds": args.time, "task": s.task,
           **ranked[(len(ranked) - 1) // 2], "rounds": rounds}
    if before is not None:
        answered = sum(rd["service"]["requests"] - rd["service"]["failures"] for rd in rounds)
        row["no_loss"] = no_loss(urls, s.task, before, answered)
    return row


def service_run(s: Scenario, cl: Cluster, args: argparse.Namespace, env: dict[str, str],
                profile: bool) -> tuple[dict, dict]:
    """One Locust run against the scenario's service (with the Paillier feeders of a refill
    scenario, and py-spy if ``profile``): its figures, and what the feeders or py-spy saw."""
    urls, out = cl.urls, args.json.parent
    pid = cl[s.service].pid
    extra: dict[str, object] = {}
    feeders: list[Feeder] = []
    if s.refill:
        # A few threads, so the rate holds while the device is busy.
        feeders = [Feeder(urls["device"], SUM_TASK, 20, 5, args.refill_rate / FEEDERS, i)
                   for i in range(FEEDERS)]
        computed0 = device_metric(urls["device"], "paillier_computed", SUM_TASK)
        for f in feeders:
            f.start()
    spy, spied = None, out / "profile" / f"{s.name}.txt"
    if profile and pid is not None:
        spy = record(pid, args.time, spied)
    try:
        real = run_locust(s, urls[s.service], args.time, out, env, server_pid=pid)
    finally:
        for f in feeders:
            f.stop_event.set()
        for f in feeders:
            f.join(60)
        if spy is not None:
            spy.wait(60)
    if feeders:
        computed = device_metric(urls["device"], "paillier_computed", SUM_TASK)
        extra["refill"] = {
            "feedbacks_per_s": sum(f.sent for f in feeders) / args.time,
            "feeder_failures": sum(f.failed for f in feeders),
            "obfuscators_computed": computed - computed0,
            "pool": device_metric(urls["device"], "paillier_pool", SUM_TASK),
            "fallbacks": device_metric(urls["device"], "paillier_fallbacks", SUM_TASK),
        }
    if spy is not None and spied.exists():
        extra["profile"] = {"file": str(spied),
                            "summary": summary(parse(spied.read_text()), 15).splitlines()}
    return real, extra


def describe(row: dict) -> str:
    """One line per scenario: the headline (median) round, and every round's ratio."""
    real, floor = row["service"], row["floor"]
    cpu = (f" | server CPU {real['server_cpu_ms']:.2f} vs {floor['server_cpu_ms']:.2f} ms/req"
           if row["cpu_ratio"] else "")
    return (f"{row['scenario']:16s} {row['users']:3d} users  service {real['rps']:7.0f}/s "
            f"p50 {real['p50_ms']:4.0f} p99 {real['p99_ms']:5.0f} ms | floor {floor['rps']:7.0f}/s "
            f"p50 {floor['p50_ms']:4.0f} p99 {floor['p99_ms']:5.0f} ms | ratio "
            f"{row['throughput_ratio']:.2f} (rounds "
            + " ".join(f"{rd['throughput_ratio']:.2f}" for rd in row["rounds"])
            + f"), p99 ratio {row['p99_ratio']:.2f}{cpu} | load {real['load1']:.1f}"
            f" | failures {sum(rd['service']['failures'] for rd in row['rounds'])}"
            + (f"  no-loss {row['no_loss']['consistent']}" if "no_loss" in row else "")
            + (f"  refill {row['refill']}" if "refill" in row else ""))


if __name__ == "__main__":
    sys.exit(main())
