"""Issue 44 item 1 — the practical defaults of the non-private policies: each one's knob searched
on tuning seeds the published figures do not use (``--seed 101 --runs 3``: the runs' users are
spawned from seed 101, none shared with seed 1's).

Every point is one ``privbandit simulate`` command, run as a subprocess exactly as a user types it
with ``--paper`` (so a point is the paper's settings with only the searched knob changed):

- ``linucb`` on ``linear`` and ``fixed-linear`` (d = 5, K = 20): ``--confidence-scale`` (β's
  multiplier; greedy, 0, is in the grid: it learns on ``linear``'s diverse contexts, and
  ``fixed-linear``'s one arm set is where it need not);
- ``ucb`` on ``mab`` (its default instance: K = 20, means 0.9, then 0.8 … 0.1) and on ten arms
  0.55, 0.5, …, 0.5 (``mab~close``): ``--confidence-scale``;
- ``bco``, ``bco2`` on ``bco-quadratic`` and ``bco-convex`` (d = 5): ``--step-scale`` (the
  paper's step size's multiplier).

Where a policy is searched on two environments, the default is the value with the smallest
geometric mean of regret / that environment's best regret.

    python -m bench.experiments.yardstick [--T 1000000] [--algos linucb,ucb,bco,bco2]

writes out/experiments/yardstick/<algo>.json (points added as they finish; a rerun skips points
it has) and prints the table of each: regret ± s.e. per value, × the best value.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from bench.experiments.cli import experiment_parser

OUT = Path("out/experiments/yardstick")

# ucb's second instance: ten arms, one 0.05 above nine at 0.5 (the largest Bernoulli variance),
# where a width too small can settle on a worse arm ("mab~close": --env mab with these means).
CLOSE = ",".join(["0.55", *["0.5"] * 9])
# The searched knob of each non-private policy, its grid, and the environments it is searched on
# (with their dimension flags). The frontier (``frontier.py``) runs linucb's grid beside the
# private policies and divides by its best.
SEARCH: dict[str, tuple[str, tuple[float, ...], tuple[tuple[str, tuple[str, ...]], ...]]] = {
    "linucb": ("--confidence-scale", (1.0, 0.3, 0.1, 0.05, 0.03, 0.01, 0.0),
               (("linear", ("--d", "5", "--K", "20")),
                ("fixed-linear", ("--d", "5", "--K", "20")))),
    "ucb": ("--confidence-scale", (1.0, 0.5, 0.3, 0.2, 0.1, 0.03, 0.01, 0.0),
            (("mab", ()), ("mab~close", ("--means", CLOSE)))),
    "bco": ("--step-scale", (0.1, 0.3, 1.0, 3.0, 10.0),
            (("bco-quadratic", ()), ("bco-convex", ()))),
    "bco2": ("--step-scale", (0.1, 0.3, 1.0, 3.0, 10.0),
             (("bco-quadratic", ()), ("bco-convex", ()))),
}


def simulate(cmd: list[str]) -> dict[str, Any]:
    """The JSON of one ``privbandit simulate`` command (``cmd`` without the program name) and
    the seconds it took."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "privbandit.cli", *cmd, "--json", str(out),
                               "--no-progress"], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"privbandit {' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
        res: dict[str, Any] = json.loads(out.read_text())
        res["seconds"] = time.perf_counter() - t0
        return res


def point(algo: str, env: str, dims: tuple[str, ...], value: float,
          args: argparse.Namespace) -> dict[str, Any]:
    flag = SEARCH[algo][0]
    cmd = ["simulate", "--algo", algo, "--env", env.split("~")[0], *dims, "--T", str(args.T),
           "--runs", str(args.runs), "--seed", str(args.seed), "--paper", flag, f"{value:g}"]
    res = simulate(cmd)
    return {"algo": algo, "env": env, "value": value, "flag": flag, "T": args.T,
            "runs": args.runs, "seed": args.seed, "command": "privbandit " + " ".join(cmd),
            "mean": res["final_regret_mean"], "stderr": res["final_regret_stderr"],
            "random": res.get("random_regret_mean"), "seconds": res["seconds"]}


def best_value(points: list[dict[str, Any]]) -> float:
    """The value with the smallest geometric mean over environments of regret / the
    environment's best regret (one environment: the smallest regret)."""
    envs = sorted({p["env"] for p in points})
    best = {e: min(p["mean"] for p in points if p["env"] == e) for e in envs}

    def score(v: float) -> float:
        ratios = [p["mean"] / best[p["env"]] for p in points if p["value"] == v]
        if len(ratios) < len(envs):
            return math.inf
        return math.exp(sum(math.log(max(r, 1e-12)) for r in ratios) / len(ratios))

    # A tie goes to the larger value (the wider width, the longer step: closer to the paper's).
    return min(sorted({p["value"] for p in points}, reverse=True), key=score)


def table(points: list[dict[str, Any]]) -> str:
    envs = sorted({p["env"] for p in points})
    best = {e: min(p["mean"] for p in points if p["env"] == e) for e in envs}
    flag = points[0]["flag"]
    head = "| " + flag + " | " + " | ".join(f"{e}: regret ± s.e. | × best" for e in envs) + " |"
    lines = [head, "|---|" + "---|---|" * len(envs)]
    for v in sorted({p["value"] for p in points}, reverse=True):
        cells = []
        for e in envs:
            p = next((p for p in points if p["env"] == e and p["value"] == v), None)
            cells.append("— | —" if p is None else
                         f"{p['mean']:,.1f} ± {p['stderr']:,.1f} | {p['mean'] / best[e]:.2f}")
        lines.append(f"| {v:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = experiment_parser(__doc__.split("\n\n")[0], T=1_000_000, runs=3, seed=101, out=OUT)
    p.add_argument("--algos", default=",".join(SEARCH))
    p.add_argument("--envs", default=None, help="only these of each policy's environments")
    p.add_argument("--jobs", type=int, default=1, help="simulations at once (default 1)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for algo in args.algos.split(","):
        path = args.out / f"{algo}.json"
        points: list[dict[str, Any]] = (json.loads(path.read_text())["points"]
                                        if path.exists() else [])
        done = {(q["env"], q["value"]) for q in points
                if (q["T"], q["runs"], q["seed"]) == (args.T, args.runs, args.seed)}
        _, grid, envs = SEARCH[algo]
        todo = [(env, dims, v) for env, dims in envs for v in grid if (env, v) not in done
                and (args.envs is None or env in args.envs.split(","))]
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [pool.submit(point, algo, env, dims, v, args) for env, dims, v in todo]
            for fut in as_completed(futures):
                q = fut.result()
                points.append(q)
                path.write_text(json.dumps({"points": points}, indent=1) + "\n")
                print(f"{algo} {q['env']} {q['flag']} {q['value']:g}: {q['mean']:,.1f} ± "
                      f"{q['stderr']:,.1f} ({q['seconds']:.0f} s)", flush=True)
        mine = [q for q in points if (q["T"], q["runs"], q["seed"]) == (args.T, args.runs,
                                                                          args.seed)]
        print(f"\n{algo}, T = {args.T:,}, {args.runs} runs, seed {args.seed}: best "
              f"{SEARCH[algo][0]} {best_value(mine):g}\n{table(mine)}\n", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
