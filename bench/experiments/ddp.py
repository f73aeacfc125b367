"""Distributed DP (``ddp-linucb``, issue 10 item 5): final regret over ε × l × γ at δ = 10⁻⁶,
d = 5, K = 20 on the ``linear`` environment (or ``--env digits``), practical widths (confidence
scale 0.1, eigenvalue clipping — post-processing, as for the sblb figures it is compared with),
with same-run baselines on the same seeds (hence the same users):

- ``linucb``: non-private, same width, once per environment;
- ``sblb`` over the secure sum at the same central (ε, δ) for each l: its ε0 is the largest with
  ``ledger(T, aggregation="secure-sum").central_epsilon`` ≤ ε (``match_central_epsilon``);
- ``adar-oful`` at the same (ε, δ): α = 2 and the RDP ε whose ledger's central ε is ε. Its noise is
  σ/Δ = √(α / (2 ε_RDP)), a function of α/ε_RDP only, and its ledger converts that Gaussian's whole
  RDP curve, so every α with the same ratio is the same mechanism: α = 2 loses nothing.

    python -m bench.experiments.ddp [--env linear|digits] [--d 5] [--T 1000000 --runs 3]
        [--epsilons 0.5,1,4] [--batch-sizes 100,1000,10000] [--gammas 1,0.5]
        [--algos ddp-linucb | --baselines] [--tag NAME]

Each configuration is appended to out/experiments/ddp/<tag>.json as soon as it finishes (a
partial grid is kept; a rerun with the same tag skips what is there), then the plot
out/experiments/ddp/<tag>.png (final regret against ε: ddp per (l, γ), sblb per l, adar-oful,
linucb as a horizontal line). Every row also keeps each run's regret at t = 100, 1000, 10000
(the first batch at each l: those users play before any model exists).

    python -m bench.experiments.ddp --combine out/experiments/ddp/a.json,... [--tag all]

tables and plots finished (or partial) grids together, one plot per environment.
"""

from __future__ import annotations

import datetime
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.experiments.cli import experiment_parser
from privbandit.shared.core.accounting.search import illinois
from privbandit.shared.core.environments import environment_dimensions
from privbandit.shared.core.policies import PolicyConfig, build_policy, make_config
from privbandit.shared.core.simulator import simulate, summarize

OUT = Path("out/experiments/ddp")
DELTA = 1e-6
WIDTH = 0.1  # practical confidence scale of every policy compared here
# The first batch ends at t = l for each l of the grid: its regret is recorded exactly.
FIRST_BATCH_CHECKPOINTS = (100, 1000, 10000)
BASELINES = ("linucb", "adar-oful", "sblb")
ALGOS = ("ddp-linucb", *BASELINES)


def floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",")]


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def match_central_epsilon(
    config_for: Callable[[float], PolicyConfig],
    target: float,
    T: int,
    aggregation: str = "reports",
    start: float = 1.0,
    tol: float = 1e-3,
    max_iter: int = 100,
) -> tuple[float, float]:
    """The privacy parameter p > 0 (sblb's ε0, adar-oful's RDP ε) whose policy ledger states a
    central ε in [target − tol, target], for a ledger ε(p) = ``build_policy(config_for(p))
    .ledger(T, aggregation).central_epsilon`` non-decreasing in p. Returns (p, ε(p)).

    Bracket: from ``start``, multiply or divide p by 2 until ε(lo) ≤ target < ε(hi). Then the
    Illinois variant of regula falsi on x = ln p (it keeps the bracket, so it cannot leave the
    monotone branch, and halves the weight of a stale end so it converges superlinearly), with a
    plain bisection step every fourth iteration so that a flat or jumpy ε(p) still shrinks the
    bracket. Only the lower end is returned: the stated guarantee is never weaker than the
    target. Raises ``ValueError`` if no p within 2^±60 of ``start`` brackets the target or the
    bracket collapses before ε(p) comes within ``tol``.
    """

    def eps(x: float) -> float:
        central = build_policy(config_for(math.exp(x))).ledger(
            T, aggregation=aggregation).central_epsilon
        if central is None:
            raise ValueError(f"the ledger of {config_for(math.exp(x)).algo} at parameter "
                             f"{math.exp(x):.6g} states no central ε")
        return float(central)

    lo = hi = math.log(start)
    f_lo = f_hi = eps(lo) - target
    for _ in range(60):  # expand until the target is bracketed: f(lo) ≤ 0 < f(hi)
        if f_lo > 0:
            hi, f_hi = lo, f_lo
            lo -= math.log(2.0)
            f_lo = eps(lo) - target
        elif f_hi <= 0:
            if -tol <= f_hi:
                return math.exp(hi), f_hi + target
            lo, f_lo = hi, f_hi
            hi += math.log(2.0)
            f_hi = eps(hi) - target
        else:
            break
    else:
        raise ValueError(f"no parameter within 2^±60 of {start} brackets central ε = {target}")
    def close(b: tuple[float, float, float, float]) -> bool:
        return -tol <= b[1] <= 0 or b[2] - b[0] < 1e-13

    # Regula falsi (Illinois) with a bisection every fourth step (``search.illinois``).
    lo, f_lo, hi, f_hi = illinois(lambda x: eps(x) - target, (lo, f_lo, hi, f_hi), close,
                                  bisect_every=4, max_iter=max_iter)
    if -tol <= f_lo <= 0:
        return math.exp(lo), f_lo + target
    raise ValueError(f"central ε did not come within {tol} below {target}: ε({math.exp(lo):.6g}) "
                     f"= {f_lo + target:.6g}, ε({math.exp(hi):.6g}) = {f_hi + target:.6g}")


def baseline_config(algo: str, d: int, eps: float | None, l: int | None, T: int
                    ) -> tuple[PolicyConfig, dict[str, Any]]:
    """The baseline's config at central (ε, δ = 10⁻⁶) and what was solved for it."""
    if algo == "linucb":
        return make_config("linucb", d=d, confidence_scale=WIDTH), {}
    assert eps is not None
    if algo == "adar-oful":
        def adar(p: float) -> PolicyConfig:
            return make_config("adar-oful", d=d, alpha=2.0, epsilon=p, delta=DELTA,
                               confidence_scale=WIDTH)

        rdp, central = match_central_epsilon(adar, eps, T, start=eps / 5)
        return adar(rdp), {"rdp_alpha": 2.0, "rdp_epsilon": rdp, "central_epsilon": central}
    if algo == "sblb":
        assert l is not None

        def sblb(p: float) -> PolicyConfig:
            return make_config("sblb", d=d, eps0=p, batch_size=l, delta=DELTA,
                               confidence_scale=WIDTH, regularizer="clip")

        # ε0 ≈ 32 gives central ≈ 1.09 at d = 5, l = 1000 (docs/benchmarks/ddp-linucb.md): start
        # near the answer.
        eps0, central = match_central_epsilon(sblb, eps, T, aggregation="secure-sum",
                                              start=30.0 * eps * math.sqrt(l / 1000))
        return sblb(eps0), {"eps0": eps0, "central_epsilon": central}
    raise ValueError(f"unknown baseline {algo!r}")


