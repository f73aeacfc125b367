"""Shuffler intake with N replicas on PostgreSQL against one shuffler on SQLite, and the
analyzer's batch ingest on both stores (issue 11), as ratios measured in the same run.

- Intake: real processes started by the launcher (``Cluster(..., store=URL, shufflers=N)``: an
  analyzer and N shuffler replicas on loopback, each a uvicorn process), a fresh PostgreSQL
  schema per configuration. U uploads of R HPKE reports each, C in flight at once, spread over
  the replicas in turn (as the device does); the task's l is larger than all reports, so no
  batch forms and only intake is measured (each 202 after its durable commit). Every
  configuration runs ``repeats`` times, round-robin; the median is reported.
- Analyzer ingest: ``bench.service_ingest.analyzer_bench`` (B batches of l, in-process) once on
  SQLite and once on PostgreSQL.

    python -m bench.pg_replicas [--uploads 400] [--per-upload 20] [--concurrency 32]
                                [--batches 5] [--l 1000] [--repeats 3]

Needs the PostgreSQL server of the tests (``PRIVBANDIT_TEST_PG``, default
postgresql://postgres@127.0.0.1:5432/test).
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import psycopg

from bench.args import parse, write_json
from bench.service_ingest import TOKEN, analyzer_bench, reports, task
from privbandit.launcher import Cluster, cluster_ports
from privbandit.shared.crypto.keystore import HpkeKeyStore

PG = "postgresql://postgres@127.0.0.1:5432/test"
CONFIG = f"""
shuffler_token = "{TOKEN}"
log_level = "warning"
[[tasks]]
id = "bench"
threat_model = "shuffle"
K = 20
[tasks.policy]
algo = "sblb"
d = 5
eps0 = 8.0
batch_size = 100000
"""


def fresh_schema() -> tuple[str, str]:
    """A new schema's name and URL."""
    name = f"bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    return name, f"{PG}?options=-csearch_path%3D{name}"


def drop_schema(name: str) -> None:
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


async def intake(tmp: Path, store: str, replicas: int, uploads: int, per_upload: int,
                 conc: int) -> float:
    """Seconds to upload ``uploads`` × ``per_upload`` reports through ``replicas`` shuffler
    processes on ``store``."""
    ports = cluster_ports(replicas)
    a_port, base, d_port = ports["analyzer"], ports["shuffler"], ports["device"]
    config = tmp / "bench.toml"
    config.write_text(CONFIG)
    data = tmp / f"data-{replicas}-{secrets.token_hex(2)}"
    # The analyzer's key, made before it starts (it loads it): the reports are sealed to it
    # outside the timing.
    keys = HpkeKeyStore(data / "analyzer")
    reps = reports(task(100_000), keys.public_key_bytes, keys.key_id, uploads * per_upload)
    bodies = ['{"reports":[' + ",".join(r.model_dump_json()
                                        for r in reps[i * per_upload:(i + 1) * per_upload])
              + "]}" for i in range(uploads)]
    ports = {"analyzer": a_port, "shuffler": base, "device": d_port}
    with Cluster(data, ports, config=config, store=store, shufflers=replicas,
                 log_dir=tmp / "logs") as cluster:
        cluster.start(names=("analyzer", "shuffler"))
        urls = itertools.cycle([s.url for s in cluster.shufflers])
        queue = list(bodies)
        limits = httpx.Limits(max_connections=conc)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:

            async def worker() -> None:
                while queue:
                    body = queue.pop()
                    for attempt in range(3):
                        try:
                            resp = await client.post(
                                f"{next(urls)}/v1/tasks/bench/reports", content=body,
                                headers={"Content-Type": "application/json"},
                            )
                            break
                        except httpx.TransportError:  # a kept-alive connection closed by
                            if attempt == 2:          # the server: send again (a duplicate
                                raise                 # if it had landed)
                    assert resp.status_code == 202, resp.text

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(conc)))
            return time.perf_counter() - start


async def main_async(
    uploads: int, per_upload: int, conc: int, batches: int, l: int, repeats: int
) -> list:
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        n = uploads * per_upload
        runs = [("sqlite", 1), ("postgresql", 1), ("postgresql", 2), ("postgresql", 4)]
        seconds: dict[tuple[str, int], list[float]] = {run: [] for run in runs}
        # Round after round of all configurations, so a machine whose load drifts (other jobs
        # on its cores) weighs on each alike; each configuration's median is reported.
        for _ in range(repeats):
            for kind, replicas in runs:
                schema, url = fresh_schema() if kind == "postgresql" else ("", "sqlite")
                try:
                    seconds[(kind, replicas)].append(await intake(
                        tmp, url, replicas, uploads, per_upload, conc))
                finally:
                    if schema:
                        drop_schema(schema)
        base = statistics.median(seconds[("sqlite", 1)])
        for (kind, replicas), times in seconds.items():
            s = statistics.median(times)
            rows.append({"bench": "shuffler intake", "store": kind, "replicas": replicas,
                         "reports": n, "concurrency": conc, "reports_per_second": n / s,
                         "ratio_to_one_sqlite_shuffler": base / s,
                         "rates": [n / t for t in times]})
        schema, url = fresh_schema()
        try:
            sq = await analyzer_bench(batches, l, tmp, "sqlite")
            pg = await analyzer_bench(batches, l, tmp, url)
        finally:
            drop_schema(schema)
        pg["ratio_to_sqlite"] = pg["reports_per_second"] / sq["reports_per_second"]
        rows += [sq, pg]
    return rows


def main() -> None:
    args = parse(__doc__, {"uploads": 400, "per_upload": 20, "concurrency": 32, "batches": 5,
                           "l": 1000, "repeats": 3}, "out/bench_pg_replicas.json")
    rows = asyncio.run(main_async(args.uploads, args.per_upload, args.concurrency,
                                  args.batches, args.l, args.repeats))
    for r in rows:
        if r["bench"] == "shuffler intake":
            print(f"intake  {r['store']:10s} × {r['replicas']}  {r['reports_per_second']:9,.0f} "
                  f"reports/s  ratio to one on SQLite {r['ratio_to_one_sqlite_shuffler']:.2f}")
        else:
            print(f"analyzer ingest {r['store']:40s} {r['reports_per_second']:9,.0f} reports/s")
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
