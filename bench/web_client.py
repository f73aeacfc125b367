"""Per-report cost of the browser library (clients/web, issue 41) in node, as a ratio to the
Python device's functions in the same run, and the size of the bundle a page ships.

One report = randomise + shard + seal, for the same users (d = 5, ‖x‖ = 1, r ~ U[0, 1]):
- sblb: the 0/1 randomizer (m = 1, ε0 = 4) and a Prio3SumVec report over [0, m] (c = 20 counts),
  helper share HPKE-sealed — Python: ``BinaryRandomizer.randomize`` (numpy) + ``prio3.make_report``;
- ddp-linucb (issue 40's design: no noise share): clip, scale (s = 128), exact CSPRNG rounding,
  SumVecRanges over the honest ranges of the default task — Python: ``SkellamRandomizer.rounded``
  + ``make_report`` under ``task_vdaf``.
Rounds alternate the two sides; a round's figure is the mean over ``--reports`` reports of the
process's CPU time (all threads) and of the wall time (node: a process per round running the
bundle dist/privbandit.js, which times its last pass, warm); printed: the medians, and the CPU
ratio node/Python's median and range over rounds. The bundle:
dist/privbandit.min.js, gzip -9.

    python -m bench.web_client [--reports 50 --rounds 5]     (needs `npm run build` in clients/web)
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from privbandit.services.device.transports.prio3 import make_report
from privbandit.shared.core.policies import make_config, randomizer_for
from privbandit.shared.core.randomizers.base import SumEncoding
from privbandit.shared.core.randomizers.binary import BinaryRandomizer
from privbandit.shared.crypto.prio3_task import TaskVdaf

WEB = Path(__file__).resolve().parents[1] / "clients" / "web"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    d, m, eps0 = 5, 1, 4.0
    rng = np.random.default_rng(1)
    x = rng.normal(size=(args.reports, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    r = rng.uniform(size=args.reports)
    public = X25519PrivateKey.generate().public_key().public_bytes_raw()
    key_id = hashlib.sha256(public).digest()[0]

    binary = BinaryRandomizer(d, eps0, m, 1.0)
    sblb_vdaf = TaskVdaf("sblb", SumEncoding(binary.c, m))
    ddp_policy = make_config("ddp-linucb", d=d)
    ddp = randomizer_for(ddp_policy)
    ddp_vdaf = TaskVdaf("ddp", ddp.sum_encoding())

    def sblb_one(i: int) -> None:
        row = binary.randomize(x[i : i + 1], r[i : i + 1], rng)
        make_report(sblb_vdaf, binary.counts(row)[0], key_id, public)

    def ddp_one(i: int) -> None:
        make_report(ddp_vdaf, np.asarray(ddp.rounded(x[i], float(r[i]))), key_id, public)

    job = {"reports": args.reports, "rounds": 2, "x": x.tolist(), "r": r.tolist(),
           "key_id": key_id, "public_key": public.hex(),
           "sblb": {"d": d, "eps0": eps0, "m": m, "L": 1.0},
           "ddp": {"params": {"d": d, "scale": ddp.scale, "L": ddp.L}}}
    # Per side, per round: (CPU seconds of the whole process, every thread included — node's
    # WebCrypto runs on its thread pool —, wall seconds) per report. CPU time is what the
    # ratio compares: on a loaded machine wall time mostly measures the wait for a core.
    py: dict[str, list[tuple[float, float]]] = {"sblb": [], "ddp": []}
    js: dict[str, list[tuple[float, float]]] = {"sblb": [], "ddp": []}
    for _ in range(args.rounds):  # interleaved: each round's ratio compares neighbouring times
        for name, one in (("sblb", sblb_one), ("ddp", ddp_one)):
            c0, t0 = time.process_time(), time.perf_counter()
            for i in range(args.reports):
                one(i)
            py[name].append(((time.process_time() - c0) / args.reports,
                             (time.perf_counter() - t0) / args.reports))
        done = subprocess.run(["node", "test/bench-tool.mjs"], cwd=WEB, input=json.dumps(job),
                              capture_output=True, text=True, check=True)
        for name, (cpu, wall) in json.loads(done.stdout).items():
            js[name].append((cpu, wall))
    for name in ("sblb", "ddp"):
        ratios = [a[0] / b[0] for a, b in zip(js[name], py[name], strict=True)]
        med = {side: [1e3 * statistics.median(s[k] for s in runs[name]) for k in (0, 1)]
               for side, runs in (("node", js), ("python", py))}
        print(f"{name:5s} per report, CPU (wall): node {med['node'][0]:6.2f} ms "
              f"({med['node'][1]:6.2f}), python {med['python'][0]:6.2f} ms "
              f"({med['python'][1]:6.2f}); CPU ratio node/python median "
              f"{statistics.median(ratios):.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f})")
    minified = (WEB / "dist" / "privbandit.min.js").read_bytes()
    print(f"bundle dist/privbandit.min.js: {len(minified)} bytes, "
          f"{len(gzip.compress(minified, 9))} bytes gzipped")


if __name__ == "__main__":
    main()
