"""Per-report cost of the browser library (clients/web, issue 41) in node, as a ratio to the
Python device's functions in the same run, and the size of the bundle a page ships.

One report = randomise + shard + seal, for the same users (d = 5, ‖x‖ = 1, r ~ U[0, 1]):
- sblb: the 0/1 randomizer (m = 1, ε0 = 4) and a Prio3SumVec report over [0, m] (c = 20 counts),
  helper share HPKE-sealed — Python: ``BinaryRandomizer.randomize`` (numpy) + ``prio3.make_report``;
- ddp-linucb: clip, scale (s = 128), exact CSPRNG rounding, Prio3 over the task's range [−O, O]
  (O of the default task) — Python: ``SkellamRandomizer.rounded`` + ``make_report``.
Rounds alternate the two sides; a round's figure is the mean over ``--reports`` reports (node: a
process per round running the bundle dist/privbandit.js, which times its second pass, warm), its
ratio node/Python; printed: the medians and the ratios' median and range over rounds. The bundle:
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
    sblb_vdaf = TaskVdaf("sblb", binary.c, m)
    ddp = randomizer_for(make_config("ddp-linucb", d=d))
    o = int(ddp.offset)
    ddp_vdaf = TaskVdaf("ddp", ddp.n, 2 * o, o)

    def sblb_one(i: int) -> None:
        row = binary.randomize(x[i : i + 1], r[i : i + 1], rng)
        make_report(sblb_vdaf, binary.counts(row)[0], key_id, public)

    def ddp_one(i: int) -> None:
        make_report(ddp_vdaf, np.asarray(ddp.rounded(x[i], float(r[i]))), key_id, public)

    job = {"reports": args.reports, "rounds": 2, "x": x.tolist(), "r": r.tolist(),
           "key_id": key_id, "public_key": public.hex(),
           "sblb": {"d": d, "eps0": eps0, "m": m, "L": 1.0},
           "ddp": {"params": {"d": d, "scale": ddp.scale, "L": ddp.L}, "lo": -o, "hi": o}}
    py: dict[str, list[float]] = {"sblb": [], "ddp": []}
    js: dict[str, list[float]] = {"sblb": [], "ddp": []}
    for _ in range(args.rounds):  # interleaved: each round's ratio compares neighbouring times
        for name, one in (("sblb", sblb_one), ("ddp", ddp_one)):
            t0 = time.perf_counter()
            for i in range(args.reports):
                one(i)
            py[name].append((time.perf_counter() - t0) / args.reports)
        done = subprocess.run(["node", "test/bench-tool.mjs"], cwd=WEB, input=json.dumps(job),
                              capture_output=True, text=True, check=True)
        for name, secs in json.loads(done.stdout).items():
            js[name].append(secs)
    for name in ("sblb", "ddp"):
        ratios = [a / b for a, b in zip(js[name], py[name], strict=True)]
        print(f"{name:5s} per report: node {1e3 * statistics.median(js[name]):6.2f} ms, python "
              f"{1e3 * statistics.median(py[name]):6.2f} ms; ratio node/python median "
              f"{statistics.median(ratios):.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f})")
    minified = (WEB / "dist" / "privbandit.min.js").read_bytes()
    print(f"bundle dist/privbandit.min.js: {len(minified)} bytes, "
          f"{len(gzip.compress(minified, 9))} bytes gzipped")


if __name__ == "__main__":
    main()