def run_one(algo: str, env: str, d: int, K: int, eps: float | None, l: int | None,
            gamma: float | None, T: int, runs: int, seed: int) -> dict[str, Any]:
    started = utc_now()
    t0 = time.perf_counter()
    if algo == "ddp-linucb":
        config: PolicyConfig = make_config(
            "ddp-linucb", d=d, epsilon=eps, delta=DELTA, batch_size=l, honest_fraction=gamma,
            confidence_scale=WIDTH, regularizer="clip")
        solved: dict[str, Any] = {}
    else:
        config, solved = baseline_config(algo, d, eps, l, T)
    solve_seconds = time.perf_counter() - t0
    results, _ = simulate(config, env, K, T, runs, seed, points=100,
                          extra_checkpoints=FIRST_BATCH_CHECKPOINTS)
    s = summarize(results)
    ledger = build_policy(config).ledger(
        T, aggregation="secure-sum" if algo in ("sblb", "ddp-linucb") else "reports").model_dump()
    cps = [int(t) for t in results[0].checkpoints]
    return {
        "algo": algo, "env": env, "d": d, "K": K, "T": T, "runs": runs, "seed": seed,
        "epsilon": eps, "batch_size": l, "honest_fraction": gamma,
        "finals": [float(r.regret[-1]) for r in results],
        "mean": s["final_regret_mean"], "stderr": s["final_regret_stderr"],
        "random": s["random_regret_mean"], "model_updates": s["model_updates_mean"],
        "curve": s["regret_curve"], "curve_stderr": s["regret_curve_stderr"],
        "at_t": {str(t): [float(r.regret[cps.index(t)]) for r in results]
                 for t in FIRST_BATCH_CHECKPOINTS if t in cps},
        "random_at_t": {str(t): [float(r.random_regret[cps.index(t)]) for r in results]
                        for t in FIRST_BATCH_CHECKPOINTS if t in cps},
        "central_epsilon": ledger["central_epsilon"], "central_delta": ledger["central_delta"],
        "skellam_mu": ledger.get("skellam_mu"), "solved": solved,
        "config": config.model_dump(), "started": started, "finished": utc_now(),
        "solve_seconds": solve_seconds, "seconds": time.perf_counter() - t0,
    }


def row_key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r.get("algo", "ddp-linucb"), r.get("env", "linear"), r["epsilon"], r["batch_size"],
            r["honest_fraction"])


def jobs(algos: list[str], epsilons: list[float], batch_sizes: list[int], gammas: list[float]
         ) -> list[tuple[str, float | None, int | None, float | None]]:
    """(algo, ε, l, γ) in run order: the cheap baselines first, then ddp by l, γ, ε (so a grid
    stopped early has whole (l, γ) lines)."""
    out: list[tuple[str, float | None, int | None, float | None]] = []
    if "linucb" in algos:
        out.append(("linucb", None, None, None))
    if "adar-oful" in algos:
        out += [("adar-oful", e, None, None) for e in epsilons]
    if "sblb" in algos:
        out += [("sblb", e, l, None) for l in batch_sizes for e in epsilons]
    if "ddp-linucb" in algos:
        out += [("ddp-linucb", e, l, g) for l in batch_sizes for g in gammas for e in epsilons]
    return out


