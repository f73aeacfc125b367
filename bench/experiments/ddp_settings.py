"""Paired comparison of ``ddp-linucb`` (or ``--algo ldp-linucb``) settings on the same users
(issue 22 sweeps).

Each setting is the policy's registry entry's ``practical`` (what ``privbandit simulate`` runs)
with some fields
replaced; every setting runs on the same seeds, hence the same θ*, contexts and reward draws per
run, so the per-run differences to the first setting are paired (their standard error is the
figure to compare against, not the two means' s.e.). Central ε is every setting's own (ledger).

    python -m bench.experiments.ddp_settings --T 20000 --runs 48 --seed 100 \\
        base=encoding:upper frob=encoding:frobenius frob-w1.4=encoding:frobenius,u_weight:1.4
    python -m bench.experiments.ddp_settings --algo ldp-linucb --T 100000 --runs 24 \\
        base=encoding:plain cen=encoding:centered,intercept:0.7071067811865476,u_weight:2

A setting is NAME=FIELD:VALUE[,FIELD:VALUE...] (``batch_schedule`` values contain commas: give
it last, e.g. ``s=encoding:frobenius,batch_schedule:geometric:350,2,100000``). Prints one line
per setting: its first batch, final regret ± s.e. and the paired difference to the first;
``--at 2000,10000`` adds the mean regret at those times (checkpoints draw nothing: same runs).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bench.experiments.cli import experiment_parser
from privbandit.shared.core.policies.config import DDPLinUCBConfig, LDPLinUCBConfig
from privbandit.shared.core.policies.registry import entry
from privbandit.shared.core.simulator import simulate

TEXT_FIELDS = ("batch_schedule", "encoding", "mechanism", "regularizer")


def parse_setting(spec: str) -> tuple[str, dict[str, Any]]:
    """'NAME=k:v,k:v' → (NAME, {k: v}); ``batch_schedule`` takes the rest of the line."""
    name, _, body = spec.partition("=")
    params: dict[str, Any] = {}
    while body:
        key, _, rest = body.partition(":")
        if key == "batch_schedule":
            params[key], body = rest, ""
            break
        value, _, body = rest.partition(",")
        params[key] = value if key in TEXT_FIELDS else float(value)
    return name, params


def paired_line(name: str, first: int, finals: np.ndarray, ref: np.ndarray | None,
                ref_name: str, at: dict[int, float] | None = None) -> str:
    n = len(finals)
    se = finals.std(ddof=1) / math.sqrt(n)
    text = f"{name:24s} L0={first:6d} {finals.mean():9.1f} ± {se:6.1f}"
    if ref is not None:
        diff = finals - ref
        text += f"   vs {ref_name}: {diff.mean():+8.1f} ± {diff.std(ddof=1) / math.sqrt(n):6.1f}"
    if at:
        text += "   at t: " + ", ".join(f"{t}: {v:.1f}" for t, v in at.items())
    return text


def main(argv: list[str] | None = None) -> int:
    p = experiment_parser((__doc__ or "").split("\n\n")[0], T=20_000, runs=48, seed=100,
                          epsilon=1.0, delta=1e-6, d=5, K=20)
    p.add_argument("--at", default="", help="comma-separated times t < T: mean regret there")
    p.add_argument("--algo", choices=["ddp-linucb", "ldp-linucb"], default="ddp-linucb")
    p.add_argument("settings", nargs="+")
    args = p.parse_args(argv)
    ref: np.ndarray | None = None
    ref_name = ""
    for spec in args.settings:
        name, params = parse_setting(spec)
        cls = DDPLinUCBConfig if args.algo == "ddp-linucb" else LDPLinUCBConfig
        config = cls(d=args.d, epsilon=args.epsilon, delta=args.delta,
                     **{**entry(args.algo).practical, **params})
        times = [int(t) for t in args.at.split(",") if t]
        results, _ = simulate(config, "linear", args.K, args.T, args.runs, args.seed,
                              extra_checkpoints=times)
        finals = np.array([r.regret[-1] for r in results])
        at = {t: float(np.mean([r.regret[np.searchsorted(r.checkpoints, t)] for r in results]))
              for t in times if t <= args.T}
        first = getattr(config, "batch_size", 1)
        print(paired_line(name, first, finals, ref, ref_name, at), flush=True)
        if ref is None:
            ref, ref_name = finals, name
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
