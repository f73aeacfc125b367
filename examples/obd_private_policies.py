"""Which private policies beat the logged random policy on the Open Bandit Dataset?

Reads an OBD log — the sample obp ships (``obp/dataset/obd/random/all``: 10,000 rounds of the
uniform-random policy over 80 items at 3 positions), found where obp is installed, or the
directory (or rounds CSV) you give; nothing is ever downloaded — with ``privbandit.read_log``
(shared user × item features, the position's one-hot among the user features). Each policy is
trained on the first half of the log with its own device noise, frozen, and valued on the
second half (its FROZEN value), and replayed over the whole log (its ONLINE value, Li et al.
2011). The logged random policy's value is the second half's click rate.

"Beats" is decided by exact intervals, because clicks are rare (0.4 %): the frozen policy's
IPS with its Clopper–Pearson interval (``ips-exact``: a deterministic policy on a uniform log
matches a round with probability 1/K, and its matched clicks are binomial) against the click
rate's Clopper–Pearson interval — "beats" where the policy's lower end is above the random
policy's upper end, "worse" where its upper end is below the other's lower end, else "not
distinguishable". The normal-interval IPS, SNIPS, DR and gain (IPS of the difference) are in
the JSON with the overlap diagnostic and its warnings.

    python examples/obd_private_policies.py [PATH] [--epsilons 1,8] [--repeats 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import beta as beta_dist

import privbandit

# Features kept small enough for every private policy (d = 55): the first user feature (3
# levels) and the position (3), times an intercept, the item's price-like number and its third
# category (7 levels); plus each item's user-item affinity.
USER_COLUMNS = ["user_feature_0"]
ITEM_COLUMNS = ["item_feature_0", "item_feature_3"]
# (policy, its privacy parameter's name) — each run at every ε of --epsilons.
PRIVATE = (("ldp-linucb", "local ε per report"), ("sblb", "central ε, shuffle model"),
           ("ddp-linucb", "central ε, distributed (secure sum)"),
           ("adar-oful", "RDP ε at α, rewards only"))


def obp_sample() -> Path | None:
    """obp's shipped sample (random policy, all items), where obp is installed."""
    spec = importlib.util.find_spec("obp")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "dataset" / "obd" / "random" / "all"
    return path if (path / "item_context.csv").is_file() else None


def clopper_pearson(c: int, n: int, level: float = 0.95) -> tuple[float, float]:
    tail = (1 - level) / 2
    low = 0.0 if c == 0 else float(beta_dist.ppf(tail, c, n - c + 1))
    high = 1.0 if c == n else float(beta_dist.ppf(1 - tail, c + 1, n - c))
    return low, high


def verdict(est: dict[str, float], random: dict[str, float]) -> str:
    if est["low"] > random["high"]:
        return "beats"
    if est["high"] < random["low"]:
        return "worse"
    return "not distinguishable"


def evaluate(log: dict[str, Any], algo: str, d: int, repeats: int, seed: int,
             **params: Any) -> dict[str, Any]:
    frozen = privbandit.frozen_distribution(log, algo, d=d, seed=seed, **params)
    ev = privbandit.evaluate_distribution(
        log, frozen.action_dist, rows=frozen.rows,
        estimators=("ips-exact", "ips", "snips", "dr", "gain"))
    replay = privbandit.replay(log, algo, d=d, repeats=repeats, seed=seed, **params)
    kept = int(replay.n)
    return {"frozen": ev.to_dict(), "model_version": frozen.model_version,
            "replay": replay.to_dict(), "replay_kept": kept,
            "ledger": privbandit.policy_ledger(algo, T=int(log["n_rounds"]), d=d,
                                               **params).model_dump()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("path", nargs="?", type=Path,
                   help="an OBD directory (rounds CSV + item_context.csv) or rounds CSV; "
                        "default: the sample of an installed obp")
    p.add_argument("--epsilons", default="1,8", help="comma-separated privacy levels")
    p.add_argument("--repeats", type=int, default=3, help="replays per policy")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="write every estimate here")
    args = p.parse_args(argv)
    path = args.path or obp_sample()
    if path is None:
        print("error: no OBD files: give their directory (e.g. obp's "
              "obp/dataset/obd/random/all, with all.csv and item_context.csv); this example "
              "never downloads", file=sys.stderr)
        return 2
    try:
        log = privbandit.read_log(path, fmt="obd", user_columns=USER_COLUMNS,
                                  item_columns=ITEM_COLUMNS)
    except privbandit.LogFormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not np.allclose(log["pscore"], 1 / log["n_actions"]):
        print("error: this example compares with a uniform-random logging policy (OBD's "
              "'random' logs); the log's propensities are not 1/K", file=sys.stderr)
        return 2
    n, K = int(log["n_rounds"]), int(log["n_actions"])
    d = privbandit.feature_dimension(log)
    cut = n // 2
    clicks = int(log["reward"][cut:].sum())
    low, high = clopper_pearson(clicks, n - cut)
    random = {"value": clicks / (n - cut), "low": low, "high": high, "clicks": clicks,
              "rounds": n - cut}
    epsilons = [float(e) for e in args.epsilons.split(",")]
    runs: list[dict[str, Any]] = [{"algo": "linucb", "privacy": "none", "epsilon": None,
                                   **evaluate(log, "linucb", d, args.repeats, args.seed)}]
    for algo, meaning in PRIVATE:
        for eps in epsilons:
            runs.append({"algo": algo, "privacy": meaning, "epsilon": eps,
                         **evaluate(log, algo, d, args.repeats, args.seed, epsilon=eps)})
    for run in runs:
        exact = run["frozen"]["estimates"]["ips-exact"]
        run["verdict"] = verdict(exact, random)
    out = {"log": str(path), "n_rounds": n, "n_actions": K, "d": d,
           "positions": log["positions"], "random": random, "policies": runs}
    print(table(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, allow_nan=False) + "\n")
    return 0


def table(out: dict[str, Any]) -> str:
    r = out["random"]
    lines = [f"OBD log {out['log']}: {out['n_rounds']} rounds, K = {out['n_actions']}, "
             f"d = {out['d']}; logged random policy on the second half: "
             f"{r['value']:.4f} [{r['low']:.4f}, {r['high']:.4f}] ({r['clicks']} clicks "
             f"in {r['rounds']} rounds)", "",
             "| policy | ε | model updates | frozen: IPS, exact 95% | frozen: DR, normal 95% "
             "| online: replay (kept) | vs random |", "|---|---|---|---|---|---|---|"]
    for run in out["policies"]:
        f = run["frozen"]["estimates"]
        x, dr, rp = f["ips-exact"], f["dr"], run["replay"]
        eps = "—" if run["epsilon"] is None else f"{run['epsilon']:g} ({run['privacy']})"
        lines.append(f"| {run['algo']} | {eps} | {run['model_version']} | "
                     f"{x['value']:.4f} [{x['low']:.4f}, "
                     f"{x['high']:.4f}] | {dr['value']:.4f} [{dr['low']:.4f}, "
                     f"{dr['high']:.4f}] | {rp['value']:.4f} ({run['replay_kept']}) | "
                     f"{run['verdict']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