def label(r: dict[str, Any]) -> str:
    algo = r.get("algo", "ddp-linucb")
    if algo == "ddp-linucb":
        return f"ddp l={r['batch_size']}, γ={r['honest_fraction']:g}"
    if algo == "sblb":
        return f"sblb (secure-sum) l={r['batch_size']}"
    return algo


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {"ddp-linucb": "-", "sblb": "--", "adar-oful": ":"}
    for name in sorted({label(r) for r in rows if r.get("algo", "ddp-linucb") != "linucb"}):
        pts = sorted((r["epsilon"], r["mean"], r["stderr"]) for r in rows if label(r) == name)
        algo = next(r.get("algo", "ddp-linucb") for r in rows if label(r) == name)
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts],
                    marker="o", capsize=3, linestyle=styles[algo], label=name)
    for r in rows:
        if r.get("algo") == "linucb":
            ax.axhline(r["mean"], color="k", linewidth=1, label=f"linucb ({r['mean']:,.0f})")
            ax.axhline(10 * r["mean"], color="k", linewidth=0.8, linestyle="-.",
                       label="10 × linucb")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("central ε (δ = 1e-6)")
    ax.set_ylabel(f"final regret (T = {rows[0]['curve'][-1][0]})")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def at_first_batch(r: dict[str, Any]) -> tuple[float | None, float | None]:
    """Mean regret at t = l (end of the first batch) and mean regret after it (final − at l)."""
    l = r["batch_size"]
    per_run = r.get("at_t", {}).get(str(l)) if l is not None else None
    if per_run is None:
        return None, None
    return float(np.mean(per_run)), float(np.mean(np.asarray(r["finals"]) - per_run))


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| algo | central ε (ledger) | l | γ | final regret (± s.e.) | model updates | "
             "regret at t = l | after t = l | privacy parameter |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        algo = r.get("algo", "ddp-linucb")
        first, after = at_first_batch(r)
        solved = r.get("solved", {})
        param = (f"μ = {r['skellam_mu']:.4g}" if algo == "ddp-linucb"
                 else f"ε0 = {solved['eps0']:.4g}" if algo == "sblb"
                 else f"α = 2, ε_RDP = {solved['rdp_epsilon']:.4g}" if algo == "adar-oful"
                 else "—")
        eps = "—" if r["central_epsilon"] is None else f"{r['central_epsilon']:.4f}"
        lines.append(
            f"| {algo} | {eps} | {r['batch_size'] or '—'} | "
            f"{'—' if r['honest_fraction'] is None else format(r['honest_fraction'], 'g')} | "
            f"{r['mean']:,.0f} ± {r['stderr']:,.0f} | {r['model_updates']:.0f} | "
            f"{'—' if first is None else format(first, ',.0f')} | "
            f"{'—' if after is None else format(after, ',.0f')} | {param} |")
    return lines


