"""Li et al.'s replay (``privbandit.replay``) as a ratio to a floor measured in the same run.

The floor is the simulator's online run of the policy over as many users as the replay keeps
(``privbandit.simulate``, one run: the same decides and ingests, without a log to read). The
replay also scores logged rounds that it does not keep (a uniform log keeps one in K); how many
each model scores is ``ope.LOOKAHEAD`` (+ 2K per event its window still needs). The same replay
with every model scoring the rest of its 2,048-round chunk (``LOOKAHEAD = CHUNK``, the code before
issue 21's session 13) is reported beside it. Both replays keep the same events (checked here).
CPU seconds, best of ``--repeats``.

    python -m bench.ope_replay [--T 40000] [--repeats 3] [--json out/bench_ope_replay.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import privbandit
from privbandit.shared.core import ope


def best(f: Any, repeats: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        t = time.process_time()
        out = f()
        times.append(time.process_time() - t)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--T", type=int, default=40_000, help="logged rounds (digits, d = 40)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=Path("out/bench_ope_replay.json"))
    args = ap.parse_args()
    log = privbandit.log_uniform("digits", T=args.T, d=40, seed=0)
    rows = {}
    for algo in ("linucb", "ddp-linucb"):
        ahead, est = best(lambda a=algo: privbandit.replay(log, a, d=40, repeats=1, seed=1),
                          args.repeats)
        saved = ope.LOOKAHEAD
        ope.LOOKAHEAD = ope.CHUNK
        try:
            whole, est_whole = best(
                lambda a=algo: privbandit.replay(log, a, d=40, repeats=1, seed=1), args.repeats)
        finally:
            ope.LOOKAHEAD = saved
        assert est.value == est_whole.value and est.n == est_whole.n, (est, est_whole)
        floor, _ = best(lambda a=algo, n=est.n: privbandit.simulate(
            a, "digits", T=n, d=40, runs=1, seed=2), args.repeats)
        rows[algo] = {"kept": est.n, "floor_s": round(floor, 3),
                      "replay_ratio": round(ahead / floor, 2),
                      "whole_chunk_ratio": round(whole / floor, 2)}
        print(f"{algo:11s} kept {est.n:5d}  floor (online run) {floor:6.2f} s  replay "
              f"{ahead / floor:5.2f}×  whole-chunk scoring {whole / floor:5.2f}×")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"T": args.T, "results": rows}, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
