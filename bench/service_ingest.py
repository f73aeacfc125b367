"""Service ingest costs as ratios to floors measured in the same run (spec §7).

- Shuffler intake: N uploads of R HPKE reports each into the real shuffler app (validation
  against the analyzer's HPKE config, durable SQLite WAL commit before the 202) vs. a bare
  FastAPI endpoint that parses the same ``ReportUpload`` body and answers 202. Both run
  in-process over httpx's ASGI transport, at concurrency 1 and 8 (the shuffler group-commits
  concurrent uploads).
- Analyzer batch ingest: B batches of l reports posted to the real analyzer app (HPKE open,
  validate, de-duplicate, aggregate, SBLB update, one SQLite transaction) vs. the bare loop of HPKE
  decryptions of the same ciphertexts on one core.

    python bench/service_ingest.py [--uploads 200] [--per-upload 50] [--batches 5] [--l 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from fastapi import FastAPI

from bench.args import parse, write_json
from privbandit.services.analyzer.app import create_app as analyzer_app
from privbandit.services.shuffler.app import create_app as shuffler_app
from privbandit.shared.core.policies import randomizer_for
from privbandit.shared.crypto.hpke import open_report, pack_report, seal
from privbandit.shared.crypto.keystore import HpkeKeyStore
from privbandit.shared.protocol.messages import (
    BatchUpload,
    HpkeConfig,
    ReportsAccepted,
    ReportUpload,
    b64decode,
)
from privbandit.shared.settings import Settings, TaskConfig

TOKEN = "bench-shuffler-token-0123456789abcdef"


def task(l: int) -> TaskConfig:
    return TaskConfig.model_validate({
        "id": "bench", "threat_model": "shuffle", "K": 20,
        "policy": {"algo": "sblb", "d": 5, "eps0": 8.0, "batch_size": l},
    })


def reports(config: TaskConfig, public_key: bytes, key_id: int, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    rz = randomizer_for(config.policy)
    x = rng.normal(size=(n, 5))
    x /= np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True))
    rows = rz.randomize(x, rng.random(n), rng)
    return [seal(public_key, key_id, config.id, pack_report(rz.to_bytes(r))[1]) for r in rows]


def config_app(keys: HpkeKeyStore) -> FastAPI:
    """Stands in for the analyzer: the shuffler checks reports against its HPKE config (and
    fetches nothing else here, since no batch fills)."""
    app = FastAPI()

    @app.get("/v1/hpke-config")
    async def hpke_config() -> HpkeConfig:
        return keys.hpke_config()

    return app


def bare_app() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/tasks/{task}/reports", status_code=202)
    async def accept(task: str, body: ReportUpload) -> ReportsAccepted:
        return ReportsAccepted(accepted=len(body.reports), duplicates=0)

    return app


async def drive(app: FastAPI, uploads: list[dict], concurrency: int) -> float:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://b") as client:
            queue = list(uploads)

            async def worker() -> None:
                while queue:
                    body = queue.pop()
                    resp = await client.post("/v1/tasks/bench/reports", json=body)
                    assert resp.status_code == 202, resp.text

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return time.perf_counter() - start


async def shuffler_bench(n_uploads: int, per_upload: int, tmp: Path) -> list[dict]:
    keys = HpkeKeyStore(tmp / "keys")
    config = task(10**6)  # no batch fills: this measures intake only
    reps = reports(config, keys.public_key_bytes, keys.key_id, n_uploads * per_upload)
    uploads = [
        {"reports": [r.model_dump() for r in reps[i * per_upload:(i + 1) * per_upload]]}
        for i in range(n_uploads)
    ]
    out = []
    for conc in (1, 8):
        settings = Settings(data_dir=tmp / f"shuf{conc}", shuffler_token=TOKEN, tasks=[config])
        analyzer = httpx.ASGITransport(config_app(keys))
        real = await drive(shuffler_app(settings, analyzer_transport=analyzer), uploads, conc)
        floor = await drive(bare_app(), uploads, conc)
        n = n_uploads * per_upload
        out.append({"bench": "shuffler intake", "concurrency": conc, "reports": n,
                    "reports_per_second": n / real, "floor_reports_per_second": n / floor,
                    "ratio_to_floor": real / floor})
    return out


async def analyzer_bench(batches: int, l: int, tmp: Path, store: str = "sqlite") -> dict:
    """``store``: the analyzer's (``"sqlite"`` or a ``postgresql://`` URL)."""
    config = task(l)
    data = tmp / ("ana" if store == "sqlite" else "ana-pg")
    settings = Settings(data_dir=data, shuffler_token=TOKEN, tasks=[config],
                        analyzer={"port": 8701, "store": store})
    app = analyzer_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://b") as client:
            hpke = (await client.get("/v1/hpke-config")).json()
            pub, key_id = b64decode(hpke["public_key"]), hpke["key_id"]
            all_reports = [reports(config, pub, key_id, l, seed=b) for b in range(batches)]
            bodies = [BatchUpload(batch_id=f"{b:032x}", reports=r).model_dump()
                      for b, r in enumerate(all_reports)]
            start = time.perf_counter()
            for body in bodies:
                resp = await client.post("/v1/tasks/bench/batches", json=body,
                                         headers={"Authorization": f"Bearer {TOKEN}"})
                assert resp.status_code == 200 and resp.json()["counted"] == l, resp.text
            real = time.perf_counter() - start
    private = HpkeKeyStore(data / "analyzer").private_key
    start = time.perf_counter()
    for reps in all_reports:
        for r in reps:
            open_report(private, key_id, config.id, r)
    floor = time.perf_counter() - start
    n = batches * l
    return {"bench": "analyzer batch ingest", "store": store.split("?")[0], "batch_size": l,
            "reports": n,
            "reports_per_second": n / real, "floor_reports_per_second": n / floor,
            "ratio_to_floor": real / floor, "seconds_per_batch": real / batches}


async def main_async(args: argparse.Namespace) -> list[dict]:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows = await shuffler_bench(args.uploads, args.per_upload, tmp)
        rows.append(await analyzer_bench(args.batches, args.l, tmp))
    return rows


def main() -> None:
    args = parse(__doc__, {"uploads": 200, "per_upload": 50, "batches": 5, "l": 1000},
                 "out/bench_services.json")
    rows = asyncio.run(main_async(args))
    for r in rows:
        extra = (f"concurrency {r['concurrency']}" if "concurrency" in r
                 else f"l = {r['batch_size']}")
        print(f"{r['bench']:22s} {extra:14s} {r['reports_per_second']:10,.0f} reports/s  "
              f"floor {r['floor_reports_per_second']:10,.0f}/s  ratio {r['ratio_to_floor']:6.2f}")
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