def first_batch_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Issue 10's goal (final regret within 10× linucb's) against what the first batch alone costs:
    the users t ≤ l play before any model exists (the initial model, the same for every batched
    policy, so the regret at t = l is shared by all of them on these paired users), so if it
    exceeds 10× linucb's final regret no batched policy at that l meets the goal, whatever its
    privacy. Also: regret after the first batch (final − at t = l) per batched row."""
    lin = [r for r in rows if r.get("algo") == "linucb"]
    if not lin:
        return ["(no linucb row: first-batch analysis skipped)"]
    goal = 10 * lin[0]["mean"]
    lines = [f"linucb final {lin[0]['mean']:,.1f} ± {lin[0]['stderr']:,.1f}; 10 × linucb = "
             f"{goal:,.0f}; linucb's own regret at t = 100 / 1000 / 10000: "
             + " / ".join(f"{np.mean(lin[0]['at_t'][str(t)]):,.1f}"
                          for t in FIRST_BATCH_CHECKPOINTS if str(t) in lin[0]["at_t"])]
    for l in sorted({r["batch_size"] for r in rows if r["batch_size"] is not None}):
        batched = [r for r in rows if r["batch_size"] == l and str(l) in r.get("at_t", {})]
        if not batched:
            continue
        # Per run, the regret at t = l over every batched row at this l (identical if the first
        # batch is played by the same initial model on the same users).
        firsts = np.array([r["at_t"][str(l)] for r in batched])
        rand = np.mean(batched[0]["random_at_t"][str(l)])
        first = float(firsts.mean())
        verdict = ("exceeds" if first > goal else "is below")
        per_run = ", ".join(f"{v:,.1f}" for v in firsts[0])
        spread = float(np.ptp(firsts.mean(axis=1)))
        lines.append(
            f"l = {l}: regret at t = l {first:,.1f} (per run {per_run}; spread over the "
            f"{len(batched)} rows at this l: {spread:.3g});"
            f" uniformly random policy {rand:,.1f}; it {verdict} 10 × linucb = {goal:,.0f}"
            f" ({first / lin[0]['mean']:.1f} × linucb's final)")
        for r in batched:
            if r.get("algo") in ("ddp-linucb", "sblb"):
                f_, after = at_first_batch(r)
                assert after is not None
                lines.append(f"    {label(r)}, ε={r['epsilon']:g}: final {r['mean']:,.0f} = "
                             f"{f_:,.0f} (t ≤ l) + {after:,.0f} after ({after / lin[0]['mean']:.1f}"
                             f" × linucb's final)")
    return lines


def order(r: dict[str, Any]) -> tuple[Any, ...]:
    algo = r.get("algo", "ddp-linucb")
    return (r.get("env", "linear"), ALGOS.index(algo) if algo != "linucb" else -1,
            r["honest_fraction"] is not None and r["honest_fraction"] != 1.0,
            r["batch_size"] or 0, r["epsilon"] or 0)


def main() -> None:
    ap = experiment_parser(
        __doc__.splitlines()[0], d=None, K=20, T=1_000_000, runs=3, seed=1, out=OUT,
        helps={"d": "requested dimension (linear: 5; digits: 20 = 10 classes × 2 PCs)",
               "K": "arms (digits: always 10)"})
    ap.add_argument("--env", default="linear", choices=["linear", "digits"])
    ap.add_argument("--epsilons", type=floats, default=[1.0, 0.5, 4.0])
    ap.add_argument("--batch-sizes", type=floats, default=[1000, 100, 10000])
    ap.add_argument("--gammas", type=floats, default=[1.0, 0.5])
    ap.add_argument("--algos", default="ddp-linucb",
                    help=f"comma-separated subset of {','.join(ALGOS)}")
    ap.add_argument("--baselines", action="store_true", help="add linucb, adar-oful and sblb")
    ap.add_argument("--tag", default="grid")
    ap.add_argument("--combine", help="comma-separated grid JSONs to table and plot together")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.combine:
        rows = [r for f in args.combine.split(",") for r in json.loads(Path(f).read_text())]
        rows.sort(key=order)
        for env in sorted({r.get("env", "linear") for r in rows}):
            part = [r for r in rows if r.get("env", "linear") == env]
            print(f"\n{env} (d = {part[0].get('d', 5)}, K = {part[0].get('K', 20)})")
            print("\n".join(table(part)))
            print("\n".join(first_batch_lines(part)))
            png = args.out / f"{args.tag}-{env}.png"
            plot(part, png, f"final regret vs central ε, {env}, d={part[0].get('d', 5)}, "
                            f"K={part[0].get('K', 20)}, T={part[0]['curve'][-1][0]}")
            print(f"wrote {png}")
        return
    algos = [a for a in args.algos.split(",") if a]
    if args.baselines:
        algos += [a for a in BASELINES if a not in algos]
    unknown = set(algos) - set(ALGOS)
    if unknown:
        ap.error(f"unknown algos {sorted(unknown)}")
    d, K = environment_dimensions(args.env, args.d or (5 if args.env == "linear" else 20), args.K)
    path = args.out / f"{args.tag}.json"
    rows: list[dict[str, Any]] = json.loads(path.read_text()) if path.exists() else []
    done = {row_key(r) for r in rows}
    for algo, eps, l, gamma in jobs(algos, args.epsilons, [int(v) for v in args.batch_sizes],
                                    args.gammas):
        if (algo, args.env, eps, l, gamma) in done:
            continue
        row = run_one(algo, args.env, d, K, eps, l, gamma, args.T, args.runs, args.seed)
        rows.append(row)
        path.write_text(json.dumps(rows, indent=1) + "\n")
        first, _ = at_first_batch(row)
        print(f"{row['finished']}  {algo:<10} {args.env} ε={eps} l={l} γ={gamma}: regret "
              f"{row['mean']:10,.0f} ± {row['stderr']:7,.0f}  at t=l "
              f"{'—' if first is None else format(first, ',.0f')}  (central ε "
              f"{row['central_epsilon']}, {row['solved']}, solve {row['solve_seconds']:.0f} s, "
              f"total {row['seconds']:.0f} s)", flush=True)
    plot(rows, args.out / f"{args.tag}.png", f"{args.env}, d={d}, K={K}, T={args.T}")
    print(f"wrote {path} and .png")


if __name__ == "__main__":
    main()
