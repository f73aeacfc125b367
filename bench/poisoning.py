"""Issue 40's three attacks on ``ddp-linucb`` over Prio3, both designs side by side, with the
shipped code (the task's Prio3 instance, verification by both aggregators, the randomizer's
ranges and noise):

1. **one invalid report** among 19 honest (batch of 20): honest reports lost;
2. **edge of range**: the largest per-coordinate move of G̃/ũ an accepted report can make, as a
   multiple of the most an honest report can move that coordinate;
3. **devices that add no noise**: the variance of the noise a released batch sum carries when
   every device sends its rounded statistics alone, as a multiple of what the ledger states
   protects each observer (μ; the public gets both aggregators' noise).

    python -m bench.poisoning [--batches 40] [--json out/poisoning.json]

The services run the same code through HTTP: tests/services/prio3/test_poisoning.py (both
stores) and test_hostile.py (the device-share design).
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import numpy as np

from bench.args import parse
from privbandit.shared.core.policies import randomizer_for
from privbandit.shared.core.randomizers.skellam import SkellamRandomizer
from privbandit.shared.crypto.noise_stream import KeyedBits
from privbandit.shared.crypto.prio3.prio3 import VerifyError
from privbandit.shared.crypto.prio3_task import TaskVdaf, task_vdaf
from privbandit.shared.settings import TaskConfig

L, D = 20, 3


def verified(vd: TaskVdaf, encoded: list[int]) -> bool:
    """Both aggregators' verification of one report of an encoded measurement (valid or not:
    ``shard_encoded`` is what a script can send)."""
    v = vd.vdaf
    key, nonce = secrets.token_bytes(32), secrets.token_bytes(16)
    public, shares = v.shard_encoded(vd.ctx, v.field.vec(encoded), nonce)
    states, vshares = [], []
    for j in range(2):
        st, vs = v.verify_init(key, vd.ctx, j, nonce, public, shares[j])
        states.append(st)
        vshares.append(vs)
    try:
        msg = v.verifier_shares_to_message(vd.ctx, vshares)
        for j in range(2):
            v.verify_next(states[j], msg)
    except (VerifyError, ValueError):
        return False
    return True


def whole(vd: TaskVdaf, measurement: list[int]) -> list[int]:
    """An encoding that decodes to ``measurement`` with each value whole in its entry's first
    element (what an attacker sends to claim a value outside the range: not bits)."""
    p = vd.vdaf.field.MODULUS
    per = vd.vdaf.flp.MEAS_LEN // vd.length
    return [e for x in measurement for e in [int(x) % p] + [0] * (per - 1)]


def run(noise: str, batches: int, rng: np.random.Generator) -> dict[str, Any]:
    config = TaskConfig.model_validate({
        "id": "ddp", "threat_model": "shuffle", "K": 4, "aggregation": "secure-sum",
        "secure_sum": "prio3",
        "policy": {"algo": "ddp-linucb", "d": D, "batch_size": L, "epsilon": 1.0,
                   "delta": 1e-6, "noise": noise}})
    r = randomizer_for(config.policy)
    assert isinstance(r, SkellamRandomizer)
    vd = task_vdaf(config)
    encode = vd.vdaf.flp.encode
    # 1. One invalid report among L − 1 honest ones: the proof refuses it; the honest ones all
    # verify; the batch is released unless the design needs ⌈γ l⌉ valid reports.
    x = rng.normal(size=(L - 1, D))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    valid = sum(verified(vd, list(encode(vd.measurement(r.device_report(xi, 1.0)))))
                for xi in x)
    assert valid == L - 1
    assert not verified(vd, whole(vd, [m + 1 for m in vd.entry_maxima]))
    lost = 0 if r.honest is None or valid >= r.honest else valid
    # 2. The edge: every entry at the top of what the proof accepts (accepted), one beyond
    # (refused); its move per coordinate over the most an honest report moves it.
    top = [m - o for m, o in zip(vd.entry_maxima, vd.entry_offsets, strict=True)]
    assert verified(vd, list(encode(vd.measurement(top))))
    assert not verified(vd, whole(vd, [m + 1 for m in vd.entry_maxima]))
    honest_bound = np.maximum(np.abs(r.range_lo), np.abs(r.range_hi))
    shift = float(np.max(np.abs(np.asarray(top)) / honest_bound))
    # 3. Devices that add no noise: what a released sum carries is what the aggregators add
    # (the shuffler from its keyed stream, the analyzer from the OS CSPRNG), or nothing.
    if vd.noise_variance > 0:
        key = secrets.token_bytes(32)
        residual = np.concatenate([
            np.asarray(vd.noise_sampler(KeyedBits(key, "ddp", f"b{b}").randbits)
                       .sample_vector(vd.length))
            + np.asarray(vd.noise_sampler().sample_vector(vd.length)) for b in range(batches)])
    else:
        residual = np.zeros(batches * vd.length)
    return {
        "noise": noise,
        "honest_reports_lost_per_invalid": int(lost),
        "edge_shift_vs_honest_bound": shift,
        "released_noise_variance_vs_stated": float(residual.var() / r.mu_target),
        "stated_mu": r.mu_target,
        "batch_size": L, "d": D, "batches": batches, "samples": int(residual.size),
    }


def main() -> None:
    args = parse(__doc__, {"batches": 40, "seed": 1}, "out/poisoning.json")
    rng = np.random.default_rng(args.seed)
    rows = [run(noise, args.batches, rng) for noise in ("aggregators", "devices")]
    for row in rows:
        print(f"{row['noise']:>11}: honest reports lost per invalid one "
              f"{row['honest_reports_lost_per_invalid']}, "
              f"edge shift {row['edge_shift_vs_honest_bound']:.2f}x the honest bound, "
              f"noise with zero-noise devices {row['released_noise_variance_vs_stated']:.2f}x "
              f"the stated mu")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
